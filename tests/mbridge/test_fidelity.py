"""Every recipe is NVIDIA's benchmark: bridgebench's ConfigContainer equals Megatron-Bridge's own perf recipe of the
same release, field by field, except the short allow-list below (one reason per entry).

- Installed release (26.08, Megatron-Bridge 0.6.2): against the perf recipe functions, called here
  (``bridgebench.mbridge.upstream.perf_container``), every field of the container.
- Older releases: against the shipped dumps of that release's executed upstream configuration
  (``tests/data/upstream_recipes/<release>/``, SOURCES.md there), on every field both containers have.

Equivalent encodings are normalized before comparing (``bridgebench.mbridge.recipes.normalized``): a pipeline
layout as Megatron-Core's list of stages or its string form, env values as strings (the process environment is
strings).
"""

from __future__ import annotations

import functools

import pytest

from bridgebench.mbridge import upstream
from bridgebench.mbridge.diff import MISSING, compare

pytestmark = pytest.mark.megatron

INSTALLED = "26.08"

#: Fields where a built container may differ from upstream, and why. Nothing else may differ.
ALLOWED = {
    "checkpoint.load": "upstream keeps the base recipe's path under its working directory (a checkpoint found there "
    "would be loaded); bridgebench loads none (configs/config.yaml checkpoint.load: null)",
    "logger.tensorboard_dir": "run policy job.tensorboard_subdir: TensorBoard events in the run's job directory for "
    "the log reader; upstream perf recipes write none",
    "tokenizer.tokenizer_type": "run policy job.offline_tokenizer: NullTokenizer instead of the Hugging Face tokenizer "
    "(offline; mock data needs only the vocabulary size and EOD id)",
    "tokenizer.tokenizer_model": "run policy job.offline_tokenizer (no Hugging Face tokenizer to name)",
    "tokenizer.vocab_size": "run policy job.offline_tokenizer: the NullTokenizer gets the model's vocabulary size; "
    "tokenizer.use_tokenizer_vocab_size is False as upstream, so the model's vocabulary and FLOPs are unchanged",
    "tokenizer.hf_tokenizer_kwargs": "run policy job.offline_tokenizer (the pinned tokenizer revision goes with it)",
    "model.moe_a2a_overlap": "an attribute some 0.6.2 Qwen3 recipes still assign, but no field of any 0.6.2 config "
    "and read nowhere in megatron-core 0.19.2 / megatron-bridge 0.6.2 (the field is "
    "comm_overlap.overlap_moe_expert_parallel_comm); a config can only set fields",
}
#: Extra entries for older releases, whose containers were built by another Megatron-Bridge version.
ALLOWED_OLDER = {
    "model.__class__": "provider classes were merged in Megatron-Bridge 0.6 (e.g. Qwen3MoEModelProvider, "
    "KimiK2Provider -> GPTModelProvider / MLAModelProvider); their fields are compared one by one",
    "dataset.__class__": "0.3-0.5 launchers use MockGPTDatasetConfig; 0.6 recipes use GPTDatasetConfig with no "
    "blend, which Megatron-Core turns into mock data (blended_megatron_dataset_config.py); fields compared one by one",
    "rng.__class__": "RNGConfig moved from megatron.bridge.training.config to megatron.training.config",
    "ddp.__class__": "DistributedDataParallelConfig subclassed in megatron.bridge.training.config in 0.3.x",
    "model.hf_model_id": "provider metadata (the Hugging Face id it was built from); 0.3.x providers leave it None, "
    "and bridgebench's configs/model uses the name for its own bookkeeping",
}


def unexpected(up: dict, ours: dict, *, older: bool) -> list[str]:
    """Differences outside the allow-list, as ``field: upstream != bridgebench`` lines (older: shared fields only)."""
    allowed = {**ALLOWED, **(ALLOWED_OLDER if older else {})}
    out = []
    for d in compare(up, ours):
        if d.field in allowed or (older and MISSING in (d.a, d.b)):
            continue
        out.append(f"{d.field}: upstream {d.a!r} != bridgebench {d.b!r}")
    return out


@functools.cache
def built(recipe: str, release: str, optimizer: str, *extra: str) -> dict:
    from bridgebench.mbridge.recipes import built_flat

    return built_flat([f"recipe={recipe}", f"release={release}", f"optimizer={optimizer}", *extra])


