"""`bridgebench diff-config A B`: the two resolved ConfigContainers, only the fields that differ."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.megatron
BB = [sys.executable, "-m", "bridgebench.cli"]


def test_diff_config_shows_the_release_differences_as_json():
    a = "recipe=kimi_k2_gb300_mxfp8 release=26.02.01 optimizer=muon"
    b = "recipe=kimi_k2_gb300_mxfp8 release=26.08 optimizer=muon"
    res = subprocess.run([*BB, "diff-config", a, b, "--json"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    data = json.loads(res.stdout)
    assert data["a"] == a.split() and data["b"] == b.split()
    rows = {r["field"]: (r["a"], r["b"]) for r in data["fields"]}
    # upstream added these between v0.3.1 and 0.6.2 (recipes/kimi_k2_gb300_mxfp8/26.08.yaml env_vars)
    assert rows["env_vars.NUM_OF_TOKENS_PER_CHUNK_COMBINE_API"] == ("<absent>", "128")
    assert rows["env_vars.PYTORCH_CUDA_ALLOC_CONF"] == ("<absent>", "expandable_segments:True")
    # what did not change is not listed: same parallelism, same Muon switch values
    assert not {"model.expert_model_parallel_size", "train.global_batch_size", "optimizer.muon_nesterov"} & set(rows)


def test_diff_config_of_a_configuration_with_itself_is_empty():
    from bridgebench.mbridge.diff import diff_config

    side = ["recipe=qwen3_30b_a3b_gb300_mxfp8", "release=26.08"]
    assert diff_config(side, side) == []
    changed = diff_config(side, [*side, "train.global_batch_size=1024"])
    assert [(d.field, d.a, d.b) for d in changed] == [("train.global_batch_size", 512, 1024)]


def test_diff_config_lists_only_the_differing_fields_of_an_optimizer_switch():
    from bridgebench.mbridge.diff import diff_config

    side = ["recipe=qwen3_30b_a3b_gb300_mxfp8", "release=26.08"]
    rows = {d.field: (d.a, d.b) for d in diff_config([*side, "optimizer=adamw"], [*side, "optimizer=muon"])}
    assert rows["optimizer.optimizer"] == ("adam", "dist_muon")
    assert rows["ddp.use_distributed_optimizer"] == (True, False)
    # what did not change is not listed
    assert not {"model.expert_model_parallel_size", "model.num_layers", "train.micro_batch_size"} & set(rows)


def test_diff_config_bad_side_is_refused():
    res = subprocess.run([*BB, "diff-config", "recipe=x nonsense", "recipe=y"], capture_output=True, text=True)
    assert res.returncode == 2 and "each side is space-separated Hydra overrides" in res.stderr


def test_flatten_orders_the_sections_as_the_schema_applies_them():
    # flatten.py is loaded by file path under older releases' Python (tests/data/upstream_recipes/make_dumps.py), so
    # it keeps its own copy of the section order instead of importing bridgebench.config.schema: the two must agree
    from bridgebench.config.schema import MB_SECTIONS
    from bridgebench.mbridge.flatten import SECTION_ORDER

    assert SECTION_ORDER == MB_SECTIONS
