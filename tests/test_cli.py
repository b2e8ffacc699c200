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
        (["plan", "job.type=train"], "job.type must be 'pretrain', 'optstep' or 'replay'"),
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


def test_version_and_list():
    import json

    from bridgebench import __version__

    res = subprocess.run([*BB, "--version"], capture_output=True, text=True, check=True)
    assert res.stdout.strip() == f"bridgebench {__version__}"
    for kind, expected in (
        ("models", {"kimi_k2", "qwen3_30b_a3b"}),
        ("recipes", {"kimi_k2_gb300_mxfp8", "qwen3_30b_a3b_h100_fp8_cs"}),
        ("gpus", {"gb300", "h100"}),
        ("releases", {"26.02", "26.04"}),
    ):
        rows = json.loads(
            subprocess.run([*BB, "list", kind, "--json"], capture_output=True, text=True, check=True).stdout
        )
        assert expected <= {r["name"] for r in rows}, kind
        if kind == "recipes":  # each recipe with the releases that have its values (Kimi K2: none at 26.02)
            kimi = next(r for r in rows if r["name"] == "kimi_k2_gb300_mxfp8")
            assert kimi["num_gpus"] == 256 and "26.02" not in kimi["releases"] and "26.08" in kimi["releases"]
        table = subprocess.run([*BB, "list", kind], capture_output=True, text=True, check=True).stdout
        assert all(name in table for name in expected)
    bad = subprocess.run([*BB, "list", "clusters"], capture_output=True, text=True)
    assert bad.returncode == 2 and "models, recipes, gpus, releases" in bad.stderr


def _git_status() -> str:
    from bridgebench.paths import REPO_ROOT

    return subprocess.run(
        ["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=all"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_generated_tables_never_touch_tracked_or_untracked_repository_files():
    """`table` and `check-published` with the default paths write under configs/paths' tables folder (gitignored
    results/tables/), never over results/reference/ or results/table1/: `git status` is the same before and after."""
    import shutil

    if shutil.which("git") is None:
        pytest.skip("git not installed")
    from bridgebench.paths import load_paths

    env = {k: v for k, v in os.environ.items() if k != "BRIDGEBENCH_TABLES"}
    before = _git_status()
    for args in (["table", "--source", "published"], ["check-published"]):
        res = subprocess.run([*BB, *args], capture_output=True, text=True, env=env)
        assert res.returncode == 0, res.stderr[-2000:]
    assert _git_status() == before
    tables = load_paths().tables
    assert (tables / "table1" / "table1.csv").is_file() and (tables / "flops_check.csv").is_file()
