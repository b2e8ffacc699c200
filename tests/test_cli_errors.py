"""Every error path of the ``bridgebench`` command answers with its cause in one message: exit 2 and ``error: ...``
for bad input (the rule it broke, what to do), exit 1 and the exception's type, message and place for an unexpected
failure -- never a traceback unless ``--verbose`` asks for it (issue 18). Paths tested elsewhere: compare's
(tests/results/test_compare.py::test_bad_input), plan's launch checks (tests/launch/test_plan.py), logs parse of a
missing file, report without results, table --source, diff-config sides, list (tests/test_cli.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

BB = [sys.executable, "-m", "bridgebench.cli"]


@pytest.fixture
def env(tmp_path):
    return {
        **os.environ,
        "BRIDGEBENCH_RESULTS": str(tmp_path / "runs"),
        "BRIDGEBENCH_LEDGER": str(tmp_path / "ledger.sqlite"),
        "BRIDGEBENCH_PLANS": str(tmp_path / "plans"),
        "BRIDGEBENCH_TABLES": str(tmp_path / "tables"),
        "BRIDGEBENCH_SWEEPS": str(tmp_path / "sweeps"),
        "BRIDGEBENCH_DEBUG_LOG": str(tmp_path / "debug.log"),
    }


def run(args: list[str], env: dict[str, str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*BB, *args], capture_output=True, text=True, env=env, **kw)


@pytest.mark.parametrize(
    "args,message",
    [
        # the typo: the closest name, never Hydra's advice to append the typo with '+'
        (
            ["plan", "recipe=qwen3_30b_a3b_gb300_mxfp8", "train.global_batch_sise=256"],
            "did you mean global_batch_size (train.global_batch_size=256)?",
        ),
        (["flops", "modle=kimi_k2"], "did you mean model"),
        (["flops", "num_gpus=7"], "gpus_per_node: num_gpus 7 is not a multiple of gpus_per_node 4"),
        (["flops", "model=kimi_k3"], "unknown model 'kimi_k3'; known model options"),
        (["table", "--quality", "great"], "--quality must be a comma list of steady, short, excerpt, incomplete"),
        (["table", "--source", "runs"], "--source runs: the results store has no completed pretrain runs"),
        (["diff-config", "recipe='qwen3_30b_a3b_gb300_mxfp8", "recipe=x"], "cannot split"),
        (["plan", "train.global_batch_size=256,512"], "add -m / --multirun to plan one run per value"),
        (["submit", "train.global_batch_size=256,512"], "add -m / --multirun"),
        (["muon-cost", "recipe=qwen3_30b_a3b_gb300_mxfp8", "optimizer=adamw"], "muon-cost models Muon"),
        (["logs", "follow", "no-such-run", "--timeout", "1"], "no run 'no-such-run' in the job ledger"),
        # an unset Megatron-Bridge enum field given a misspelled value: the enum's did-you-mean, never advice to set
        # the misspelled value with '+'
        (
            ["predict", "model=qwen3_30b_a3b", "gpu=h100", "num_gpus=16", "model.recompute_granularity=selectiv"],
            "enum_value: model.recompute_granularity = 'selectiv' is not one of megatron-core 0.19.2's values "
            "(full, selective); did you mean 'selective'?",
        ),
        (
            ["predict", "model=qwen3_30b_a3b", "gpu=h100", "num_gpus=16", "model.moe_token_dispatcher_type=alltoal"],
            "model.moe_token_dispatcher_type = 'alltoal' is not one of",  # the value shown, not '<redacted>'
        ),
    ],
)
def test_bad_input_names_the_rule(env, args, message):
    res = run(args, env)
    assert res.returncode == 2, res.stdout + res.stderr[-2000:]
    assert message in res.stderr, res.stderr[-2000:]
    assert res.stderr.startswith("error: ") and "Traceback" not in res.stderr
    assert "To append to your config use +" not in res.stderr
    assert "=selectiv" not in res.stderr and "<redacted>" not in res.stderr


def test_logs_parse_errors(env, tmp_path):
    (tmp_path / "empty_events").mkdir()
    (tmp_path / "notes.txt").write_text("hello\nnothing to see here\n")
    res = run(["logs", "parse", str(tmp_path / "empty_events"), str(tmp_path / "notes.txt")], env)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "a directory without TensorBoard event files" in res.stderr
    assert "not a training log" in res.stderr


def test_logs_parse_names_the_statistic_and_counts_warmup_per_attempt(env):
    """Issue 18: the crash-and-restart log was summarised by the mean of all 20 steps (7.87 s, both attempts' first
    steps included) although iterations 11-19 follow the restart's own warm-up."""
    log = "tests/data/logs/nemo2_resiliency_crash_injob_restart.log"
    res = run(["logs", "parse", log], env, check=True)
    assert "step_time_s=7.592 (mean of 9 steps, median 7.592)" in res.stdout
    assert "after warm-up 10 and 1 step after each of 1 restart" in res.stdout
    data = json.loads(run(["logs", "parse", log, "--json", "--no-series"], env, check=True).stdout)
    assert data["statistic"] == "mean" and data["step_time_s"] == pytest.approx(7.5918, abs=1e-4)
    assert data["step_time_s_median"] == pytest.approx(7.592) and data["window"]["first_iteration"] == 11


def test_recipes_generate_errors(env):
    res = run(["recipes", "generate", "--release", "24.01"], env)
    assert res.returncode == 2 and "no upstream source for release 24.01" in res.stderr
    assert "Traceback" not in res.stderr


def test_unexpected_failure_shows_its_cause_not_a_traceback(env, tmp_path):
    """An exception that is not bad input (a bug, a broken environment): one line with its type, message and where it
    was raised, and the debug log's path; the traceback is in the log, and on the terminal with --verbose."""
    code = (
        "import sys\n"
        "import bridgebench.config.compose as c\n"
        "def broken(*a, **k):\n"
        "    raise RuntimeError('disk on fire')\n"
        "c.compose = broken\n"
        "from bridgebench.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    res = subprocess.run([sys.executable, "-c", code, "flops"], capture_output=True, text=True, env=env)
    assert res.returncode == 1
    assert "error: unexpected RuntimeError: disk on fire (at <string>:4, in broken)" in res.stderr
    assert "Traceback" not in res.stderr and str(tmp_path / "debug.log") in res.stderr
    assert (
        "Traceback" in (tmp_path / "debug.log").read_text() and "disk on fire" in (tmp_path / "debug.log").read_text()
    )
    loud = subprocess.run([sys.executable, "-c", code, "--verbose", "flops"], capture_output=True, text=True, env=env)
    assert loud.returncode == 1 and "Traceback (most recent call last)" in loud.stderr


def test_help_shows_flags_without_a_type(env):
    res = run(["--help"], env, check=True)
    assert "--version" in res.stdout and "--verbose" in res.stdout and "<bool>" not in res.stdout
    assert "<bool>" not in run(["table", "--help"], env, check=True).stdout
