"""Recipes: every preset builds a real Megatron-Bridge ConfigContainer that passes Megatron-Bridge's validation,
and the foundation's FLOPs equal Megatron-Bridge's calculator on each built config."""

from __future__ import annotations

import pytest

from bridgebench.config.compose import compose, group_options, model_spec, recipe_releases
from bridgebench.model.flops import model_flops

pytestmark = pytest.mark.megatron
PRESETS = group_options("recipe")
#: every (recipe, release) that has values, AdamW; Muon at the installed release and at the Table 1 releases
CASES = [(p, r, "adamw") for p in PRESETS for r in recipe_releases(p)] + [
    (p, r, "muon") for p in PRESETS for r in recipe_releases(p) if r in ("26.08", "26.02", "26.02.01")
]


@pytest.fixture(scope="module")
def recipes():
    from bridgebench.mbridge import build, compat, setup

    setup()  # the Transformer Engine stand-in before any Megatron-Bridge import (also when a test runs alone)
    return build, compat


@pytest.mark.parametrize(("preset", "release", "optimizer"), CASES)
def test_every_preset_builds_and_validates(recipes, preset, release, optimizer, tmp_path):
    build, _ = recipes
    cfg = compose([f"recipe={preset}", f"release={release}", f"optimizer={optimizer}"])
    result = build.build(cfg)
    c = result.container
    assert c.model.num_layers == cfg.model.num_layers
    assert c.model.expert_model_parallel_size == cfg.model.expert_model_parallel_size
    assert c.train.global_batch_size == cfg.train.global_batch_size
    assert c.data_parallel_size == cfg.num_gpus // (
        cfg.model.tensor_model_parallel_size * cfg.model.pipeline_model_parallel_size * cfg.model.context_parallel_size
    )
    if optimizer == "muon":
        assert c.optimizer.optimizer == "dist_muon"
        assert c.optimizer.use_distributed_optimizer is False and c.ddp.use_distributed_optimizer is False
        assert c.ddp.overlap_param_gather is False and c.mixed_precision.fp8_param_gather is False
    allowed = {f"{s}.{k}" for s, k, _, _ in build.NODE_ONLY_SETTINGS} | {"model.moe_flex_dispatcher_num_sms"}
    assert {s.split(" ")[0].split("=")[0] for s in result.skipped_checks} <= allowed
    # Megatron-Bridge's own FLOPs calculator on the built container = bridgebench's (formula v2 = MB 0.6.x)
    from megatron.bridge.training.utils.flop_utils import num_floating_point_operations

    gbs = cfg.train.global_batch_size
    ours = float(
        model_flops(
            model_spec(cfg), gbs, tensor_model_parallel_size=cfg.model.tensor_model_parallel_size, formula="v2"
        ).total
    )
    assert num_floating_point_operations(c, gbs) == pytest.approx(ours, rel=1e-12)
    build.dump(c, tmp_path / "mb.yaml")
    assert "num_layers" in (tmp_path / "mb.yaml").read_text()


@pytest.mark.parametrize(
    "name", ["kimi_k2", "qwen3_30b_a3b", "qwen3_235b_a22b", "deepseek_v3", "llama3_70b", "llama31_405b"]
)
def test_recipe_provider_agrees_with_model_yaml(recipes, name):
    """The provider Megatron-Bridge builds from the shipped HF config.json matches configs/model field by field."""
    _, compat = recipes
    spec = model_spec(compose([f"model={name}"]))
    provider = compat.recipe(name)().model
    fields = [
        "num_layers",
        "hidden_size",
        "ffn_hidden_size",
        "num_attention_heads",
        "vocab_size",
        "make_vocab_size_divisible_by",
    ]
    if spec.is_moe:
        fields += ["num_moe_experts", "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size", "moe_router_topk"]
    if spec.multi_latent_attention:
        fields += ["q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"]
    else:
        fields += ["num_query_groups", "kv_channels"]
    for f in fields:
        assert getattr(provider, f) == getattr(spec, f), (name, f)
    if spec.is_moe:
        freq = provider.moe_layer_freq
        pattern = [1 if i % freq == 0 else 0 for i in range(spec.num_layers)] if isinstance(freq, int) else freq
        assert list(pattern) == spec.moe_layer_pattern


def test_config_hash_is_stable_and_sensitive():
    from bridgebench.mbridge.build import config_hash

    a = config_hash(compose(["recipe=qwen3_30b_a3b_gb300_mxfp8", "optimizer=muon"]))
    b = config_hash(compose(["recipe=qwen3_30b_a3b_gb300_mxfp8", "optimizer=muon"]))
    c = config_hash(compose(["recipe=qwen3_30b_a3b_gb300_mxfp8", "optimizer=muon", "train.global_batch_size=256"]))
    d = config_hash(compose(["recipe=qwen3_30b_a3b_gb300_mxfp8", "optimizer=muon", "release=26.08"]))
    assert a == b != c and len(a) == 12
    assert d != a  # another release's recipe values, not only another image


def test_megatron_bridge_rejection_is_reported(recipes):
    build, _ = recipes
    cfg = compose(
        ["recipe=qwen3_30b_a3b_gb300_mxfp8", "model.context_parallel_size=2", "model.seq_length=4094", "num_gpus=16"]
    )
    with pytest.raises(build.BuildError, match="Megatron-Bridge rejected the configuration"):
        build.build(cfg)


def test_release_api_differences(recipes):
    _, compat = recipes
    fields = {"muon_nesterov": True, "muon_coefficient_type": "quintic", "lr": 1e-3}
    assert compat.optimizer_fields(fields, "0.3") == {"muon_use_nesterov": True, "lr": 1e-3}
    assert compat.optimizer_fields(fields, "0.6") == fields
    with pytest.raises(compat.CompatError, match="not available in Megatron-Bridge API 0.3"):
        compat.optimizer_fields({"muon_coefficient_type": "polar_express"}, "0.3")
    with pytest.raises(compat.CompatError, match="unknown Megatron-Bridge API"):
        compat.api("9.9")
