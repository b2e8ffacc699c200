"""GPU x precision x system rules at plan time (precision_needs_gpu, nvlink_env_matches_gpu) and what a cluster can
run at all (cluster_nodes, cluster_gpus, cluster_container: config/cluster_fit.py, checked by submit before SLURM)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from bridgebench.config import rules
from bridgebench.config.cluster_fit import cluster_violations
from bridgebench.config.compose import compose, group_options, recipe_releases
from bridgebench.paths import CONFIG_DIR

BB = [sys.executable, "-m", "bridgebench.cli"]


def _ids(found) -> set[str]:
    return {v.rule for v in found}


def _plan(tmp_path, *args):
    env = {**os.environ, "BRIDGEBENCH_JOB_DIR": str(tmp_path / "jobs"), "BRIDGEBENCH_PLANS": str(tmp_path / "plans")}
    return subprocess.run(
        [*BB, "plan", *args, "--out", str(tmp_path / "plan")], capture_output=True, text=True, env=env
    )


@pytest.mark.parametrize(
    "args,rule,needles",
    [
        (["precision=mxfp8", "gpu=h100"], "precision_needs_gpu", ["mxfp8", "10.0 (Blackwell)", "h100 has 9.0"]),
        (["precision=nvfp4", "gpu=h200"], "precision_needs_gpu", ["nvfp4", "h200"]),
        (["recipe=qwen3_30b_a3b_gb300_mxfp8", "gpu=h100"], "precision_needs_gpu", ["h100"]),
        (["gpu=h100", "+env_vars.USE_MNNVL=1"], "nvlink_env_matches_gpu", ["USE_MNNVL=1", "NVL72"]),
        (
            ["gpu=b200", "+env_vars.NVLINK_DOMAIN_SIZE=72"],
            "nvlink_env_matches_gpu",
            ["NVLINK_DOMAIN_SIZE=72", "8 GPUs"],
        ),
    ],
)
def test_plan_rejects_what_the_gpu_cannot_run_naming_the_rule(tmp_path, args, rule, needles):
    res = _plan(tmp_path, *args)
    assert res.returncode == 2, res.stdout + res.stderr[-2000:]
    assert f"{rule}: " in res.stderr and all(n in res.stderr for n in needles), res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "plan").exists()


def test_every_gpu_declares_its_capability_and_agrees_with_its_peak_table():
    """configs/gpu declares compute_capability once; a precision the GPU cannot run has no peak (null) there."""
    for name in group_options("gpu"):
        cfg = compose([f"gpu={name}"])
        assert cfg.gpu.compute_capability is not None, name
        for prec in group_options("precision"):
            p = yaml.safe_load((CONFIG_DIR / "precision" / f"{prec}.yaml").read_text())["precision"]
            runs = cfg.gpu.compute_capability >= p["min_compute_capability"]
            assert runs == (cfg.gpu.peak_tflops[p["peak"]] is not None), (name, prec)


def test_shipped_recipes_fit_their_gpus():
    """Recipes derive NVLINK_DOMAIN_SIZE / USE_MNNVL / NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN from gpu and EP, so
    every recipe passes the system rules at every release that has it; forcing a recipe onto another GPU family is
    caught."""
    for recipe in group_options("recipe"):
        for release in recipe_releases(recipe):
            found = rules.check(rules.Point.from_config(compose([f"recipe={recipe}", f"release={release}"])))
            assert not _ids(found) & {"precision_needs_gpu", "nvlink_env_matches_gpu"}, (recipe, release, found)
    gb300 = rules.Point.from_config(compose(["recipe=qwen3_30b_a3b_gb300_mxfp8"]))
    assert gb300.env_use_mnnvl == 1 and gb300.env_nvlink_domain_size == 72
    # (26.02's B200 perf config sets none of the three: upstream's HybridEP settings for B200 start at 26.02.01)
    b200 = rules.Point.from_config(compose(["recipe=qwen3_30b_a3b_b200_mxfp8", "release=26.08"]))
    assert b200.env_use_mnnvl == 0 and b200.env_nvlink_domain_size == 8


def test_list_gpus_shows_the_precisions_each_runs():
    res = subprocess.run([*BB, "list", "gpus", "--json"], capture_output=True, text=True, check=True)
    gpus = {g["name"]: g for g in json.loads(res.stdout)}
    assert "mxfp8" not in gpus["h100"]["precisions"] and "fp8_cs" in gpus["h100"]["precisions"]
    assert {"mxfp8", "nvfp4"} <= set(gpus["gb300"]["precisions"]) and gpus["gb300"]["gpus_per_node"] == 4


# ---------------------------------------------------------------------------------------------------- cluster fit
def _needs(overrides):
    from bridgebench.launch.jobspec import job_spec

    cfg = compose(overrides)
    return cfg, job_spec(cfg).needs(cfg)


def test_gpu_recipe_on_the_local_cluster_breaks_every_cluster_rule():
    cfg, needs = _needs(["recipe=qwen3_30b_a3b_gb300_mxfp8", "cluster=local"])
    found = cluster_violations(cfg.cluster, needs)
    assert _ids(found) == {"cluster_nodes", "cluster_gpus", "cluster_container"}, found
    text = " ".join(str(v) for v in found)
    assert "2 node(s)" in text and "has 1" in text and "PartitionNodeLimit" in text
    assert "no GPUs" in text and "pyxis: false" in text and "nvcr.io/nvidia/nemo:26.02" in text
    # SLURM's own node count is checked too (a config that promises more nodes than the partition has)
    one = cluster_violations({**cfg.cluster, "nodes": None}, needs, live_nodes=1)
    assert "cluster_nodes" in _ids(one) and "(sinfo)" in str(one[0])


def test_what_each_cluster_can_run():
    cfg, needs = _needs(["experiment=optstep_local"])
    assert cluster_violations(cfg.cluster, needs) == []  # the CPU payload runs on the local cluster
    cfg, needs = _needs(["recipe=kimi_k2_gb300_mxfp8", "release=26.08", "cluster=example_nvl72"])  # no 26.02 recipe
    assert cluster_violations(cfg.cluster, needs) == []  # 64 GB300 nodes of 72, pyxis
    cfg, needs = _needs(["recipe=qwen3_30b_a3b_b200_mxfp8", "cluster=example_nvl72"])
    assert _ids(cluster_violations(cfg.cluster, needs)) == {"cluster_gpus"}  # B200 plan, GB300 nodes


def test_cluster_rules_are_in_the_rule_table():
    for rule in ("cluster_nodes", "cluster_gpus", "cluster_container", "secret_in_config"):
        assert rule in rules.RULES and rule in rules.NON_POINT_RULES and rules.RULES[rule].source


@pytest.mark.megatron
def test_plan_warns_that_the_cluster_cannot_run_it(tmp_path):
    """A plan stays a dry run for any cluster, but says what submit would refuse."""
    res = _plan(tmp_path, "recipe=qwen3_30b_a3b_gb300_mxfp8", "cluster=local", "--json")
    assert res.returncode == 0, res.stderr[-2000:]
    run = json.loads(res.stdout)["runs"][0]
    assert {v.split(":")[0] for v in run["cluster_can_run"]} == {"cluster_nodes", "cluster_gpus", "cluster_container"}
