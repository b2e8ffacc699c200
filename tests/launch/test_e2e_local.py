"""End to end on the real local SLURM cluster: submit (nemo-run SlurmExecutor) -> COMPLETED -> collect -> report;
failures recorded with their reason, a flaky failure retried (both attempts in the ledger), a time limit -> TIMEOUT,
collecting twice adds nothing.

The payload is the optimizer-step benchmark on a scaled-down Qwen3 MoE (hidden 256) so each job takes seconds on the
2-CPU node; ``job.wrapper`` runs tests/launch/faults.py in front of the payload to make it fail the way a real job
does (an NCCL watchdog timeout on its first attempt, or a plain crash) to exercise the retry and failure paths.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.launch.small_optstep import BB
from tests.launch.small_optstep import SMALL as SMALL_EXPERIMENT
from tests.launch.test_local_cluster import (  # noqa: F401  (fixtures)
    confined_memory,  # memory confined for one test
    slurm_cluster,  # session fixture: starts/stops the cluster
)

pytestmark = pytest.mark.slurm
SMALL = [*SMALL_EXPERIMENT, "job.repeats=1"]


@pytest.fixture()
def bb(tmp_path, slurm_cluster):  # noqa: F811
    env = {
        **slurm_cluster.env,
        "BRIDGEBENCH_LEDGER": str(tmp_path / "ledger.sqlite"),
        "BRIDGEBENCH_RESULTS": str(tmp_path / "runs"),
        "BRIDGEBENCH_JOB_DIR": str(tmp_path / "jobs"),
        "BRIDGEBENCH_PLANS": str(tmp_path / "plans"),
    }

    def run(*args, check=True, timeout=600):
        res = subprocess.run([*BB, *args], capture_output=True, text=True, env=env, timeout=timeout)
        if check and res.returncode:
            raise AssertionError(f"bridgebench {' '.join(args)} failed ({res.returncode}):\n{res.stderr[-3000:]}")
        return res

    run.env = env
    run.cmd = BB
    return run


def test_submit_complete_collect_report(bb, capsys):
    t0 = time.monotonic()
    attempts = json.loads(bb("submit", *SMALL, "--wait", "--timeout", "300", "--json").stdout)
    assert len(attempts) == 1 and attempts[0]["state"] == "COMPLETED", attempts
    assert attempts[0]["slurm_job_id"] and attempts[0]["experiment_id"]
    # the job is named after what runs: the CPU optimizer-step payload, not a GB300 BF16 recipe
    name = attempts[0]["name"]
    assert name.startswith("optstep-qwen3_30b_a3b-muon-") and "gb300" not in name and "bf16" not in name
    assert attempts[0]["job_name"].startswith(name)
    assert json.loads(bb("collect", "--json").stdout)["added"] == 1
    elapsed = time.monotonic() - t0
    assert json.loads(bb("collect", "--json").stdout)["added"] == 0  # idempotent
    rows = json.loads(bb("report", "--json").stdout)
    total = next(r for r in rows if r["family"] == "total")
    assert total["muon_step_s"] > 0 and total["adamw_step_s"] > 0 and total["ns_flops_per_s"] > 0
    assert {r["family"] for r in rows} >= {"attention", "expert", "router", "total"}
    from bridgebench.results.store import ResultStore

    rec = ResultStore(os.path.join(bb.env["BRIDGEBENCH_RESULTS"])).records(kind="optstep")[0]
    prov = rec["provenance"]
    assert prov["slurm_job_id"] == attempts[0]["slurm_job_id"] and prov["config_hash"] and prov["node_list"]
    assert prov["versions"]["torch"] and prov["peak_table_version"] and prov["flops_formula"]
    assert (rec["outcome"], rec["payload_started"], rec["name"]) == ("completed", True, name)
    assert "1 optimizer-step record, all used" in bb("report").stdout
    with capsys.disabled():
        print(
            f"\n[e2e] submit-to-record {elapsed:.1f} s; Muon/AdamW step ratio {total['ratio']:.2f}; "
            f"NS {total['ns_flops_per_s'] / 1e9:.1f} GFLOP/s"
        )


def fault(mode: str) -> str:
    """A ``job.wrapper`` override that runs tests/launch/faults.py MODE in front of the payload (test-only faults)."""
    faults = Path(__file__).with_name("faults.py")
    return f"job.wrapper=['{sys.executable}','{faults}','{mode}']"


def stored(bb) -> list[dict]:
    from bridgebench.results.store import ResultStore

    return ResultStore(Path(bb.env["BRIDGEBENCH_RESULTS"])).records(kind="optstep")


def test_failed_job_is_recorded_with_its_reason(bb):
    """The wrapper in front of the payload crashes: FAILED, and the payload never started."""
    res = bb("submit", *SMALL, fault("exit"), "--wait", "--timeout", "300", "--json", check=False)
    assert res.returncode == 3 and "submit: 1 run: 1 FAILED" in res.stderr, res.stderr[-2000:]
    attempts = json.loads(res.stdout)
    assert [a["state"] for a in attempts] == ["FAILED"]
    assert attempts[0]["reason"] and "crash" in attempts[0]["reason"]
    assert json.loads(bb("collect", "--json").stdout)["added"] == 1
    (rec,) = stored(bb)
    assert (rec["state"], rec["exit_code"], rec["outcome"], rec["payload_started"]) == (
        "FAILED",
        "1:0",
        "never_started",
        False,
    )
    assert "injected failure" in rec["outcome_detail"] and rec["log_outcome"] == "crash"
    rep = bb("report", check=False)
    assert rep.returncode == 2 and "1 optimizer-step record, none completed: 1 never_started" in rep.stderr


def test_failing_payload_is_failed_with_its_exit_code_and_reason(bb):
    """The payload starts and refuses its settings (more experts than the model has): FAILED, exit 2, its error."""
    res = bb("submit", *SMALL, "job.experts=9", "--wait", "--timeout", "300", "--json", check=False)
    assert res.returncode == 3 and "1 FAILED" in res.stderr, res.stderr[-2000:]
    (a,) = json.loads(res.stdout)
    assert a["state"] == "FAILED" and a["exit_code"] == "2:0" and "exceeds" in a["reason"], a
    bb("collect")
    (rec,) = stored(bb)
    assert (rec["outcome"], rec["payload_started"], rec["exit_code"]) == ("failed", True, "2:0")
    assert "experts=9 exceeds the model's num_moe_experts=8" in rec["outcome_detail"]
    assert "none completed: 1 FAILED" in bb("report", check=False).stderr


def test_payload_that_never_started_is_not_completed(bb):
    """A wrapper that exits 0 without running the payload (SLURM: COMPLETED) and one that does not exist (exit 127):
    both 'never_started', submit --wait exits 3, report says so."""
    res = bb("submit", *SMALL, "job.wrapper=['/bin/true']", "--wait", "--timeout", "300", "--json", check=False)
    assert res.returncode == 3 and "1 COMPLETED (never_started)" in res.stderr, res.stderr[-2000:]
    assert json.loads(res.stdout)[0]["state"] == "COMPLETED"
    missing = "/nonexistent/bridgebench-wrapper"
    res = bb("submit", *SMALL, f"job.wrapper=['{missing}']", "--again", "--wait", "--timeout", "300", check=False)
    assert res.returncode == 3 and "1 FAILED" in res.stderr, res.stderr[-2000:]
    assert json.loads(bb("collect", "--json").stdout) == {"added": 2, "outcomes": {"never_started": 2}}
    recs = {r["state"]: r for r in stored(bb)}
    assert recs["COMPLETED"]["outcome"] == "never_started" and recs["COMPLETED"]["payload_started"] is False
    assert "never started" in recs["COMPLETED"]["outcome_detail"]
    assert recs["FAILED"]["outcome"] == "never_started" and recs["FAILED"]["exit_code"] == "127:0"
    assert missing in recs["FAILED"]["outcome_detail"] and "No such file" in recs["FAILED"]["outcome_detail"]
    rep = bb("report", check=False)
    assert rep.returncode == 2 and "2 optimizer-step records, none completed: 2 never_started" in rep.stderr


def test_flaky_failure_is_retried_and_both_attempts_are_in_the_ledger(bb):
    attempts = json.loads(bb("submit", *SMALL, fault("nccl_once"), "--wait", "--timeout", "300", "--json").stdout)
    assert [(a["attempt"], a["state"]) for a in attempts] == [(0, "FAILED"), (1, "COMPLETED")], attempts
    assert attempts[0]["reason"].startswith("nccl_error") and attempts[0]["retried"]
    assert attempts[0]["run_id"] == attempts[1]["run_id"]


def _wait_payload_started(jobs: Path, timeout: float = 120) -> None:
    """Until a job log under ``jobs`` shows the payload's ``BRIDGEBENCH_START`` line (launch/outcome.py): a job
    that is RUNNING may not have created its ``srun`` step yet, and a time limit then makes the step fail to start
    ("Unable to create step ... already completing") -- the job ends FAILED, not TIMEOUT (seen once at load 2)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for log in jobs.rglob("*.out"):
            if "BRIDGEBENCH_START" in log.read_text(errors="replace"):
                return
        time.sleep(0.5)
    pytest.fail(f"no job log under {jobs} shows BRIDGEBENCH_START after {timeout}s")