@functools.cache
def reference(recipe: str, release: str, optimizer: str) -> dict:
    from bridgebench.mbridge.recipes import upstream_flat

    return upstream_flat(recipe, release, optimizer)[0]


INSTALLED_CASES = [(r, o) for r, spec in upstream.PERF_RECIPES_0_6.items() for o in spec.optimizers]
DUMP_CASES = sorted(
    (p.parent.name, p.stem.split("__")[0], "adamw" if p.stem.endswith("__adam") else "muon")
    for p in upstream.DUMPS.glob("*/*__*.yaml")
)


@pytest.mark.parametrize(("recipe", "optimizer"), INSTALLED_CASES)
def test_installed_release_equals_perf_recipe(recipe, optimizer):
    up, ours = reference(recipe, INSTALLED, optimizer), built(recipe, INSTALLED, optimizer)
    assert len(up) > 500 and set(up) - set(ALLOWED) == set(ours) - set(ALLOWED)
    assert unexpected(up, ours, older=False) == []


@pytest.mark.parametrize(("release", "recipe", "optimizer"), DUMP_CASES)
def test_older_release_equals_shipped_dump(release, recipe, optimizer):
    up, ours = reference(recipe, release, optimizer), built(recipe, release, optimizer)
    shared = set(up) & set(ours)
    assert len(shared) > 500, "the dump and the container share too few fields to be compared"
    assert unexpected(up, ours, older=True) == []


def test_allow_listed_values_are_bridgebench_policies():
    """The allow-listed fields hold exactly the documented policy values, not something else."""
    ours = built("qwen3_30b_a3b_gb300_mxfp8", INSTALLED, "adamw")
    assert ours["checkpoint.load"] is None and ours["checkpoint.save"] is None
    assert ours["logger.tensorboard_dir"] == "out/tensorboard"  # build's default out dir (the job exports its own)
    assert ours["tokenizer.tokenizer_type"] == "NullTokenizer" and ours["tokenizer.tokenizer_model"] is None
    assert ours["tokenizer.vocab_size"] == ours["model.vocab_size"] == 151936
    assert ours["tokenizer.use_tokenizer_vocab_size"] is False


def test_a_perturbed_field_fails_the_comparison():
    """The check can fail: one changed upstream value (a user override here) is reported by name."""
    up = reference("qwen3_30b_a3b_gb300_mxfp8", INSTALLED, "adamw")
    ours = built("qwen3_30b_a3b_gb300_mxfp8", INSTALLED, "adamw", "model.moe_paged_stash=false")
    assert unexpected(up, ours, older=False) == ["model.moe_paged_stash: upstream True != bridgebench False"]
    older = reference("qwen3_30b_a3b_gb300_mxfp8", "26.02", "adamw")
    ours = built("qwen3_30b_a3b_gb300_mxfp8", "26.02", "adamw", "model.cuda_graph_impl=none")
    assert unexpected(older, ours, older=True) == [
        "model.cuda_graph_impl: upstream 'transformer_engine' != bridgebench 'none'"
    ]


@pytest.mark.parametrize("release", [INSTALLED, "26.02.01"])
def test_qwen3_muon_is_kimi_k2s_muon_changes(release):
    """bridgebench's Qwen3 30B-A3B Muon (no upstream recipe) = Qwen3's AdamW values + exactly the fields in which Kimi
    K2's Muon differs from its AdamW (and the switch's optimizer fields) + Muon's required settings, all with Kimi K2
    Muon's values."""
    qwen_adam = built("qwen3_30b_a3b_gb300_mxfp8", release, "adamw")
    qwen_muon = built("qwen3_30b_a3b_gb300_mxfp8", release, "muon")
    kimi_adam, kimi_muon = built("kimi_k2_gb300_mxfp8", release, "adamw"), built("kimi_k2_gb300_mxfp8", release, "muon")
    from bridgebench.mbridge.recipes import MUON_REQUIRED, MUON_SWITCH_FIELDS

    kimi_changes = {d.field for d in compare(kimi_adam, kimi_muon)} | {f"optimizer.{f}" for f in MUON_SWITCH_FIELDS}
    qwen_changes = {d.field for d in compare(qwen_adam, qwen_muon)}
    assert "optimizer.optimizer" in qwen_changes and qwen_changes <= kimi_changes | set(MUON_REQUIRED)
    for field in qwen_changes:
        assert qwen_muon[field] == kimi_muon[field], field  # incl. the required settings: Kimi K2 Muon has them
    assert qwen_muon["optimizer.muon_nesterov"] is True and qwen_muon["optimizer.adam_beta2"] == 0.999


