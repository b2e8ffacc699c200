"""Plans: `bridgebench plan experiment=table1 cluster=example_nvl72` writes four validated runs with the script for
that cluster (pyxis, --segment); bad input writes nothing. The plan for cluster=local: test_submission_script.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

pytestmark = pytest.mark.megatron
BB = [sys.executable, "-m", "bridgebench.cli"]


@pytest.fixture(scope="module")
def table1_plan(tmp_path_factory):
    out = tmp_path_factory.mktemp("plans") / "table1"
    env_dir = tmp_path_factory.mktemp("jobs")
    res = subprocess.run(
        [*BB, "plan", "experiment=table1", "cluster=example_nvl72", "--out", str(out), "--json"],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "BRIDGEBENCH_JOB_DIR": str(env_dir)},
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return out, json.loads(res.stdout)


def test_table1_plan_has_four_runs(table1_plan):
    out, data = table1_plan
    runs = {r["name"]: r for r in data["runs"]}
    assert len(runs) == 4
    for name in runs:
        d = out / name
        assert {p.name for p in d.iterdir()} >= {
            "config.yaml",
            "megatron_bridge.yaml",
            "submit.sh",
            "payload.sh",
            "run.json",
        }


def test_kimi_muon_run_is_the_published_configuration(table1_plan):
    out, data = table1_plan
    kimi = next(r for r in data["runs"] if r["name"].startswith("kimi_k2-muon"))
    assert (kimi["num_gpus"], kimi["nodes"], kimi["tasks_per_node"]) == (256, 64, 4)
    assert (kimi["tp"], kimi["pp"], kimi["vp"], kimi["ep"], kimi["dp"], kimi["mbs"], kimi["gbs"]) == (
        1,
        4,
        4,
        64,
        64,
        2,
        4096,
    )
    run_dir = out / kimi["name"]
    mb = yaml.safe_load((run_dir / "megatron_bridge.yaml").read_text())
    assert mb["optimizer"]["optimizer"] == "dist_muon"
    assert mb["optimizer"]["use_distributed_optimizer"] is False and mb["ddp"]["use_distributed_optimizer"] is False
    assert mb["ddp"]["overlap_param_gather"] is False
    assert mb["mixed_precision"]["fp8_param_gather"] is False
    assert mb["mixed_precision"]["reuse_grad_buf_for_mxfp8_param_ag"] is False
    assert mb["model"]["pipeline_model_parallel_size"] == 4 and mb["model"]["expert_model_parallel_size"] == 64
    submit = (run_dir / "submit.sh").read_text()
    for line in (
        "#SBATCH --nodes=64",
        "#SBATCH --ntasks-per-node=4",
        "#SBATCH --segment=16",
        "--container-image nvcr.io/nvidia/nemo:26.02",
        "export NVLINK_DOMAIN_SIZE=72",
        f"export BRIDGEBENCH_CONFIG_HASH={kimi['config_hash']}",
    ):
        assert line in submit, line
    # the segment submit.sh sends is the one the time model priced: four 64-GPU racks (bridgebench.model.placement)
    assert kimi["segment"] == kimi["segment_priced"] == 16 and kimi["domain_gpus_priced"] == 64
    payload = (run_dir / "payload.sh").read_text()
    assert "bridgebench.payloads.pretrain --config" in payload and "config.yaml" in payload
    assert kimi["newton_schulz_flops_per_step"] > 0 and kimi["model_flops_per_step"] > 0


@pytest.mark.parametrize(
    "args,message",
    [
        (["experiment=table1", "model.tensr_model_parallel_size=2"], "tensr_model_parallel_size"),
        (["recipe=qwen3_30b_a3b_gb300_mxfp8", "model.tensor_model_parallel_size=3"], "heads_divisible_tp"),
        (["recipe=qwen3_30b_a3b_gb300_mxfp8", "train.global_batch_size=100"], "gbs_divisible"),
        (
            ["recipe=kimi_k2_gb300_mxfp8", "release=26.02.01", "optimizer=muon", "ddp.use_distributed_optimizer=true"],
            "muon_dist_optimizer",
        ),
        (["experiment=table1", "release=27.01"], "unknown release '27.01'"),
        (
            ["recipe=qwen3_30b_a3b_gb300_mxfp8", "model.tensor_model_parallel_size=2", "model.sequence_parallel=false"],
            "moe_tp_needs_sp: a MoE model with TP = 2 needs sequence parallelism",
        ),
        (
            ["recipe=qwen3_30b_a3b_gb300_mxfp8", "model.recompute_granularity=selectiv"],
            "did you mean 'selective'?",
        ),
        (["recipe=qwen3_30b_a3b_gb300_mxfp8", "+env_vars.HF_TOKEN=abc"], "secret_in_config: env_vars.HF_TOKEN"),
        (["recipe=qwen3_30b_a3b_gb300_mxfp8", "release=26.02,26.04"], "--multirun"),
    ],
)
def test_bad_input_writes_no_plan(tmp_path, args, message):
    out = tmp_path / "plan"
    res = subprocess.run([*BB, "plan", *args, "--out", str(out)], capture_output=True, text=True)
    assert res.returncode == 2, res.stdout + res.stderr[-2000:]
    assert message in res.stderr
    assert not out.exists()
    assert not list(tmp_path.glob(".plan-*"))


def test_values_reach_the_shell_only_quoted(tmp_path):
    out = tmp_path / "plan"
    res = subprocess.run(
        [
            *BB,
            "plan",
            "recipe=qwen3_30b_a3b_gb300_mxfp8",
            "+env_vars.RUN_NOTE='a b; touch /tmp/pwned'",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    submit = next(out.glob("*/submit.sh")).read_text()
    assert "export RUN_NOTE='a b; touch /tmp/pwned'" in submit
    bad = subprocess.run(
        [
            *BB,
            "plan",
            "recipe=qwen3_30b_a3b_gb300_mxfp8",
            "cluster.container_mounts=['/a b:/c']",
            "--out",
            str(tmp_path / "p2"),
        ],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "cluster.container_mounts[0]" in bad.stderr and "shell_safe_value" in bad.stderr


def test_multirun_sweep(tmp_path):
    res = subprocess.run(
        [
            *BB,
            "plan",
            "-m",
            "recipe=qwen3_30b_a3b_gb300_mxfp8",
            "train.global_batch_size=256,512",
            "--out",
            str(tmp_path / "p"),
            "--json",
        ],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    runs = json.loads(res.stdout)["runs"]
    assert sorted(r["gbs"] for r in runs) == [256, 512]
    # issue 18: GBS 256 is not NVIDIA's recipe any more, and the run says so; 512 is the recipe's own value
    whose = {r["gbs"]: (r["variant_of"], r["variant_note"]) for r in runs}
    assert whose[512][0] == "nvidia"
    assert whose[256][0] == "modified" and "train.global_batch_size 512->256" in whose[256][1]
    assert "Traceback" not in res.stderr and "Warning" not in res.stderr


def test_table1_plan_says_whose_configuration_each_run_is(table1_plan):
    out, data = table1_plan
    runs = {r["name"].split("-")[0] + "-" + r["name"].split("-")[1]: r for r in data["runs"]}
    assert {k: (r["release"], r["variant_of"]) for k, r in runs.items()} == {
        "kimi_k2-adamw": ("26.02.01", "nvidia"),
        "kimi_k2-muon": ("26.02.01", "nvidia"),
        "qwen3_30b_a3b-adamw": ("26.02", "nvidia"),
        "qwen3_30b_a3b-muon": ("26.02", "bridgebench"),
    }
    assert "bridgebench's, not NVIDIA's" in runs["qwen3_30b_a3b-muon"]["variant_note"]
    qwen = runs["qwen3_30b_a3b-muon"]
    run = json.loads((out / qwen["name"] / "run.json").read_text())
    assert run["variant_of"] == "bridgebench" and run["tensorboard_subdir"] == "tensorboard"
    mb = yaml.safe_load((out / qwen["name"] / "megatron_bridge.yaml").read_text())
    assert mb["checkpoint"]["save"] is None and mb["checkpoint"]["load"] is None and mb["train"]["eval_iters"] == 0
    assert mb["logger"]["log_interval"] == 1
    # TensorBoard events in the first attempt's out folder as the node sees it (launch/nodepaths.py): the job folder's
    # out/, nemo-run's /nemo_run mount in the container -- the BRIDGEBENCH_OUT_DIR its job exports (collect reads it)
    tb = mb["logger"]["tensorboard_dir"]
    assert tb == "/nemo_run/out/tensorboard"
    assert mb["tokenizer"]["tokenizer_type"] == "NullTokenizer" and mb["tokenizer"]["vocab_size"] == 151936
    # the 26.02 values the blog ran: TransformerEngine CUDA graphs of the router, not 26.08's full-iteration graphs
    assert mb["model"]["cuda_graph_impl"] == "transformer_engine"
    script = (out / qwen["name"] / "submit.sh").read_text()
    assert f"export BRIDGEBENCH_OUT_DIR={tb.removesuffix('/tensorboard')}" in script