def test_time_limit_is_recorded_as_timeout(bb, slurm_cluster, tmp_path):  # noqa: F811
    attempts = json.loads(bb("submit", *SMALL, "job.repeats=100000", "--json").stdout)
    job = attempts[0]["slurm_job_id"]
    slurm_cluster.wait_running(job, timeout=60)
    _wait_payload_started(tmp_path / "jobs")
    slurm_cluster.run("scontrol", "update", f"JobId={job}", "TimeLimit=0")
    deadline = time.monotonic() + 120
    state = None
    while time.monotonic() < deadline:
        state = json.loads(bb("status", "--json").stdout)[0]["state"]
        if state == "TIMEOUT":
            break
        time.sleep(3)
    assert state == "TIMEOUT"
    assert "added 1 new record(s) to the results store: 1 TIMEOUT" in bb("collect").stdout  # not just "added 1"
    (rec,) = stored(bb)
    assert rec["outcome"] == "timeout" and rec["payload_started"] is True and rec["exit_code"]
    assert rec["outcome_detail"].startswith("time_limit") and "DUE TO TIME LIMIT" in rec["outcome_detail"]
    rep = bb("report", check=False)
    assert rep.returncode == 2 and "1 optimizer-step record, none completed: 1 TIMEOUT" in rep.stderr


