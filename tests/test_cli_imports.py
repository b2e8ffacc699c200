"""What each command imports (issue 18: fast): Megatron-Bridge (and torch) only in commands that build a
ConfigContainer, matplotlib only when a plot is written. Read from ``python -X importtime``, in a fresh process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def imported(args: list[str], env: dict[str, str]) -> set[str]:
    res = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "bridgebench.cli", *args], capture_output=True, text=True, env=env
    )
    assert res.returncode == 0, res.stderr[-2000:]
    names = {line.split("|")[-1].strip() for line in res.stderr.splitlines() if line.startswith("import time:")}
    return {n.split(".")[0] for n in names}


@pytest.mark.parametrize(
    "args,plots",
    [
        (["--help"], False),
        (["list", "releases"], False),
        (["flops", "recipe=kimi_k2_gb300_mxfp8", "release=26.02.01", "optimizer=muon"], False),
        (["check-published"], False),
        (["compare", "model=kimi_k2", "gpu=gb300", "--no-plots"], False),
        (["compare", "model=kimi_k2", "gpu=gb300"], True),
        (["table"], True),
        (["muon-cost", "recipe=qwen3_30b_a3b_gb300_mxfp8"], False),
        (["logs", "parse", "tests/data/logs/nemo2_resiliency_crash_injob_restart.log"], False),
        (["site", "--out", "{tmp}/site"], False),  # plotly, never matplotlib: the site's figures are plotly's
    ],
)
def test_heavy_imports_only_where_needed(tmp_path, args, plots):
    env = {**os.environ, "BRIDGEBENCH_TABLES": str(tmp_path), "BRIDGEBENCH_RESULTS": str(tmp_path / "runs")}
    mods = imported([a.replace("{tmp}", str(tmp_path)) for a in args], env)
    assert "megatron" not in mods and "torch" not in mods and "transformers" not in mods
    assert ("matplotlib" in mods) == plots
