"""Collect survives any one bad attempt (issue 24, "One bad job folder blocks collect"): a symlink loop in a job
folder (ELOOP) or a job-written ``out/optstep.json`` of ``[]`` is set aside with its reason, every other attempt is
collected, and ``bridgebench collect`` exits 5 ("partial", rule ``collect_partial``) naming what it skipped; the same
attempt stored under a second record id counts once; a ledger written by a newer bridgebench (an extra column) is
read."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest

from bridgebench.launch.collect import CollectPartial, collect, record_id
from bridgebench.launch.ledger import Ledger
from bridgebench.results.store import ResultStore
from tests.launch.test_collect import _attempt

BB = [sys.executable, "-m", "bridgebench.cli"]


def _three_attempts(tmp_path):
    """A symlink loop in the first attempt's folder, ``[]`` as the second's result, the third fine."""
    ledger = Ledger(tmp_path / "ledger.sqlite")
    loop = _attempt(tmp_path, job="1", uid="u1")
    os.symlink("loop", os.path.join(loop.job_dir, "experiments", "loop"))  # a -> a: ELOOP on any stat
    ledger.add(loop)
    bad_json = _attempt(tmp_path, job="2", uid="u2")
    bad_json.run_id = "abc123-r1"
    os.makedirs(os.path.join(bad_json.job_dir, "out"))
    with open(os.path.join(bad_json.job_dir, "out", "optstep.json"), "w") as f:
        f.write("[]")
    ledger.add(bad_json)
    good = _attempt(tmp_path, job="3", uid="u3")
    good.run_id = "abc123-r2"
    ledger.add(good)
    return ledger, loop, bad_json, good


def test_one_bad_job_folder_does_not_block_collect(tmp_path):
    ledger, loop, bad_json, good = _three_attempts(tmp_path)
    store = ResultStore(tmp_path / "runs")
    with pytest.raises(CollectPartial) as err:
        collect(ledger, store)
    text = str(err.value)
    assert err.value.added == 1 and "collect_partial" in text
    assert "Too many levels of symbolic links" in text and "loop" in text
    assert "optstep.json: holds a JSON list" in text
    assert {(s["run_id"], s["slurm_job_id"]) for s in err.value.skipped} == {("abc123-r0", "1"), ("abc123-r1", "2")}
    assert store.get(record_id(good)) is not None
    collected = {a.run_id: a.collected for a in ledger.attempts()}
    assert collected == {"abc123-r0": False, "abc123-r1": False, "abc123-r2": True}
    # the fix the message asks for, then collect again: the set-aside attempts are collected
    os.unlink(os.path.join(loop.job_dir, "experiments", "loop"))
    os.unlink(os.path.join(bad_json.job_dir, "out", "optstep.json"))
    assert collect(ledger, store) == 2 and all(a.collected for a in ledger.attempts())


def _cli(tmp_path, *args):
    env = {
        **os.environ,
        "BRIDGEBENCH_LEDGER": str(tmp_path / "ledger.sqlite"),
        "BRIDGEBENCH_RESULTS": str(tmp_path / "runs"),
        "BRIDGEBENCH_DEBUG_LOG": str(tmp_path / "debug.log"),
    }
    return subprocess.run([*BB, *args], capture_output=True, text=True, env=env, timeout=300)


def test_collect_cli_exits_partial_and_names_what_it_skipped(tmp_path):
    _three_attempts(tmp_path)
    res = _cli(tmp_path, "collect", "--json")
    assert res.returncode == 5, res.stderr[-2000:]
    assert "Traceback" not in res.stderr and "partial" in res.stderr and "abc123-r0" in res.stderr
    out = json.loads(res.stdout)
    assert out["added"] == 1 and out["partial"] is True and len(out["skipped"]) == 2
    res = _cli(tmp_path, "collect")  # plain: the same two set aside again, nothing new, still partial
    assert res.returncode == 5 and "added 0 new record(s)" in res.stdout and "abc123-r1" in res.stderr


def test_the_same_attempt_under_a_second_record_id_counts_once(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    a = _attempt(tmp_path)
    ledger.add(a)
    store = ResultStore(tmp_path / "runs")
    assert collect(ledger, store) == 1
    (rec,) = store.records()
    copy = json.loads(json.dumps(rec)) | {"record_id": "renamed/" + rec["record_id"]}
    store.add([copy])
    scan = store.scan()
    assert [r["record_id"] for r in scan.records] == [record_id(a)]
    assert any("same attempt" in n for n in scan.notes())
    assert len(store) == 1 and len(store.frame()) == 1
    # another attempt of the same run (its own attempt UUID) is another record
    b = _attempt(tmp_path, job="2", uid="u2")
    b.run_id = "abc123-r1"
    ledger.add(b)
    assert collect(ledger, store) == 1 and len(store.records()) == 2


def test_a_ledger_from_a_newer_version_is_read(tmp_path):
    """One extra column (what a newer bridgebench adds) is kept in the file and ignored when reading."""
    path = tmp_path / "ledger.sqlite"
    ledger = Ledger(path)
    ledger.add(_attempt(tmp_path))
    with sqlite3.connect(path) as db:
        db.execute("ALTER TABLE attempts ADD COLUMN future_field TEXT DEFAULT 'from the future'")
    (a,) = Ledger(path).attempts()
    assert a.run_id == "abc123-r0"
    Ledger(path).update(a.run_id, 0, state="FAILED")
    assert Ledger(path).attempts()[0].state == "FAILED"
    res = _cli(tmp_path, "collect", "--json")  # the whole command on it
    assert res.returncode == 0 and json.loads(res.stdout)["added"] == 1, res.stderr[-2000:]
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT future_field FROM attempts").fetchone() == ("from the future",)
