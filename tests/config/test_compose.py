"""Model facts and config composition: the YAMLs are the one source of truth, bad input fails with the rule."""

from __future__ import annotations

import pytest

from bridgebench.config.compose import ConfigError, compose, expand_sweep, group_options, model_spec, run_facts
from bridgebench.model.spec import ModelSpec, ModelSpecError
from tests.conftest import MODELS


def test_model_group_lists_the_six_models():
    assert set(MODELS) <= set(group_options("model"))


@pytest.mark.parametrize("name", MODELS)
def test_model_configs_compose_and_validate(name):
    spec = model_spec(compose([f"model={name}"]))
    assert spec.name == name
    assert spec.num_attention_heads % spec.query_groups == 0
    assert len(spec.moe_layer_pattern) == spec.num_layers
    assert spec.hf_model_id and spec.published_name


def test_known_architecture_facts(models):
    kimi, dsv3, qwen = models["kimi_k2"], models["deepseek_v3"], models["qwen3_30b_a3b"]
    # Kimi K2: first layer dense, 60 MoE layers, 384 experts top-8 (KimiK2Provider v0.3.1)
    assert kimi.moe_layer_pattern[0] == 0 and sum(kimi.moe_layer_pattern) == 60 and kimi.num_moe_experts == 384
    # DeepSeek V3: first three layers dense, one MTP layer
    assert dsv3.moe_layer_pattern[:4] == [0, 0, 0, 1] and dsv3.mtp_layers == 1
    # Qwen3 30B-A3B: GQA 32 heads / 4 groups, vocab padded to a multiple of 128 * TP
    assert (qwen.num_attention_heads, qwen.query_groups) == (32, 4)
    assert qwen.padded_vocab_size(1) == 151936 and qwen.padded_vocab_size(2) == 152064


def test_unknown_model_lists_known_ones():
    with pytest.raises(ConfigError, match=r"unknown model 'kimi'.*kimi_k2"):
        compose(["model=kimi"])


@pytest.mark.parametrize(
    "override,match",
    [
        ("model.hidden_size=0", "hidden_size must be a positive integer"),
        ("model.num_layers=-4", "num_layers must be a positive integer"),
        ("model.seq_length=abc", "model.seq_length=abc -- Value .abc. of type .str. could not be converted to Integer"),
        ("model.num_query_groups=5", "divisible by num_query_groups"),
        ("model.moe_router_topk=500", "exceeds num_moe_experts"),
        ("num_gpus=0", "num_gpus must be a positive integer"),
        ("train.global_batch_size=-1", "global_batch_size must be a positive integer"),
    ],
)
def test_bad_values_name_the_rule(override, match):
    with pytest.raises(ConfigError, match=match):
        run_facts(compose(["model=qwen3_30b_a3b", override]))


def test_field_that_does_not_exist():
    with pytest.raises(ConfigError, match="foo"):
        compose(["model.foo=1"])
    # `+` adds the key for Hydra; the schema still refuses a field Megatron-Bridge does not have
    with pytest.raises(ConfigError, match="model.foo is not a field of Megatron-Bridge 0.6.2's model section"):
        compose(["+model.foo=1"])
    with pytest.raises(ConfigError, match="did you mean lr_warmup_iters"):
        compose(["+scheduler.lr_warmup_iter=10"])
    with pytest.raises(ConfigError, match="scheduler.lr_warmup_iters = 'ten': Megatron-Bridge 0.6.2 declares it int"):
        compose(["scheduler.lr_warmup_iters=ten"])


def test_unknown_release_and_numeric_release_names():
    with pytest.raises(ConfigError, match="unknown release '27.01'"):
        compose(["release=27.01"])
    # Hydra would read 26.04 as a float; bridgebench keeps release names strings
    assert compose(["release=26.04"]).release.name == "26.04"
    assert compose(["release=26.06"]).accounting.flops_formula == "v2"
    assert compose(["release=26.02.01"]).accounting.flops_formula == "v1"