def test_cancel(bb, slurm_cluster):  # noqa: F811
    attempts = json.loads(bb("submit", *SMALL, "job.repeats=100000", "--json").stdout)
    slurm_cluster.wait_running(attempts[0]["slurm_job_id"], timeout=60)
    unknown = bb("cancel", "deadbeef-r0", check=False)  # the reproduction: an error, nothing cancelled
    assert unknown.returncode == 2 and "unknown run id(s) deadbeef-r0" in unknown.stderr
    assert json.loads(bb("status", "--json").stdout)[0]["state"] == "RUNNING"
    out = bb("cancel", attempts[0]["run_id"]).stdout
    assert "cancelled 1 attempt" in out
    assert json.loads(bb("status", "--json").stdout)[0]["state"] == "CANCELLED"
    assert "nothing to cancel" in bb("cancel", attempts[0]["run_id"]).stdout
    bb("collect")
    (rec,) = stored(bb)
    assert rec["outcome"] == "cancelled" and rec["state"] == "CANCELLED"
    rep = bb("report", check=False)
    assert rep.returncode == 2 and "1 optimizer-step record, none completed: 1 CANCELLED" in rep.stderr


def test_out_of_memory_is_recorded_as_out_of_memory(bb, confined_memory):  # noqa: F811
    """The payload starts, then its step outgrows the job's --mem (cluster.mem=400M): the kernel's OOM killer kills
    it in the step's memory cgroup (task/cgroup, launch/cluster/cgroup.conf.in). SLURM: step OUT_OF_MEMORY, job
    FAILED 1:0 (srun's exit); the attempt, the record and submit --wait say OUT_OF_MEMORY with the step and the
    log's oom line. Memory is confined for this test only (confined_memory: launch/cluster/up.sh says why)."""
    cluster = confined_memory
    res = bb("submit", *SMALL, "cluster.mem=400M", fault("oom"), "--wait", "--timeout", "300", "--json", check=False)
    assert res.returncode == 3, res.stderr[-2000:]
    line = [ln for ln in res.stderr.splitlines() if ln.startswith("submit: ")]
    assert len(line) == 1 and line[0].startswith("submit: 1 run: 1 OUT_OF_MEMORY -- "), res.stderr[-2000:]
    (a,) = json.loads(res.stdout)
    assert (a["state"], a["exit_code"]) == ("OUT_OF_MEMORY", "1:0"), a
    assert a["reason"].startswith("oom: ") and "oom-kill event" in a["reason"], a["reason"]
    step = re.search(
        rf"step ({a['slurm_job_id']}\.\d+) ended OUT_OF_MEMORY \(exit code 0:125; job FAILED\)", a["reason"]
    )
    assert step, a["reason"]
    sacct = cluster.run("sacct", "-n", "-P", "-j", a["slurm_job_id"], "--format=JobID,State").stdout.split()
    assert f"{a['slurm_job_id']}|FAILED" in sacct and f"{step[1]}|OUT_OF_MEMORY" in sacct  # SLURM's own view
    assert "1 OUT_OF_MEMORY" in bb("collect").stdout
    (rec,) = stored(bb)
    assert (rec["state"], rec["outcome"], rec["exit_code"], rec["payload_started"]) == (
        "OUT_OF_MEMORY",
        "out_of_memory",
        "1:0",
        True,
    )
    assert "oom-kill event" in rec["outcome_detail"] and rec["log_outcome"] == "oom"
    rep = bb("report", check=False)
    assert rep.returncode == 2 and "1 optimizer-step record, none completed: 1 OUT_OF_MEMORY" in rep.stderr


