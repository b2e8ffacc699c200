"""Bad input to the commands issue 23 added (``calibrate --from-runs``, ``--calibration``, ``sweep --adaptive``):
exit 2, the rule named on stderr, no traceback, nothing written."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

BB = [sys.executable, "-m", "bridgebench.cli"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["calibrate", "--from-runs", "--name", "mine"], "calibrate_from_runs: no completed record"),
        (["calibrate", "--from-runs", "--name", "../x"], "calibrate_from_runs: --name must be a plain name"),
        (["predict", "recipe=kimi_k2_gb300_mxfp8", "--calibration", "nope"], "unknown calibration 'nope'"),
        (["sweep", "--space", "replay_llama3_70b_h100", "--adaptive"], "adaptive_budget: --adaptive needs --budget"),
        (["sweep", "--space", "replay_llama3_70b_h100", "--adaptive", "--budget", "0"], "adaptive_budget"),
    ],
)
def test_bad_input_is_a_named_error(tmp_path, args, message):
    env = {
        **os.environ,
        "BRIDGEBENCH_RESULTS": str(tmp_path / "runs"),
        "BRIDGEBENCH_SWEEPS": str(tmp_path / "sweeps"),
        "BRIDGEBENCH_PLANS": str(tmp_path / "plans"),
        "BRIDGEBENCH_LEDGER": str(tmp_path / "ledger.sqlite"),
    }
    res = subprocess.run([*BB, *args], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 2 and message in res.stderr, res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "sweeps").exists() and not (tmp_path / "plans").exists()
