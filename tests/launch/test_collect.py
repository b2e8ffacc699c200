"""Collect never drops a record silently: a stored record with the same id but other content stops collect with both
named, nothing is overwritten and the attempt stays uncollected; records are deterministic (collecting again is a
no-op) and carry their config and log copies."""

from __future__ import annotations

import hashlib
import time

import pytest
from omegaconf import OmegaConf

from bridgebench.config.compose import compose
from bridgebench.launch.collect import CollectConflict, collect, record_id, records_for
from bridgebench.launch.ledger import Attempt, Ledger
from bridgebench.results.store import ResultStore


def _attempt(tmp_path, job="1", uid="u1", cluster="local-aaaa") -> Attempt:
    plan = tmp_path / f"plan-{uid}"
    plan.mkdir()
    (plan / "config.yaml").write_text(OmegaConf.to_yaml(compose(["experiment=optstep_local"]), resolve=True))
    jobs = tmp_path / f"job-{uid}"
    (jobs / "experiments").mkdir(parents=True)
    (jobs / "experiments" / f"sbatch_x_{job}.out").write_text(f"job {job} of {uid}\nBRIDGEBENCH_OPTSTEP {{}}\n")
    return Attempt(
        run_id="abc123-r0",
        attempt=0,
        name="run",
        job_type="optstep",
        state="COMPLETED",
        submitted_at=time.time(),
        updated_at=time.time(),
        slurm_job_id=job,
        plan_dir=str(plan),
        job_dir=str(jobs),
        uid=uid,
        cluster_id=cluster,
        job_name="run-r0-a0",
        git_commit="0" * 40,
        bridgebench_version="0.2.0",
        git_dirty=False,
    )


def test_records_are_deterministic_and_carry_config_and_logs(tmp_path):
    store = ResultStore(tmp_path / "runs")
    a = _attempt(tmp_path)
    from bridgebench.launch.tracking import attempt_logs

    first, second = records_for(a, attempt_logs(a), store), records_for(a, attempt_logs(a), store)
    assert first == second and first[0]["record_id"] == record_id(a) == "local-aaaa/1/u1/optstep"
    (log,) = first[0]["provenance"]["logs"]
    assert hashlib.sha256(store.get_blob(log["sha256"])).hexdigest() == log["sha256"]
    assert first[0]["config"]["job"]["type"] == "optstep" and first[0]["provenance"]["git_commit"] == "0" * 40


def test_a_conflicting_record_is_named_not_dropped(tmp_path):
    store = ResultStore(tmp_path / "runs")
    ledger = Ledger(tmp_path / "ledger.sqlite")
    a = _attempt(tmp_path)
    ledger.add(a)
    stale = {
        "record_id": record_id(a),
        "kind": "optstep",
        "run_id": "other-r0",
        "attempt": 0,
        "name": "older run",
        "provenance": {"slurm_job_id": "1", "cluster_id": "local-aaaa"},
        "timestamps": {"submitted_utc": "x"},
    }
    store.add([stale])
    with pytest.raises(CollectConflict) as err:
        collect(ledger, store)
    text = str(err.value)
    assert record_id(a) in text and "older run" in text and "abc123-r0" in text and "nothing was overwritten" in text
    assert store.get(record_id(a)) == stale and not ledger.attempts()[0].collected
    # a second run that got the same SLURM job id on another cluster state is a different record
    b = _attempt(tmp_path, uid="u2", cluster="local-bbbb")
    b.run_id = "abc123-r1"
    ledger.add(b)
    with pytest.raises(CollectConflict):
        collect(ledger, store)  # still names the first; the second is stored
    assert store.get(record_id(b)) is not None and {x.run_id: x.collected for x in ledger.attempts()}["abc123-r1"]