def test_node_failure_is_recorded_as_node_fail(bb, slurm_cluster):  # noqa: F811
    """The node goes DOWN under a running job (``scontrol update NodeName=... State=DOWN``, as slurmctld does when
    a node stops answering): NODE_FAIL, final -- bridgebench makes its jobs non-requeueable, since nemo-run submits
    with --requeue and SLURM would otherwise put the job back to PENDING under the same id. The node is resumed in
    all cases; cluster.max_retries=0, as a retry would exclude the only node."""
    no_retry = "cluster.max_retries=0"
    (a,) = json.loads(bb("submit", *SMALL, "job.repeats=100000", no_retry, "--json").stdout)
    job = a["slurm_job_id"]
    slurm_cluster.wait_running(job, timeout=60)
    assert "Requeue=0" in slurm_cluster.run("scontrol", "show", "job", job).stdout
    node = slurm_cluster.run("squeue", "-h", "-j", job, "-o", "%N").stdout.strip()
    state = None
    try:
        slurm_cluster.run("scontrol", "update", f"NodeName={node}", "State=DOWN", "Reason=bridgebench test NODE_FAIL")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            state = json.loads(bb("status", no_retry, "--json").stdout)[0]["state"]
            if state not in ("RUNNING", "PENDING", "COMPLETING", "UNKNOWN"):
                break
            time.sleep(1)
    finally:
        slurm_cluster.run("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if slurm_cluster.run("sinfo", "-h", "-n", node, "-o", "%T").stdout.strip() in ("idle", "mixed"):
                break
            time.sleep(0.5)
    assert state == "NODE_FAIL"
    assert slurm_cluster.run("squeue", "-h", "-j", job, "-o", "%T", check=False).stdout.strip() in ("", "NODE_FAIL")
    (a,) = json.loads(bb("status", no_retry, "--json").stdout)  # not retried, not requeued: one attempt, final
    assert (a["state"], a["exit_code"]) == ("NODE_FAIL", "0:0") and "node failure" in a["reason"].lower(), a
    assert "1 NODE_FAIL" in bb("collect").stdout
    (rec,) = stored(bb)
    assert (rec["state"], rec["outcome"], rec["exit_code"]) == ("NODE_FAIL", "node_fail", "0:0")
    # slurmstepd's "DUE TO NODE FAILURE" or srun's "Node failure on <node>": which reaches the log first varies
    assert rec["outcome_detail"].startswith("node_failure") and "node failure" in rec["outcome_detail"].lower()
    rep = bb("report", check=False)
    assert rep.returncode == 2 and "1 optimizer-step record, none completed: 1 NODE_FAIL" in rep.stderr
