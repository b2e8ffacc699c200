"""Entry points fed something wrong answer with a clear error (exit 2, no traceback)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

BB = [sys.executable, "-m", "bridgebench.cli"]


@pytest.mark.parametrize(
    "args,message",
    [
        (["logs", "parse", "/nonexistent/train.log"], "no such log file"),
        (["report"], "no optimizer-step results in the store"),
        (["table", "--source", "nope"], "--source must be runs, published or auto"),
        (["plan", "job.type=train"], "job.type must be 'pretrain' or 'optstep'"),
        (["diff-config", "recipe=qwen3_30b_a3b_gb300_mxfp8", "nonsense"], "each side is space-separated Hydra"),
        (
            ["diff-config", "recipe=kimi_k2_gb300_mxfp8 release=26.02", "recipe=kimi_k2_gb300_mxfp8"],
            "recipe kimi_k2_gb300_mxfp8 has no values for release 26.02",
        ),
        (
            ["plan", "recipe=qwen3_30b_a3b_gb300_mxfp8", "+ddp.overlap_grad_reduc=true"],
            "did you mean overlap_grad_reduce",
        ),
    ],
)
def test_bad_input(tmp_path, args, message):
    env = {
        **os.environ,
        "BRIDGEBENCH_RESULTS": str(tmp_path / "runs"),
        "BRIDGEBENCH_LEDGER": str(tmp_path / "l.db"),
        "BRIDGEBENCH_PLANS": str(tmp_path / "plans"),
    }
    res = subprocess.run([*BB, *args], capture_output=True, text=True, env=env)
    assert res.returncode == 2, res.stdout + res.stderr[-2000:]
    assert message in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "plans").exists()


def test_logs_parse_json_on_a_real_log():
    import json

    log = "tests/data/logs/mbridge_tutorial_llama31_8b_4xgb200_bf16_steptime.log"
    res = subprocess.run([*BB, "logs", "parse", log, "--json"], capture_output=True, text=True, check=True)
    data = json.loads(res.stdout)
    assert {"format", "outcome", "steps", "step_time_s", "tflops_per_gpu"} <= set(data)
