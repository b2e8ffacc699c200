"""A node failure never breaks monitoring (issue 24, "One node failure breaks monitoring"), on the real local
cluster (one node in partition ``local``): after a NODE_FAIL, a retry that cannot be submitted leaves ``status``,
``status --json`` and ``submit --wait`` of another run showing the ledger (exit 0, a note saying why), and the retry,
once it can be submitted, does not exclude the partition's only node (the old retry excluded it, and sbatch
refused it on every call)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.launch.test_e2e_local import SMALL, bb  # noqa: F401  (fixture)
from tests.launch.test_local_cluster import slurm_cluster  # noqa: F401  (fixture)

pytestmark = pytest.mark.slurm


def _node_fail(bb, slurm_cluster, job: str) -> list[dict]:  # noqa: F811
    """Set the job's node DOWN under it (as slurmctld does for a node that stops answering), poll ``status --json``
    until the job is NODE_FAIL, resume the node; the ledger as the last status showed it."""
    slurm_cluster.wait_running(job, timeout=60)
    node = slurm_cluster.run("squeue", "-h", "-j", job, "-o", "%N").stdout.strip()
    shown: list[dict] = []
    try:
        slurm_cluster.run("scontrol", "update", f"NodeName={node}", "State=DOWN", "Reason=bridgebench retry test")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            res = bb("status", "--json", check=False)
            assert res.returncode == 0, res.stderr[-2000:]  # monitoring never breaks, whatever the retry does
            shown = json.loads(res.stdout)
            if shown[0]["state"] not in ("RUNNING", "PENDING", "COMPLETING", "UNKNOWN"):
                break
            time.sleep(1)
    finally:
        slurm_cluster.run("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if slurm_cluster.run("sinfo", "-h", "-n", node, "-o", "%T").stdout.strip() in ("idle", "mixed"):
                break
            time.sleep(0.5)
    return shown


def test_node_fail_on_a_one_node_partition_keeps_status_and_retries_on_that_node(bb, slurm_cluster):  # noqa: F811
    (a,) = json.loads(bb("submit", *SMALL, "job.repeats=100000", "--json").stdout)
    job = a["slurm_job_id"]
    # the retry cannot be submitted: its plan names a partition SLURM does not have (sbatch refuses it)
    cfg_path = Path(a["plan_dir"]) / "config.yaml"
    good = cfg_path.read_text()
    broken = OmegaConf.load(cfg_path)
    broken.cluster.partition = "nosuchpartition"
    cfg_path.write_text(OmegaConf.to_yaml(broken))
    shown = _node_fail(bb, slurm_cluster, job)
    assert [x["state"] for x in shown] == ["NODE_FAIL"], shown
    res = bb("status", check=False)
    assert res.returncode == 0 and "job ledger" in res.stdout and a["run_id"] in res.stdout, res.stderr[-2000:]
    assert "could not be submitted" in res.stderr and "next status tries again" in res.stderr
    assert "Traceback" not in res.stderr
    # submit --wait of another run is not blocked by this one's retry either
    other = bb(
        "submit", *SMALL, "job.repeats=1", "optimizer.muon_num_ns_steps=3", "--wait", "--timeout", "300", check=False
    )
    assert other.returncode == 0 and "1 run: 1 COMPLETED" in other.stderr, other.stderr[-2000:]
    # the plan is readable again: the retry goes to the partition's only node, not excluded
    cfg_path.write_text(good)
    res = bb("status", "--json", check=False)
    assert res.returncode == 0 and "does not exclude" in res.stderr, res.stderr[-2000:]
    retries = [x for x in json.loads(res.stdout) if x["run_id"] == a["run_id"] and x["attempt"] == 1]
    assert len(retries) == 1 and retries[0]["excluded_nodes"] == [] and retries[0]["slurm_job_id"], retries
    plain = bb("status", check=False)
    assert "does not exclude" not in plain.stderr  # said once, when the retry was submitted
    bb("cancel", a["run_id"])
