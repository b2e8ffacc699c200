"""The values a built ConfigContainer keeps where a composed config leaves a field out (its base recipe's, its
mixed-precision recipe's): the shipped mbridge_starts.json is the installed Megatron-Bridge's, and the sweep engine's
models see exactly what the build holds."""

from __future__ import annotations

import json

import pytest

from bridgebench import sweep as engine
from bridgebench.config.schema import START_FIELDS, STARTS_FILE

pytestmark = pytest.mark.megatron


def test_shipped_start_values_are_the_installed_megatron_bridges():
    from bridgebench.mbridge.catalogs import start_catalog

    assert json.loads(STARTS_FILE.read_text()) == start_catalog(), "run: bridgebench recipes fields"


@pytest.mark.parametrize(
    "overrides",
    [
        ["recipe=kimi_k2_gb300_mxfp8", "release=26.02.01", "optimizer=muon"],  # selective recompute from the base
        ["model=qwen3_30b_a3b"],  # no recipe: full recompute and FP32 grad reduce from Megatron-Bridge's base recipe
        ["recipe=deepseek_v3_gb300_mxfp8", "release=26.08"],
    ],
)
def test_the_sweep_sees_what_the_build_keeps(overrides):
    from bridgebench.mbridge.recipes import built_flat

    built = built_flat(overrides)
    base = engine.base_of(overrides)
    assert {k: base.flat[k] for k in START_FIELDS} == {k: built[k] for k in START_FIELDS}


def test_the_time_model_prices_the_dispatcher_the_base_recipe_sets():
    """DeepSeek V3's 26.08 GB300 recipe does not write the dispatcher: Megatron-Bridge 0.6.2's base recipe already
    sets HybridEP (``recipes/deepseek/h100/deepseek_v3.py``, made the flex dispatcher by
    ``apply_flex_dispatcher_backend``). Before stop 32 the sweep did not see it and priced ``alltoall``; the recipe's
    per-rank token budget makes that dispatch free of host waits."""
    from bridgebench.config.time_knobs import shown_knobs, time_knobs
    from bridgebench.model.steptime.config import TimeConfig

    base = engine.base_of(["recipe=deepseek_v3_gb300_mxfp8", "release=26.08"])
    v = engine.effective(base, {})
    knobs = time_knobs(v)
    assert (knobs["moe_token_dispatcher_type"], knobs["moe_flex_dispatcher_backend"]) == ("flex", "hybridep")
    assert knobs["moe_expert_rank_capacity_factor"] == 1.5
    shown = shown_knobs(v)
    assert shown["dispatcher"] == "hybridep" and shown["expert_capacity"] == "dropless, rank budget 1.5"
    cfg = engine.time_config(v, base.gpu)
    assert isinstance(cfg, TimeConfig) and cfg.dispatcher == "hybridep" and not cfg.host_synced_dispatch


def test_shipped_perf_settings_are_the_installed_megatron_bridges():
    from bridgebench.config.schema import PERF_FILE
    from bridgebench.mbridge.catalogs import perf_catalog

    assert json.loads(PERF_FILE.read_text()) == perf_catalog(), "run: bridgebench recipes fields"


def test_a_model_without_a_recipe_builds_through_the_generic_provider(tmp_path, monkeypatch):
    """A model of $BRIDGEBENCH_CONFIG_DIR (Mixtral 8x7B) gets a real, validated ConfigContainer from Megatron-Bridge's
    GPTModelProvider over its generic pretraining template; the sweep sees the values the build keeps."""
    from bridgebench.config.compose import compose
    from bridgebench.mbridge.build import build

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "mixtral_8x7b.yaml").write_text(
        "name: mixtral_8x7b\ndisplay_name: Mixtral 8x7B\nnum_layers: 32\nhidden_size: 4096\nffn_hidden_size: 14336\n"
        "num_attention_heads: 32\nnum_query_groups: 8\nkv_channels: 128\nnum_moe_experts: 8\n"
        "moe_ffn_hidden_size: 14336\nmoe_router_topk: 2\nvocab_size: 32000\nseq_length: 4096\n"
    )
    monkeypatch.setenv("BRIDGEBENCH_CONFIG_DIR", str(tmp_path))
    ov = ["model=mixtral_8x7b", "gpu=h100", "precision=bf16", "num_gpus=16", "train.global_batch_size=64",
          "model.expert_model_parallel_size=8", "model.tensor_model_parallel_size=2",
          "model.sequence_parallel=true"]  # fmt: skip
    result = build(compose(ov))
    model = result.container.model
    assert type(model).__name__ == "GPTModelProvider"
    assert (model.num_moe_experts, model.moe_router_topk, model.expert_model_parallel_size) == (8, 2, 8)
    assert result.container.tokenizer.tokenizer_type == "NullTokenizer"
    base = engine.base_of(ov)
    assert base.flat["model.recompute_granularity"] == model.recompute_granularity
    assert base.flat["ddp.use_megatron_fsdp"] == result.container.ddp.use_megatron_fsdp