def test_moe_layer_freq_rules():
    base = dict(
        name="x",
        num_layers=4,
        hidden_size=64,
        ffn_hidden_size=128,
        num_attention_heads=4,
        vocab_size=100,
        seq_length=16,
        num_moe_experts=8,
        moe_router_topk=2,
    )
    assert ModelSpec.from_mapping({**base, "moe_layer_freq": 2}).moe_layer_pattern == [1, 0, 1, 0]
    with pytest.raises(ModelSpecError, match="must hold num_layers=4 values"):
        ModelSpec.from_mapping({**base, "moe_layer_freq": [0, 1]})
    with pytest.raises(ModelSpecError, match="missing required field"):
        ModelSpec.from_mapping({k: v for k, v in base.items() if k != "hidden_size"})


def test_table1_experiment_expands_to_four_runs():
    runs = expand_sweep(["experiment=table1"])
    assert len(runs) == 4
    facts = [run_facts(compose(r)) for r in runs]
    assert {(f.model.name, f.is_muon) for f in facts} == {
        ("kimi_k2", False),
        ("kimi_k2", True),
        ("qwen3_30b_a3b", False),
        ("qwen3_30b_a3b", True),
    }
    kimi = next(f for f in facts if f.model.name == "kimi_k2")
    assert kimi.num_gpus == 256 and kimi.parallel["pipeline_model_parallel_size"] == 4
    assert kimi.parallel["expert_model_parallel_size"] == 64 and kimi.global_batch_size == 4096
    # a sweep on the command line multiplies the runs; a fixed override replaces the experiment's axis
    assert len(expand_sweep(["experiment=table1", "release=26.02,26.04"])) == 8
    assert len(expand_sweep(["experiment=table1", "optimizer=muon"])) == 2


def test_paths_group_resolves_env_overrides_and_stays_out_of_the_config_hash(monkeypatch, tmp_path):
    from bridgebench.config.hashing import config_hash
    from bridgebench.paths import REPO_ROOT, load_paths

    before = config_hash(compose(["recipe=qwen3_30b_a3b_gb300_mxfp8"]))
    assert load_paths().results == REPO_ROOT / "results" / "runs"
    monkeypatch.setenv("BRIDGEBENCH_RESULTS", str(tmp_path / "store"))
    assert load_paths().results == tmp_path / "store"
    cfg = compose(["recipe=qwen3_30b_a3b_gb300_mxfp8"])
    assert cfg.paths.results == str(tmp_path / "store")
    assert config_hash(cfg) == before  # where results go is not part of what runs
    assert config_hash(compose(["recipe=qwen3_30b_a3b_gb300_mxfp8", "train.global_batch_size=256"])) != before


def test_env_vars_that_follow_from_the_gpu_and_ep_are_derived():
    from omegaconf import OmegaConf

    env = OmegaConf.to_container(compose(["recipe=kimi_k2_gb300_mxfp8", "release=26.08"]).env_vars, resolve=True)
    assert (env["NVLINK_DOMAIN_SIZE"], env["USE_MNNVL"], env["NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN"]) == (
        "72",
        "1",
        "64",
    )
    env = OmegaConf.to_container(
        compose(["recipe=qwen3_30b_a3b_gb300_mxfp8", "gpu=b200", "model.expert_model_parallel_size=4"]).env_vars,
        resolve=True,
    )
    assert (env["NVLINK_DOMAIN_SIZE"], env["USE_MNNVL"], env["NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN"]) == (
        "8",
        "0",
        "4",
    )


def test_model_schema_is_generated_from_model_spec():
    import dataclasses

    from bridgebench.config.schema import ModelSchema
    from bridgebench.model.spec import ModelSpec

    schema = {f.name for f in dataclasses.fields(ModelSchema)}
    assert {f.name for f in dataclasses.fields(ModelSpec)} - {"extra"} <= schema


