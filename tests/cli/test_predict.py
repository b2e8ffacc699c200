"""``bridgebench predict`` end to end (subprocesses of the real CLI) for a model brought in through
``$BRIDGEBENCH_CONFIG_DIR`` (Mixtral 8x7B, no Megatron-Bridge recipe) on gpu=a100 and gpu=h100, for a shipped recipe,
and the error paths of a user config folder: unknown model, bad YAML, schema violations, a shadowed shipped name."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

BB = [sys.executable, "-m", "bridgebench.cli"]
KEYS = {"memory_gb", "hbm_gb", "fits", "pruned_by", "step_time_s", "tflops_per_gpu", "tokens_per_s_per_gpu",
        "band_pct", "release", "terms"}  # fmt: skip
MIXTRAL = """\
# Mixtral 8x7B (Hugging Face mistralai/Mixtral-8x7B-v0.1 config.json): GQA, 8 experts top-2 in every layer, SwiGLU
name: mixtral_8x7b
display_name: Mixtral 8x7B
num_layers: 32
hidden_size: 4096
ffn_hidden_size: 14336
num_attention_heads: 32
num_query_groups: 8
kv_channels: 128
num_moe_experts: 8
moe_ffn_hidden_size: 14336
moe_router_topk: 2
vocab_size: 32000
seq_length: 4096
"""
POINT = ["model=mixtral_8x7b", "precision=bf16", "num_gpus=64", "train.global_batch_size=256",
         "model.tensor_model_parallel_size=2", "model.sequence_parallel=true", "model.expert_model_parallel_size=8",
         "model.expert_tensor_parallel_size=1"]  # fmt: skip


@pytest.fixture()
def user_dir(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "mixtral_8x7b.yaml").write_text(MIXTRAL)
    return tmp_path


def bb(*args, config_dir=None):
    env = dict(os.environ)
    if config_dir is not None:
        env["BRIDGEBENCH_CONFIG_DIR"] = str(config_dir)
    return subprocess.run([*BB, *args], capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.parametrize("gpu", ["a100", "h100"])
def test_predict_a_model_without_a_recipe_from_the_user_config_dir(user_dir, gpu):
    res = bb("predict", *POINT, f"gpu={gpu}", "--json", config_dir=user_dir)
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout)
    assert KEYS <= set(out) and out["model"] == "mixtral_8x7b" and out["gpu"] == gpu
    assert out["fits"] is True and out["pruned_by"] is None
    assert 20 < out["memory_gb"] < out["hbm_gb"] and out["hbm_gb"] == pytest.approx(85.5, abs=0.5)
    assert sum(out["memory_breakdown_gb"].values()) == pytest.approx(out["memory_gb"])
    assert out["step_time_s"] == pytest.approx(sum(out["terms"].values()))
    assert out["tokens_per_s_per_gpu"] == pytest.approx(256 * 4096 / (out["step_time_s"] * 64))
    assert out["band_pct"] > 0 and out["release"] and out["ep_span"] == 8 and not out["ep_leaves_nvlink"]
    if gpu == "a100":  # A100's BF16 peak is under H100's: the same point is slower there
        h100 = json.loads(bb("predict", *POINT, "gpu=h100", "--json", config_dir=user_dir).stdout)
        assert out["step_time_s"] > h100["step_time_s"]


def test_predict_names_the_rule_or_number_that_prunes():
    over = json.loads(bb("predict", "recipe=kimi_k2_gb300_mxfp8", "release=26.02.01", "optimizer=muon",
                         "model.expert_model_parallel_size=8", "--json").stdout)  # fmt: skip
    assert over["fits"] is False and over["pruned_rule"] == "memory" and "GB GPU memory" in over["pruned_by"]
    assert over["memory_gb"] > over["hbm_gb"] / 1.01 and over["step_time_s"] > 0  # still timed
    rule = json.loads(bb("predict", "recipe=qwen3_30b_a3b_gb300_mxfp8", "model.tensor_model_parallel_size=3",
                         "--json").stdout)  # fmt: skip
    assert rule["fits"] is False and rule["pruned_rule"] == "world_size"
    text = bb("predict", "recipe=qwen3_30b_a3b_gb300_mxfp8", "release=26.08")
    assert text.returncode == 0 and "fits" in text.stdout and "TFLOP/s/GPU" in text.stdout


@pytest.mark.parametrize(
    "files, args, message",
    [
        ({}, ["model=mixtral_8x22b"], "unknown model 'mixtral_8x22b'"),
        ({"model/broken.yaml": "name: broken\nnum_layers: [1, 2\n"}, ["model=broken"], "bad_yaml"),
        (
            {"model/typo.yaml": MIXTRAL.replace("name: mixtral_8x7b", "name: typo") + "num_layer: 3\n"},
            ["model=typo"],
            "num_layer",
        ),  # fmt: skip
        (
            {"model/topk.yaml": MIXTRAL.replace("name: mixtral_8x7b", "name: topk").replace("topk: 2", "topk: 9")},
            ["model=topk"],
            "moe_router_topk (9) exceeds num_moe_experts (8)",
        ),  # fmt: skip
        (
            {"model/act.yaml": MIXTRAL.replace("name: mixtral_8x7b", "name: act") + "activation_func: swish\n"},
            ["model=act"],
            "activation_func must be one of",
        ),  # fmt: skip
        ({"model/kimi_k2.yaml": MIXTRAL}, ["model=mixtral_8x7b"], "user_config_dir"),
        ({"nonsense/x.yaml": "a: 1\n"}, ["model=mixtral_8x7b"], "user_config_dir"),
        ({}, ["model=mixtral_8x7b", "train.micro_batch_size=1,2"], "sweeps values"),
    ],
)
def test_user_config_dir_errors_name_the_rule(user_dir, files, args, message):
    for rel, text in files.items():
        (user_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (user_dir / rel).write_text(text)
    res = bb("predict", *args, config_dir=user_dir)
    assert res.returncode == 2, res.stdout[-1000:] + res.stderr[-2000:]
    assert message in res.stderr and "Traceback" not in res.stderr


def test_missing_user_config_dir_is_refused(tmp_path):
    res = bb("predict", "model=qwen3_30b_a3b", config_dir=tmp_path / "nope")
    assert res.returncode == 2 and "user_config_dir" in res.stderr and "is not a folder" in res.stderr


def test_user_models_are_listed(user_dir):
    res = bb("list", "models", "--json", config_dir=user_dir)
    names = {m["name"]: m for m in json.loads(res.stdout)}
    assert "mixtral_8x7b" in names and names["mixtral_8x7b"]["source"] == str(user_dir)
    assert names["kimi_k2"]["source"] == "configs"
