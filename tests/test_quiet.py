"""Normal runs print no tracebacks and no third-party warnings (issue 18): the commands that import Megatron-Bridge
and build ConfigContainers -- plan, sweep, diff-config -- and muon-cost keep stderr to bridgebench's own progress
and messages; what the libraries print (Transformer Engine import tracebacks, torch's "No CUDA runtime is found",
transformers' torch_dtype deprecation, Megatron-Bridge's trust_remote_code notice, Python warnings) goes to the debug
log, and ``--verbose`` shows it."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

#: CPU-heavy: make test runs it in the background half, beside the SLURM tests (Makefile).
pytestmark = pytest.mark.background

BB = [sys.executable, "-m", "bridgebench.cli"]
#: What a newcomer would read as a failure or third-party noise on stderr.
NOISE = re.compile(
    r"Traceback|Warning|WARNING|warnings\.warn|No CUDA runtime|torch_dtype|trust_remote_code|FP8GlobalStateManager|"
    r"^INFO[: ]|^W\d{4} ",
    re.MULTILINE,
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("quiet")
    env = {
        **os.environ,
        "BRIDGEBENCH_PLANS": str(tmp / "plans"),
        "BRIDGEBENCH_SWEEPS": str(tmp / "sweeps"),
        "BRIDGEBENCH_TABLES": str(tmp / "tables"),
        "BRIDGEBENCH_RESULTS": str(tmp / "runs"),
        "BRIDGEBENCH_LEDGER": str(tmp / "ledger.sqlite"),
        "BRIDGEBENCH_DEBUG_LOG": str(tmp / "debug.log"),
    }
    qwen = "recipe=qwen3_30b_a3b_gb300_mxfp8"
    commands = {
        "plan": ["plan", qwen, "--out", str(tmp / "plans" / "one")],
        "sweep": ["sweep", qwen, "optimizer=muon", "model.tensor_model_parallel_size=1,2", "--top-k", "1"],
        "diff-config": ["diff-config", f"{qwen} optimizer=adamw", f"{qwen} optimizer=muon"],
        "muon-cost": ["muon-cost", qwen],
    }
    out = {}
    for name, args in commands.items():
        out[name] = subprocess.run([*BB, *args], capture_output=True, text=True, env=env)
    return tmp, env, out


@pytest.mark.parametrize("command", ["plan", "sweep", "diff-config", "muon-cost"])
def test_stderr_has_no_traceback_and_no_third_party_warning(runs, command):
    _, _, out = runs
    res = out[command]
    assert res.returncode == 0, res.stderr[-3000:]
    noise = NOISE.findall(res.stderr)
    assert not noise, f"{command} printed {noise} on stderr:\n{res.stderr[-3000:]}"


def test_the_noise_is_in_the_debug_log(runs):
    tmp, _, _ = runs
    log = (tmp / "debug.log").read_text()
    # Megatron-Bridge's import of Transformer Engine symbols (the planning stand-in has none) and torch's CUDA probe
    assert "FP8GlobalStateManager" in log and "No CUDA runtime is found" in log
    assert "py.warnings" in log  # Python warnings are kept, not thrown away


def test_verbose_shows_it(runs):
    tmp, env, _ = runs
    res = subprocess.run(
        [*BB, "--verbose", "plan", "recipe=qwen3_30b_a3b_gb300_mxfp8", "--out", str(tmp / "plans" / "loud")],
        capture_output=True,
        text=True,
        env=env,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "FP8GlobalStateManager" in res.stderr and "No CUDA runtime is found" in res.stderr


def test_a_value_left_missing_is_bad_input_not_a_bug(runs):
    """A config value left ``???`` (OmegaConf's "must be set") that a command reads is refused under rule
    ``config_value_missing``, naming the key and the override that sets it: exit 2, nothing written, no "this is a
    bug" line (it was reported as an unexpected MissingMandatoryValue before)."""
    tmp, env, _ = runs
    out = tmp / "plans" / "missing"
    res = subprocess.run(
        [*BB, "plan", "recipe=qwen3_30b_a3b_gb300_mxfp8", "cluster=example_nvl72", "cluster.tunnel.job_dir=???",
         "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
    )  # fmt: skip
    assert res.returncode == 2, res.stderr[-3000:]
    assert "config_value_missing" in res.stderr and "cluster.tunnel.job_dir=<value>" in res.stderr
    assert "this is a bug" not in res.stderr and not NOISE.findall(res.stderr)
    assert not out.exists()
