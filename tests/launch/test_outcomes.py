"""Outcomes told truthfully, the parts that need no cluster: the record's outcome from the scheduler's state, the
exit code and the logs (launch/outcome.py); ``submit --wait``'s exit code and line; the "skipped" line of ``report``
and ``compare`` (results/outcomes.py); ``logs parse`` saying ``incomplete`` unless the ledger knows the job runs;
``status`` with a missing ``slurm.conf`` answering at once with that cause; ``cancel`` of an unknown run id.
The same outcomes set up for real on the local SLURM cluster: tests/launch/test_e2e_local.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bridgebench.config.compose import compose
from bridgebench.launch.ledger import Attempt, Ledger
from bridgebench.launch.outcome import decide, failure_reason, last_error_line
from bridgebench.launch.submit import EXIT_NOT_COMPLETED, EXIT_OK, EXIT_WAIT_TIMEOUT, wait_summary
from bridgebench.results.outcomes import outcome_of, skip_line

BB = [sys.executable, "-m", "bridgebench.cli"]
LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"
START = 'BRIDGEBENCH_START {"payload":"optstep"}\n'


def log(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_a_job_whose_payload_never_ran_is_never_started_whatever_slurm_says(tmp_path):
    sbatch = log(tmp_path, "sbatch_x_1.out", "+ srun ...\njob exited with code 0\n")
    oc = decide("COMPLETED", "0:0", [sbatch], has_result=False, reason=None)
    assert oc.outcome == "never_started" and oc.payload_started is False and "never started" in oc.detail
    srun = log(tmp_path, "log-x_2_0.out", "bash: line 1: /nonexistent/w: No such file or directory\n")
    oc = decide("FAILED", "127:0", [srun, sbatch], has_result=False, reason="failed: exit code 127:0")
    assert (oc.outcome, oc.payload_started) == ("never_started", False)
    assert oc.detail == "bash: line 1: /nonexistent/w: No such file or directory"


def test_a_started_payload_gets_the_schedulers_state_and_the_logs_reason(tmp_path):
    srun = log(tmp_path, "log-x_3_0.out", START + "error: experts=9 exceeds the model's num_moe_experts=8\n")
    reason = failure_reason("FAILED", "2:0", "None", [srun])
    assert reason == "failed: exit code 2:0, error: experts=9 exceeds the model's num_moe_experts=8"
    oc = decide("FAILED", "2:0", [srun], has_result=False, reason=reason)
    assert (oc.outcome, oc.payload_started, oc.detail) == ("failed", True, reason)
    for state in ("TIMEOUT", "CANCELLED", "OUT_OF_MEMORY", "NODE_FAIL"):
        assert decide(state, "0:15", [srun], has_result=False, reason=None).outcome == state.lower()
    # a job cancelled before it started keeps the scheduler's verdict: that is the cause
    assert decide("CANCELLED", "0:0", [], has_result=False, reason=None).payload_started is None
    oc = decide("COMPLETED", "0:0", [srun], has_result=True, reason=None)
    assert (oc.outcome, oc.detail) == ("completed", None)
    no_result = decide("COMPLETED", "0:0", [log(tmp_path, "log-y_4_0.out", START)], has_result=False, reason=None)
    assert no_result.outcome == "no_result" and "no result" in no_result.detail


def test_a_log_without_the_start_line_but_with_a_result_line_started():
    """Payloads of bridgebench versions before the start line printed only their result line."""
    from bridgebench.launch.outcome import payload_started

    assert payload_started([LOGS / "constructed_mbridge_truncated_running.log"]) is False
    assert payload_started([]) is None


def test_the_timeout_reason_is_slurms_line(tmp_path):
    srun = log(
        tmp_path,
        "log-x_5_0.out",
        START + "slurmstepd: error: *** STEP 5.0 ON vm CANCELLED AT 2026-11-26T06:00:00 DUE TO TIME LIMIT ***\n",
    )
    assert failure_reason("TIMEOUT", "0:15", None, [srun]).startswith("time_limit: ")
    assert last_error_line([srun]).startswith("slurmstepd: error: *** STEP 5.0")


def _attempt(run_id: str, state: str, attempt: int = 0, **kw) -> Attempt:
    return Attempt(
        run_id=run_id,
        attempt=attempt,
        name="optstep-m-muon-abc",
        job_type="optstep",
        state=state,
        submitted_at=0.0,
        updated_at=0.0,
        slurm_job_id="1",
        **kw,
    )


def test_submit_wait_exit_codes_and_line():
    code, line = wait_summary([_attempt("a-r0", "COMPLETED"), _attempt("a-r1", "COMPLETED")])
    assert (code, line) == (EXIT_OK, "2 runs: 2 COMPLETED")
    code, line = wait_summary(
        [
            _attempt("a-r0", "COMPLETED"),
            _attempt("a-r1", "TIMEOUT", reason="time_limit: ..."),
            _attempt("a-r2", "CANCELLED"),
            _attempt("a-r3", "FAILED", reason="nccl_error: x"),
            _attempt("a-r3", "COMPLETED", attempt=1),  # a retried run counts by its retry
        ]
    )
    assert code == EXIT_NOT_COMPLETED and line.startswith("4 runs: 2 COMPLETED, 1 CANCELLED, 1 TIMEOUT -- ")
    assert "a-r1: TIMEOUT (time_limit: ...)" in line
    code, line = wait_summary([_attempt("a-r0", "COMPLETED"), _attempt("a-r1", "RUNNING")])
    assert code == EXIT_WAIT_TIMEOUT and "still unfinished" in line


def test_skip_lines_say_what_was_skipped_and_why():
    def rec(outcome, state):
        return {"outcome": outcome, "state": state, "payload_started": outcome != "never_started"}

    recs = [rec("timeout", "TIMEOUT"), rec("cancelled", "CANCELLED"), rec("cancelled", "CANCELLED")]
    assert skip_line(recs, 0) == "3 records, none completed: 2 CANCELLED, 1 TIMEOUT"
    recs += [rec("completed", "COMPLETED")] * 4 + [rec("never_started", "COMPLETED")]
    assert skip_line(recs, 4) == "8 records, 4 used; skipped 4: 2 CANCELLED, 1 TIMEOUT, 1 never_started"
    assert skip_line([rec("completed", "COMPLETED")], 1) == "1 record, all used"
    # records stored before the outcome fields: SLURM's state decides, the old log-class 'outcome' is ignored
    assert outcome_of({"state": "COMPLETED", "outcome": "running"}) == "completed"
    assert outcome_of({"state": "FAILED", "outcome": "running"}) == "failed"


def test_logs_parse_says_incomplete_unless_the_ledger_knows_the_job_runs(tmp_path):
    job_dir = tmp_path / "jobs" / "abc-r0" / "a0"
    job_dir.mkdir(parents=True)
    target = job_dir / "log-run_9_0.out"
    target.write_text((LOGS / "constructed_mbridge_truncated_running.log").read_text())
    env = {**os.environ, "BRIDGEBENCH_LEDGER": str(tmp_path / "ledger.sqlite")}
    res = subprocess.run([*BB, "logs", "parse", str(target)], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0 and "outcome=incomplete steps=" in res.stdout, res.stdout + res.stderr
    assert not (tmp_path / "ledger.sqlite").exists()  # looking did not create a ledger
    Ledger(tmp_path / "ledger.sqlite").add(_attempt("abc-r0", "RUNNING", job_dir=str(job_dir)))
    res = subprocess.run(
        [*BB, "logs", "parse", str(target), "--json", "--no-series"], capture_output=True, text=True, env=env
    )
    j = json.loads(res.stdout)
    assert j["outcome"] == "running" and j["job_state"] == "job 1 RUNNING per the job ledger"
    Ledger(tmp_path / "ledger.sqlite").update("abc-r0", 0, state="TIMEOUT")
    res = subprocess.run([*BB, "logs", "parse", str(target)], capture_output=True, text=True, env=env)
    assert "outcome=incomplete" in res.stdout


def test_status_with_a_missing_slurm_conf_answers_at_once_with_the_cause(tmp_path):
    Ledger(tmp_path / "ledger.sqlite").add(_attempt("abc-r0", "RUNNING"))  # no cluster id: any state of "local"
    missing = tmp_path / "nowhere" / "slurm.conf"
    env = {**os.environ, "BRIDGEBENCH_LEDGER": str(tmp_path / "ledger.sqlite"), "SLURM_CONF": str(missing)}
    t0 = time.monotonic()
    res = subprocess.run([*BB, "status", "--json"], capture_output=True, text=True, env=env, timeout=120)
    took = time.monotonic() - t0
    assert res.returncode == 0, res.stderr[-2000:]
    (a,) = json.loads(res.stdout)
    assert a["state"] == "UNKNOWN" and "last known RUNNING" in a["reason"]
    err = " ".join(res.stderr.split())
    assert f"SLURM_CONF {missing} does not exist" in err and "make cluster-up" in err, err
    assert "squeue" not in err and "Traceback" not in err
    assert took < 15, f"{took:.1f} s"  # SLURM is never asked; the rest is the CLI's own start (loaded machine)


def test_probe_finds_a_missing_conf_and_refused_ports_quickly(tmp_path):
    from bridgebench.launch.slurmcli import probe

    missing = compose(["cluster=local", f"cluster.client_env.SLURM_CONF={tmp_path / 'x.conf'}"])
    reach = probe(missing)
    assert reach.none and "does not exist" in reach.controller
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        "SlurmctldHost=node(127.0.0.1)\nSlurmctldPort=1\nAccountingStorageType=accounting_storage/slurmdbd\n"
        "AccountingStorageHost=127.0.0.1\nAccountingStoragePort=1\n"
    )
    t0 = time.monotonic()
    reach = probe(compose(["cluster=local", f"cluster.client_env.SLURM_CONF={conf}"]))
    assert time.monotonic() - t0 < 5
    assert "slurmctld at 127.0.0.1:1" in reach.controller and "slurmdbd at 127.0.0.1:1" in reach.accounting


def test_cancel_of_an_unknown_run_id_is_an_error_and_cancels_nothing(tmp_path):
    from bridgebench.launch.submit import SubmitError, cancel

    ledger = Ledger(tmp_path / "ledger.sqlite")
    ledger.add(_attempt("deadbeef0000-r0", "RUNNING", cluster_id="local"))
    cfg = compose(["cluster=local", f"cluster.client_env.SLURM_CONF={tmp_path / 'none.conf'}"])
    with pytest.raises(SubmitError, match=r"unknown run id\(s\) deadbeef-r0.*did you mean deadbeef0000-r0"):
        cancel(cfg, ["deadbeef-r0"], ledger)
    assert ledger.attempts()[0].state == "RUNNING"


def test_status_with_the_login_node_down_names_it(tmp_path, monkeypatch):
    """An SSH cluster whose login node refuses connections: the cause at once, with the way to start it."""
    import socket

    from bridgebench.launch import tracking

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once the block ends
    monkeypatch.setenv("BRIDGEBENCH_REMOTE_SSH_PORT", str(port))
    monkeypatch.setenv("BRIDGEBENCH_REMOTE_ROOT", str(tmp_path / "remote"))
    cfg = compose(["cluster=local_remote"])
    ledger = Ledger(tmp_path / "ledger.sqlite")
    ledger.add(_attempt("abc-r0", "RUNNING"))
    t0 = time.monotonic()
    out = tracking.update(cfg, ledger)
    assert time.monotonic() - t0 < 5
    (note,) = out.notes
    assert f"the login node 127.0.0.1:{port} does not accept SSH connections" in note and "make remote-up" in note
    assert out.attempts[0].state == "UNKNOWN"