def test_release_without_the_recipe_is_refused():
    from bridgebench.config.compose import ConfigError, compose

    with pytest.raises(ConfigError, match=r"kimi_k2_gb300_mxfp8 has no values for release 26\.02: .*26\.02\.01"):
        compose(["recipe=kimi_k2_gb300_mxfp8", "release=26.02"])


def test_release_plans_differ_exactly_where_upstream_changed():
    """Qwen3 30B-A3B on GB300: the 26.02 and 26.08 containers differ in exactly the fields in which upstream's 26.02
    and 26.08 configurations differ (fields all four share; allow-listed ones aside) -- and that includes the
    full-iteration CUDA graphs, paged stash and HybridEP / a2a-overlap changes."""
    recipe = "qwen3_30b_a3b_gb300_mxfp8"
    ours_a, ours_b = built(recipe, "26.02", "adamw"), built(recipe, INSTALLED, "adamw")
    up_a, up_b = reference(recipe, "26.02", "adamw"), reference(recipe, INSTALLED, "adamw")
    shared = set(ours_a) & set(ours_b) & set(up_a) & set(up_b)
    skip = set(ALLOWED) | set(ALLOWED_OLDER)
    ours = {d.field for d in compare(ours_a, ours_b) if d.field in shared and d.field not in skip}
    theirs = {d.field for d in compare(up_a, up_b) if d.field in shared and d.field not in skip}
    assert ours == theirs
    assert {
        "model.cuda_graph_impl",
        "model.cuda_graph_scope",
        "model.use_transformer_engine_op_fuser",
        "mixed_precision.fp8_dot_product_attention",
        "comm_overlap.overlap_moe_expert_parallel_comm",
        "comm_overlap.delay_wgrad_compute",
        "env_vars.TORCH_NCCL_AVOID_RECORD_STREAMS",
    } <= ours
    # the paged stash exists from 26.06 on: absent from the 26.02 dump, on in 26.08
    assert ours_b["model.moe_paged_stash"] is True and ours_a["model.moe_paged_stash"] is False


def test_qwen3_tokenizer_builds_offline():
    """The planned Qwen3 container's tokenizer builds with Megatron-Bridge's own build_tokenizer, offline."""
    import os

    from bridgebench.config.compose import compose
    from bridgebench.mbridge.build import build

    result = build(compose(["recipe=qwen3_30b_a3b_gb300_mxfp8", "release=26.02"]), validate=False)
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    from megatron.bridge.training.tokenizers.tokenizer import build_tokenizer

    tok = build_tokenizer(result.container.tokenizer)
    assert tok.vocab_size == result.container.model.vocab_size == 151936
    assert any("NullTokenizer" in p for p in result.policies)


def test_no_checkpoint_no_eval_and_user_overrides_reach_the_container():
    from bridgebench.config.compose import ConfigError, compose
    from bridgebench.mbridge.build import build

    c = build(compose(["recipe=kimi_k2_gb300_mxfp8", "release=26.08", "optimizer=muon"])).container
    assert c.checkpoint.save is None and c.checkpoint.load is None
    assert c.train.eval_iters == 0 and c.logger.log_interval == 1
    c = build(
        compose(
            [
                "recipe=kimi_k2_gb300_mxfp8",
                "release=26.08",
                "scheduler.lr_warmup_iters=7",
                "checkpoint.save=/ckpt",
                "+model.moe_router_dtype=fp64",
            ]
        ),
        validate=False,
    ).container
    assert (c.scheduler.lr_warmup_iters, c.checkpoint.save, c.model.moe_router_dtype) == (7, "/ckpt", "fp64")
    with pytest.raises(ConfigError, match="scheduler.lr_warmup_iterations is not a field of Megatron-Bridge"):
        compose(["recipe=kimi_k2_gb300_mxfp8", "release=26.08", "+scheduler.lr_warmup_iterations=7"])