@pytest.mark.parametrize(
    "override,expected",
    [
        # issue 18: Hydra's advice was "+train.global_batch_sise=256", i.e. to add the typo
        ("train.global_batch_sise=256", "did you mean global_batch_size (train.global_batch_size=256)?"),
        ("model.tensor_model_paralel_size=2", "did you mean tensor_model_parallel_size"),
        ("modle.num_layers=3", "did you mean model (model.num_layers=3)?"),
        ("gpu.peak_tflops.bf17=1", "did you mean bf16"),
        ("recipe_meta.nam=x", "did you mean name"),
        # a real Megatron-Bridge field nothing sets yet: how to set it, not "did you mean"
        ("train.exit_duration_in_mins=5", "set it with +train.exit_duration_in_mins=5"),
        # nothing close: the keys that exist there
        ("train.zzzzzzzz=1", "keys there: eval_interval, eval_iters, global_batch_size"),
    ],
)
def test_misspelled_existing_keys_get_the_closest_names(override, expected):
    with pytest.raises(ConfigError) as err:
        compose(["recipe=qwen3_30b_a3b_gb300_mxfp8", override])
    assert expected in str(err.value)
    typo = override.split("=")[0]
    assert f"+{typo}=" not in str(err.value) or "exit_duration" in typo  # never advice to append the typo


def test_provenance_names_the_fields_you_changed():
    from bridgebench.config.compose import recipe_departures, variant_provenance

    own = compose(["recipe=qwen3_30b_a3b_gb300_mxfp8"])
    assert recipe_departures(own) == {} and variant_provenance(own)[0] == "nvidia"
    mine = compose(["recipe=qwen3_30b_a3b_gb300_mxfp8", "train.global_batch_size=256", "cluster=example_nvl72"])
    assert recipe_departures(mine) == {"train.global_batch_size": (512, 256)}  # the cluster is not the run
    whose, note = variant_provenance(mine)
    assert whose == "modified" and "not what NVIDIA ran" in note and "train.global_batch_size 512->256" in note
    assert variant_provenance(compose(["recipe=qwen3_30b_a3b_gb300_mxfp8", "optimizer=muon"]))[0] == "bridgebench"


def test_provenance_cites_the_source_of_the_optimizer_it_names():
    """Issue 24: the Kimi K2 Muon plan was NVIDIA's Muon recipe while citing the launcher run with
    ``--optimizer_type adam`` (the run the recipe's values were generated from). Each upstream optimizer's recipe now
    cites its own source (``recipe_meta.sources``, from the release's dump or the installed perf recipe)."""
    import yaml

    from bridgebench.config.compose import variant_provenance
    from bridgebench.paths import RECIPES_DIR

    launcher = {"adamw": "adam", "muon": "muon"}
    seen = 0
    for path in sorted(RECIPES_DIR.glob("*/*.yaml")):
        meta = (yaml.safe_load(path.read_text()) or {}).get("recipe_meta") or {}
        if "upstream_optimizers" not in meta:
            continue
        assert set(meta["sources"]) == set(meta["upstream_optimizers"]), path
        for family, source in meta["sources"].items():
            others = [f"--optimizer_type {v}" for k, v in launcher.items() if k != family]
            assert not any(o + " " in source for o in others), (path, family, source)
            if "--optimizer_type" in source:  # a dump of an executed launcher run
                assert f"--optimizer_type {launcher[family]} " in source, (path, family)
            if family != "adamw":  # the installed perf recipes switch to AdamW explicitly, never the other way
                assert "(cfg, 'adam')" not in source, (path, family)
            seen += 1
    assert seen >= 30
    for release in ("26.02.01", "26.08"):
        whose, note = variant_provenance(
            compose(["recipe=kimi_k2_gb300_mxfp8", f"release={release}", "optimizer=muon"])
        )
        assert whose == "nvidia" and "with muon" in note, note
        assert "--optimizer_type adam" not in note and "(cfg, 'adam')" not in note, note
    _, note = variant_provenance(compose(["recipe=kimi_k2_gb300_mxfp8", "release=26.02.01", "optimizer=muon"]))
    assert "--optimizer_type muon" in note
