"""Status that degrades gracefully, without a running cluster: a SLURM client pointed at a controller and a slurmdbd
that do not answer (real squeue / sacct, ports with nothing listening) -> the ledger is still shown, unfinished jobs
UNKNOWN with a hint, LOST once ``cluster.lost_after_s`` has passed; a job of a purged cluster state is LOST at once.
The same on the real local cluster (cluster down, killed slurmctld): tests/launch/test_faults_local.py."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import time

import pytest

from bridgebench.config.compose import compose
from bridgebench.launch import tracking
from bridgebench.launch.ledger import LOST, Attempt, Ledger

BB = [sys.executable, "-m", "bridgebench.cli"]
needs_slurm_client = pytest.mark.skipif(shutil.which("sacct") is None, reason="SLURM client commands not installed")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: nothing listens there


@pytest.fixture()
def dead_cluster(tmp_path):
    """A slurm.conf whose controller and slurmdbd ports have nothing listening (a cluster that is down)."""
    port = _closed_port()
    conf = tmp_path / "etc" / "slurm.conf"
    conf.parent.mkdir()
    conf.write_text(
        f"ClusterName=bbdown\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort={port}\nAuthType=auth/munge\n"
        f"AuthInfo=socket={tmp_path}/munge.socket\nAccountingStorageType=accounting_storage/slurmdbd\n"
        f"AccountingStorageHost=127.0.0.1\nAccountingStoragePort={port}\nMessageTimeout=2\n"
        "NodeName=localhost CPUs=1 State=UNKNOWN\nPartitionName=local Nodes=localhost Default=YES\n"
    )
    (tmp_path / "etc" / "cluster-id").write_text("0f0e0d0c-0000-4000-8000-000000000001\n")
    return conf


def _attempt(state="RUNNING", cluster_id=None, **kw) -> Attempt:
    now = time.time()
    return Attempt(
        run_id=kw.pop("run_id", "abc123-r0"),
        attempt=0,
        name="run",
        job_type="optstep",
        state=state,
        submitted_at=now,
        updated_at=now,
        slurm_job_id=kw.pop("job", "7"),
        cluster_id=cluster_id,
        job_name="run-r0-a0",
        **kw,
    )


@needs_slurm_client
def test_cluster_down_shows_the_ledger_unknown_then_lost(tmp_path, dead_cluster):
    cfg = compose(
        [
            "cluster=local",
            f"cluster.client_env.SLURM_CONF={dead_cluster}",
            "cluster.lost_after_s=60",
            f"cluster.identity_file={dead_cluster.parent / 'cluster-id'}",
        ]
    )
    ledger = Ledger(tmp_path / "ledger.sqlite")
    ledger.add(_attempt(cluster_id="local-0f0e0d0c-0000-4000-8000-000000000001"))
    ledger.add(_attempt(state="COMPLETED", run_id="done-r0", job="6"))
    first = tracking.update(cfg, ledger)
    shown = {a.run_id: a for a in first.attempts}
    assert shown["abc123-r0"].state == "UNKNOWN" and "last known RUNNING" in shown["abc123-r0"].reason
    assert shown["done-r0"].state == "COMPLETED"  # finished attempts are shown as they are
    assert any("cannot reach SLURM" in n and "make cluster-up" in n for n in first.notes), first.notes
    stored = {a.run_id: a for a in ledger.attempts()}["abc123-r0"]
    assert stored.state == "RUNNING" and stored.unknown_since is not None  # the ledger keeps the last known state
    later = tracking.update(cfg, ledger, now=stored.unknown_since + 61)
    lost = {a.run_id: a for a in later.attempts}["abc123-r0"]
    assert lost.state == LOST and "lost_after_s = 60" in lost.reason and lost.settled and not lost.finished


def test_a_job_of_a_purged_cluster_state_is_lost_at_once(tmp_path):
    ident = tmp_path / "cluster-id"
    ident.write_text("11111111-2222-4333-8444-555555555555\n")
    cfg = compose(["cluster=local", f"cluster.identity_file={ident}"])
    ledger = Ledger(tmp_path / "ledger.sqlite")
    ledger.add(_attempt(cluster_id="local-99999999-2222-4333-8444-555555555555"))
    out = tracking.update(cfg, ledger)
    (a,) = out.attempts
    assert a.state == LOST and "which is gone" in a.reason and "local-11111111" in a.reason


@needs_slurm_client
def test_status_command_with_the_cluster_down(tmp_path, dead_cluster):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    ledger.add(_attempt(state="PENDING"))
    env = {**os.environ, "BRIDGEBENCH_LEDGER": str(tmp_path / "ledger.sqlite"), "SLURM_CONF": str(dead_cluster)}
    res = subprocess.run([*BB, "status", "--json"], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    (a,) = json.loads(res.stdout)
    assert a["state"] == "UNKNOWN" and a["slurm_job_id"] == "7"
    assert "cannot reach SLURM" in res.stderr and "make cluster-up" in res.stderr and "Traceback" not in res.stderr


def test_an_old_ledger_gains_the_new_columns(tmp_path):
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE attempts (run_id TEXT NOT NULL, attempt INTEGER NOT NULL, name TEXT NOT NULL, job_type TEXT "
        "NOT NULL, slurm_job_id TEXT, experiment_id TEXT, state TEXT NOT NULL, reason TEXT, exit_code TEXT, "
        "submitted_at REAL NOT NULL, updated_at REAL NOT NULL, plan_dir TEXT, job_dir TEXT, node_list TEXT, "
        "excluded_nodes TEXT, collected INTEGER NOT NULL DEFAULT 0, retried INTEGER NOT NULL DEFAULT 0, "
        "PRIMARY KEY (run_id, attempt))"
    )
    db.execute(
        "INSERT INTO attempts VALUES ('h-r0', 0, 'n', 'optstep', '11', NULL, 'COMPLETED', NULL, '0:0', 1, 1, "
        "NULL, NULL, 'vm', '[]', 1, 0)"
    )
    db.commit()
    db.close()
    (a,) = Ledger(path).attempts()
    assert a.slurm_job_id == "11" and a.uid is None and a.cluster_id is None and a.collected
    from bridgebench.launch.collect import record_id

    assert record_id(a) == "cluster-unknown/11/legacy-h-r0-a0/optstep"
