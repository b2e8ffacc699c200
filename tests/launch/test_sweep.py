"""``bridgebench sweep`` end to end (subprocesses of the real CLI): outputs, the top K planned with real
ConfigContainers, Ctrl-C (a real SIGINT) then ``--resume`` doing no stage twice, a space where every point is pruned,
bad input writing nothing, and ``plan -m`` reporting every invalid run while planning the valid ones."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.launch.sigint import interruptible

BB = [sys.executable, "-m", "bridgebench.cli"]
KIMI = ["recipe=kimi_k2_gb300_mxfp8", "release=26.02.01", "optimizer=muon"]  # the blog's Kimi K2 release


@pytest.fixture()
def env(tmp_path):
    return {
        **os.environ,
        "BRIDGEBENCH_SWEEPS": str(tmp_path / "sweeps"),
        "BRIDGEBENCH_PLANS": str(tmp_path / "plans"),
        "BRIDGEBENCH_LEDGER": str(tmp_path / "ledger.sqlite"),
        "BRIDGEBENCH_RESULTS": str(tmp_path / "runs"),
        "BRIDGEBENCH_JOB_DIR": str(tmp_path / "jobs"),
    }


def bb(env, *args, check=True, timeout=900):
    res = subprocess.run([*BB, *args], capture_output=True, text=True, env=env, timeout=timeout)
    if check and res.returncode:
        raise AssertionError(f"bridgebench {' '.join(args)} failed ({res.returncode}):\n{res.stderr[-3000:]}")
    return res


def _state(env, name):
    return json.loads((Path(env["BRIDGEBENCH_SWEEPS"]) / name / "state.json").read_text())


def _niced_and_interruptible() -> None:
    os.nice(15)
    interruptible()


def test_ctrl_c_then_resume_does_no_stage_twice(env):
    """SIGINT while a stage runs; --resume reloads the finished stages (each stage is computed exactly once) and the
    outputs appear only when the sweep ends."""
    args = [*BB, "sweep", *KIMI, "--name", "k", "--top-k", "0"]
    # the sweep runs niced so that, on a loaded machine, this test reads "stage 3 memory" and signals before the
    # sweep can finish stages 3-4 and its outputs (seen once at load 5: the sweep ended before the SIGINT)
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, preexec_fn=_niced_and_interruptible
    )
    seen = []
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        seen.append(line)
        if line.startswith("stage 3 memory") or not line:
            break
    assert any(s.startswith("stage 3 memory") for s in seen), "".join(seen)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=120)
    assert proc.returncode != 0  # interrupted, not finished
    out = Path(env["BRIDGEBENCH_SWEEPS"]) / "k"
    before = _state(env, "k")["stages"]
    assert before["enumerate"]["done"] and before["rules"]["done"] and not (out / "points.parquet").exists()
    assert not [p for p in out.rglob(".*") if p.is_file()]  # no temporary file left behind
    res = bb(env, "sweep", *KIMI, "--name", "k", "--top-k", "0", "--resume", "--json")
    after = _state(env, "k")["stages"]
    for stage in ("enumerate", "rules", "memory", "time"):
        assert after[stage]["done"] and after[stage]["runs"] == 1, (stage, after[stage])
        if stage in before:
            assert after[stage]["finished_at"] == before[stage]["finished_at"]
    assert "stage 1 enumerate: done before" in res.stderr
    report = json.loads(res.stdout)
    assert report["stages"]["enumerate"]["resumed"] is True
    points = pd.read_parquet(out / "points.parquet")
    assert len(points) == 7200 and (out / "summary.md").exists() and (out / "points.png").stat().st_size > 10_000


def test_existing_sweep_needs_resume_and_the_same_space(env):
    space = ["recipe=qwen3_30b_a3b_gb300_mxfp8", "train.micro_batch_size=4,8"]
    bb(env, "sweep", *space, "--name", "q", "--top-k", "0")
    res = bb(env, "sweep", *space, "--name", "q", "--top-k", "0", check=False)
    assert res.returncode == 2 and "--resume" in res.stderr
    res = bb(env, "sweep", "recipe=qwen3_30b_a3b_gb300_mxfp8", "train.micro_batch_size=2,8", "--name", "q",
             "--resume", check=False)  # fmt: skip
    assert res.returncode == 2 and "another space" in res.stderr


def test_every_point_pruned_says_by_which_rules(env):
    res = bb(env, "sweep", "recipe=qwen3_30b_a3b_gb300_mxfp8", "model.tensor_model_parallel_size=3,5", "--name", "x")
    assert "no point survived" in res.stdout
    summary = (Path(env["BRIDGEBENCH_SWEEPS"]) / "x" / "summary.md").read_text()
    assert "No point survived" in summary
    # "Pruned by" names each point's first broken rule only; the upstream section counts every rule a point breaks
    # (issue 22: which upstream assertions removed how many points), with 0 points where it was not the first.
    pruned = summary.split("## Pruned by", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1].strip() for line in pruned.splitlines() if line.startswith("| `")]
    assert rows == ["`world_size`"]
    upstream = summary.split("## Upstream's start-up assertions", 1)[1].split("\n## ", 1)[0]
    assert "| `world_size` | 2 | 2 |" in upstream and "| `heads_divisible_tp` | 2 | 0 |" in upstream
    points = pd.read_parquet(Path(env["BRIDGEBENCH_SWEEPS"]) / "x" / "points.parquet")
    assert set(points["status"]) == {"invalid"} and set(points["rule"]) == {"world_size"}


@pytest.mark.parametrize(
    "args, message",
    [
        (["experiment=optstep_local"], "empty search space"),
        (["recipe=qwen3_30b_a3b_gb300_mxfp8", "model.tensor_parallel_size=1,2"], "unknown field"),
        (["recipe=qwen3_30b_a3b_gb300_mxfp8", "model.tensor_model_parallel_size=0,2"], "positive_int"),
        (["recipe=qwen3_30b_a3b_gb300_mxfp8", "--space", "nope"], "unknown sweep space"),
    ],
)
def test_bad_input_is_refused_and_writes_nothing(env, args, message):
    res = bb(env, "sweep", *args, check=False)
    assert res.returncode == 2 and message in res.stderr
    assert not Path(env["BRIDGEBENCH_SWEEPS"]).exists()


def test_optstep_sweep_plans_its_top_k_and_resume_plans_nothing_twice(env):
    res = json.loads(bb(env, "sweep", "--space", "optstep_local", "--name", "o", "--json").stdout)
    assert [t["status"] for t in res["top"]] == ["planned", "planned"]
    assert [t["rank"] for t in res["top"]] == [1, 2]
    state = _state(env, "o")
    dirs = [Path(v["plan_dir"]) for v in state["plans"].values()]
    assert all((d / "plan.json").exists() for d in dirs)
    mtimes = [d.stat().st_mtime_ns for d in dirs]
    again = json.loads(bb(env, "sweep", "--space", "optstep_local", "--name", "o", "--resume", "--json").stdout)
    assert again["stages"]["plan"]["resumed"] is True and [d.stat().st_mtime_ns for d in dirs] == mtimes
    assert _state(env, "o")["stages"]["plan"]["runs"] == 1


@pytest.mark.megatron
def test_top_k_get_validated_megatron_bridge_containers(env):
    res = json.loads(
        bb(env, "sweep", "recipe=qwen3_30b_a3b_gb300_mxfp8", "optimizer=muon", "train.micro_batch_size=2,4,8",
           "model.expert_model_parallel_size=4,8", "--top-k", "2", "--name", "m", "--json").stdout
    )  # fmt: skip
    assert len(res["top"]) == 2 and {t["status"] for t in res["top"]} == {"planned"}
    for t in res["top"]:
        run_dir = next(Path(t["plan_dir"]).glob("qwen3_30b_a3b-muon-*"))
        assert (run_dir / "megatron_bridge.yaml").exists() and (run_dir / "submit.sh").exists()
        run = json.loads((run_dir / "run.json").read_text())
        assert run["config_hash"] == t["config_hash"] and (run["ep"], run["mbs"]) == (t["ep"], t["mbs"])


@pytest.mark.megatron
def test_plan_multirun_reports_every_invalid_run_and_plans_the_valid_ones(env, tmp_path):
    out = tmp_path / "plan"
    res = bb(env, "plan", "-m", "recipe=qwen3_30b_a3b_gb300_mxfp8", "train.global_batch_size=512,500",
             "model.tensor_model_parallel_size=1,3", "model.expert_model_parallel_size=8,3", "--out", str(out),
             "--json")  # fmt: skip
    data = json.loads(res.stdout)
    assert len(data["runs"]) == 1 and len(data["invalid"]) == 7
    assert {r["rule"] for r in data["invalid"]} == {"gbs_divisible", "world_size", "expert_grid"}
    assert all(r["reason"] for r in data["invalid"])
    assert len(json.loads((out / "plan.json").read_text())["invalid"]) == 7
    # all invalid: nothing written, every run listed
    res = bb(env, "plan", "-m", "recipe=qwen3_30b_a3b_gb300_mxfp8", "model.tensor_model_parallel_size=3,5",
             "--out", str(tmp_path / "none"), check=False)  # fmt: skip
    assert res.returncode == 2 and "every run of the plan is invalid (2)" in res.stderr
    assert not (tmp_path / "none").exists()
