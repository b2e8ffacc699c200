"""Bounds from the schema (issue 24, "No bounds"): user model/GPU/cluster values validated with ranges by pydantic
(rule ``config_range``), YAML size and alias expansion capped (``yaml_bounds``), option names confined to the config
folders (``config_name_confined``), and one bad user file listed as bad by ``list models`` instead of crashing it.
Each case is the attack as filed, run through the real CLI or ``compose``."""

from __future__ import annotations

import json
import os
import time

import pytest

from bridgebench.config import bounds
from bridgebench.config.compose import ConfigError, compose
from bridgebench.config.rules import NON_POINT_RULES, RULES
from tests.cli.test_predict import MIXTRAL, POINT, bb

LAUGHS = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{n}: &{n} [{','.join(['*' + p] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi")
)  # 9 levels of 9 aliases: ~1 kB, 10^9 nodes expanded


@pytest.fixture()
def user_dir(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "mixtral_8x7b.yaml").write_text(MIXTRAL)
    return tmp_path


def test_the_rules_are_in_the_table_and_explained():
    text = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "rules.md")).read()
    for rule in ("yaml_bounds", "config_name_confined", "config_range", "collect_partial", "config_value_missing"):
        assert rule in RULES and rule in NON_POINT_RULES and RULES[rule].source and f"``{rule}``" in text


def test_billion_laughs_is_refused_fast(user_dir):
    (user_dir / "model" / "laughs.yaml").write_text(LAUGHS)
    start = time.monotonic()
    with pytest.raises(bounds.BoundsError, match="yaml_bounds"):
        bounds.check_yaml_file(user_dir / "model" / "laughs.yaml")
    assert time.monotonic() - start < 5  # counted on the node graph, never expanded (the attack ran > 3 min)
    res = bb("predict", *POINT, "gpu=a100", config_dir=user_dir)
    assert res.returncode == 2 and "yaml_bounds" in res.stderr and "laughs.yaml" in res.stderr, res.stderr[-2000:]
    # a user file over the size cap
    (user_dir / "model" / "laughs.yaml").write_text("# pad\n" * (bounds.MAX_CONFIG_BYTES // 6 + 10))
    with pytest.raises(bounds.BoundsError, match="bytes; a config file is at most"):
        bounds.check_yaml_file(user_dir / "model" / "laughs.yaml")


def test_option_names_stay_in_their_group(user_dir, tmp_path_factory):
    for override in ("+model@pkg=../..", "+model@x=../paths/default", "model=../paths/default"):
        with pytest.raises(ConfigError, match="config_name_confined"):
            compose(["model=qwen3_30b_a3b", override])
    # a user model symlinked to a file outside the user folder is refused, not printed
    secret = tmp_path_factory.mktemp("elsewhere") / "system.yaml"
    secret.write_text("name: leaked\nsecret_value: do-not-print\n")
    os.symlink(secret, user_dir / "model" / "leak.yaml")
    res = bb("predict", *POINT, "gpu=a100", config_dir=user_dir)
    assert res.returncode == 2 and "config_name_confined" in res.stderr and "do-not-print" not in res.stderr
    listed = {m["name"]: m for m in json.loads(bb("list", "models", "--json", config_dir=user_dir).stdout)}
    assert "config_name_confined" in listed["leak"]["problem"] and "do-not-print" not in json.dumps(listed)


def test_one_bad_user_file_is_listed_as_bad(user_dir):
    (user_dir / "model" / "laughs.yaml").write_text(LAUGHS)
    (user_dir / "model" / "broken.yaml").write_text("name: [unclosed\n")
    few_heads = MIXTRAL.replace("hidden_size: 4096", "hidden_size: 16").replace("kv_channels: 128\n", "")
    (user_dir / "model" / "few_heads.yaml").write_text(few_heads.replace("mixtral_8x7b", "few_heads"))
    res = bb("list", "models", "--json", config_dir=user_dir)
    assert res.returncode == 0, res.stderr[-2000:]
    rows = {m["name"]: m for m in json.loads(res.stdout)}
    assert "yaml_bounds" in rows["laughs"]["problem"] and "bad_yaml" in rows["broken"]["problem"]
    assert "hidden_size (16) must be divisible by num_attention_heads (32)" in rows["few_heads"]["problem"]
    assert "problem" not in rows["mixtral_8x7b"] and "problem" not in rows["kimi_k2"]
    table = bb("list", "models", config_dir=user_dir)
    assert table.returncode == 0 and "mixtral_8x7b" in table.stdout and "yaml_bounds" in table.stdout


def test_a_model_with_fewer_hidden_units_than_heads_is_refused_not_divided_by_zero(user_dir):
    few_heads = MIXTRAL.replace("hidden_size: 4096", "hidden_size: 16").replace("kv_channels: 128\n", "")
    (user_dir / "model" / "mixtral_8x7b.yaml").write_text(few_heads)
    res = bb("predict", *POINT, "gpu=a100", config_dir=user_dir)
    assert res.returncode == 2 and "config_range" in res.stderr and "ZeroDivisionError" not in res.stderr


@pytest.mark.parametrize(
    "override,says",
    [
        (
            "model.num_layers=10000000000",
            "model.num_layers must be at most 4,096 (the stated cap",
        ),
        ("model.num_moe_experts=100000000", "model.num_moe_experts"),
        ("model.seq_length=0", "model.seq_length must be a positive integer, got 0"),
        ("gpu.peak_tflops.bf16=-1000", "gpu.peak_tflops.bf16 must be positive, got -1000.0"),
        ("gpu.hbm_bandwidth_tb_s=-3", "gpu.hbm_bandwidth_tb_s"),
        ("gpu.network_bandwidth_gb_s=0", "gpu.network_bandwidth_gb_s"),
        ("cluster.max_retries=-1", "cluster.max_retries"),
        ("num_gpus=0", "num_gpus must be a positive integer, got 0"),
    ],
)
def test_values_out_of_range_are_refused_before_anything_is_built(override, says):
    with pytest.raises(ConfigError) as err:
        compose(["model=qwen3_30b_a3b", "gpu=h100", override])
    assert "config_range" in str(err.value) and says in str(err.value)


def test_a_user_gpu_with_a_negative_peak_is_refused(user_dir):
    (user_dir / "gpu").mkdir()
    a100 = open(os.path.join(os.path.dirname(__file__), "..", "..", "configs", "gpu", "a100.yaml")).read()
    (user_dir / "gpu" / "slowgpu.yaml").write_text(a100.replace("name: a100", "name: slowgpu").replace("312", "-312"))
    res = bb("predict", *POINT, "gpu=slowgpu", config_dir=user_dir)
    assert res.returncode == 2 and "gpu.peak_tflops.bf16 must be positive, got -312" in res.stderr, res.stderr[-2000:]


def test_every_shipped_config_is_in_range():
    from bridgebench.paths import CONFIG_DIR

    for group in ("model", "gpu"):
        for path in sorted((CONFIG_DIR / group).glob("*.yaml")):
            compose([f"{group}={path.stem}"])  # raises ConfigError (config_range) if a shipped value were out
