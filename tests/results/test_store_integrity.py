"""Store integrity (issue 17, breaks 5 and 7): a record is its id, not its file name; records are checked against
the record schema with the file and field named and one bad file never blocks the others; a corrupt or truncated
ledger and a full disk give a clear error and leave nothing half-written."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bridgebench.results.store import ResultStore, StoreError
from tests.results.test_optstep_stats import record as optstep_record

BB = [sys.executable, "-m", "bridgebench.cli"]
REPO = Path(__file__).resolve().parents[2]


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "BRIDGEBENCH_RESULTS": str(tmp_path / "runs"),
        "BRIDGEBENCH_LEDGER": str(tmp_path / "ledger.sqlite"),
        "BRIDGEBENCH_JOB_DIR": str(tmp_path / "jobs"),
        "BRIDGEBENCH_PLANS": str(tmp_path / "plans"),
    }
    return subprocess.run([*BB, *args], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)


def other_name(store: ResultStore, rid: str) -> Path:
    """A valid record-file name in the store that is not ``rid``'s."""
    own = store.path_for(rid)
    name = ("f" if own.name[0] != "f" else "e") + own.name[1:]
    path = store.root / name[0] / name[1] / name
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def test_copies_hard_links_and_symlinks_count_once_and_are_named(tmp_path):
    """The issue: one record copied and symlinked under other names gave `report` n: 3."""
    store = ResultStore(tmp_path / "runs")
    rec = optstep_record(0, 2.0, 1.0, 0.01)
    store.add([rec])
    own = store.path_for(rec["record_id"])
    copy = other_name(store, rec["record_id"])
    shutil.copy(own, copy)
    link = own.with_name("aa" + own.name[2:])
    os.link(own, link)
    sym = own.parent / "symlinked.json"
    sym.symlink_to(own)
    scan = store.scan()
    assert [r["record_id"] for r in scan.records] == [rec["record_id"]]
    assert {(d.path, d.how) for d in scan.duplicates} == {
        (str(copy), "copy"),
        (str(link), "hard link"),
        (str(sym), "symlink"),
    }
    assert all(d.of == str(own) for d in scan.duplicates) and not scan.skipped
    res = cli(tmp_path, "report", "--json")
    assert res.returncode == 0, res.stderr[-2000:]
    total = next(r for r in json.loads(res.stdout) if r["family"] == "total")
    assert total["n"] + total["n_contended"] == 1
    for path in (copy, link, sym):
        assert f"counted once: {path}" in res.stderr


def test_a_record_under_another_name_alone_is_counted_and_named(tmp_path):
    store = ResultStore(tmp_path / "runs")
    rec = optstep_record(1, 2.0, 1.0, 0.01)
    store.add([rec])
    moved = other_name(store, rec["record_id"])
    store.path_for(rec["record_id"]).rename(moved)
    scan = store.scan()
    assert len(scan.records) == 1 and scan.duplicates[0].how == "misplaced" and scan.duplicates[0].path == str(moved)


def test_a_symlink_leading_out_of_the_store_is_refused(tmp_path):
    store = ResultStore(tmp_path / "runs")
    store.add([optstep_record(0, 2.0, 1.0, 0.01)])
    outside = tmp_path / "elsewhere.json"
    outside.write_text(json.dumps(optstep_record(9, 5.0, 1.0, 0.01)))
    sym = other_name(store, "x")
    sym.symlink_to(outside)
    (store.root / "c").mkdir(exist_ok=True)
    (store.root / "c" / "d").symlink_to(tmp_path, target_is_directory=True)  # a symlinked fan-out folder
    scan = store.scan()
    assert len(scan.records) == 1
    reasons = {s.path: s.reason for s in scan.skipped}
    assert "leading out of the store" in reasons[str(sym)] and "refused" in reasons[str(sym)]
    assert "not followed" in reasons[str(store.root / "c" / "d")]


def test_non_regular_and_oversized_files_are_skipped_without_blocking(tmp_path):
    store = ResultStore(tmp_path / "runs")
    store.add([optstep_record(0, 2.0, 1.0, 0.01)])
    fifo = other_name(store, "fifo")
    os.mkfifo(fifo)  # reading it would block forever
    scan = store.scan()
    assert len(scan.records) == 1 and "not a regular file" in {s.path: s.reason for s in scan.skipped}[str(fifo)]


@pytest.mark.parametrize(
    "content,field",
    [
        ('["a list", "not a record"]', "(record)"),
        ('{"kind": "optstep"}', "record_id"),
        ('{"record_id": "r", "kind": "optstep", "config": "a string"}', "config"),
        ('{"record_id": "r", "kind": "optstep", "step_time_s": -15.0}', "step_time_s"),
        ('{"record_id": "r", "kind": "optstep", "num_gpus": "8"}', "num_gpus"),
        (
            '{"record_id": "r", "kind": "optstep", "optstep": {"total": {"muon_step_s": "fast"}}}',
            "optstep.total.muon_step_s",
        ),
        (
            '{"record_id": "r", "kind": "pretrain", "series": {"step_time_s": [1.0, null, "x"]}}',
            "series.step_time_s[2]",
        ),
        (
            '{"record_id": "r", "kind": "optstep", "provenance": {"logs": [{"sha256": "ab"}]}}',
            "provenance.logs[0].name",
        ),
        ('{"record_id": "r", "kind": "optst', "corrupt or truncated JSON"),
        ("", "empty"),
    ],
)
def test_a_bad_record_is_skipped_naming_file_and_field_and_blocks_nothing(tmp_path, content, field):
    """Valid JSON of the wrong shape (a traceback before), truncated JSON, an empty file: listed as skipped with
    the file and the field; `report` and `compare` of the good records still run."""
    import numpy as np

    from tests.results.test_compare import optstep_record as compare_record

    store = ResultStore(tmp_path / "runs")
    rng = np.random.default_rng(0)
    store.add([optstep_record(i, 2.0 + 0.01 * i, 1.0, 0.01) for i in range(3)])
    store.add([compare_record(f"{i}/u{i}/optstep", opt, 2.0, 1.0, rng) for i, opt in enumerate(["adamw", "muon"] * 3)])
    bad = other_name(store, "bad")
    bad.write_text(content)
    scan = store.scan()
    assert len(scan.records) == 9
    (skip,) = scan.skipped
    assert skip.path == str(bad) and field in skip.reason
    res = cli(tmp_path, "report", "--json")
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert f"skipped {bad}" in res.stderr and field in res.stderr
    res = cli(tmp_path, "compare", "--source", "runs", "--a", "optimizer=adamw", "--b", "optimizer=muon", "--json")
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert f"skipped {bad}" in res.stderr and field in res.stderr


def test_records_that_break_the_schema_are_not_written():
    with pytest.raises(StoreError, match="step_time_s"):
        ResultStore(Path("/nonexistent/never/written")).add([{"record_id": "x", "kind": "k", "step_time_s": 0.0}])


def test_additive_fields_are_accepted(tmp_path):
    """The schema is open: a field added later (a scheduler outcome) needs no schema change."""
    store = ResultStore(tmp_path)
    rec = optstep_record(0, 2.0, 1.0, 0.01) | {"scheduler": {"state": "TIMEOUT", "exit_code": "0:15"}, "new": [1]}
    assert store.add([rec]) == 1 and store.records() == [rec]


# -------------------------------------------------------------------------------------------------------------------
# The ledger
# -------------------------------------------------------------------------------------------------------------------


def make_ledger(path: Path, n: int = 200) -> None:
    from bridgebench.launch.ledger import Attempt, Ledger

    ledger = Ledger(path)
    for i in range(n):
        ledger.add(Attempt(run_id=f"r{i}", attempt=0, name="n", job_type="optstep", state="COMPLETED",
                           submitted_at=1.0 + i, updated_at=1.0 + i))  # fmt: skip


@pytest.mark.parametrize("damage", ["truncated", "garbage", "zeroed header"])
def test_a_corrupt_ledger_is_an_error_naming_the_file_and_the_recovery(tmp_path, damage):
    path = tmp_path / "ledger.sqlite"
    make_ledger(path)
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(b"this is not a database\n" * 10)
    else:
        path.write_bytes(b"\0" * 100 + data[100:])
    for command in (["status"], ["collect"], ["submit", "experiment=optstep_local"]):
        res = cli(tmp_path, *command)
        assert res.returncode == 2 and "Traceback" not in res.stderr, (command, res.stderr[-2000:])
        assert str(path) in res.stderr and "corrupt or truncated" in res.stderr and "mv " in res.stderr
        assert "cannot rollback" not in res.stderr


def test_the_recovery_the_message_gives_works(tmp_path):
    """The salvage command the message gives, run as given: a ledger with a damaged page gives back its readable
    rows, and bridgebench reads the result."""
    if not shutil.which("sqlite3"):
        pytest.skip("the sqlite3 command-line shell is not installed")
    from bridgebench.launch.ledger import Ledger, LedgerError

    path = tmp_path / "ledger.sqlite"
    make_ledger(path, n=2000)
    data = bytearray(path.read_bytes())
    data[20 * 4096 + 100 : 20 * 4096 + 2000] = b"\xff" * 1900  # damage a page in the middle of the table
    path.write_bytes(bytes(data))
    with pytest.raises(LedgerError) as err:
        Ledger(path).attempts()
    message = str(err.value)
    move = message[message.index("(mv ") + 1 : message.index(")", message.index("(mv "))]
    salvage = message[message.index("salvage its readable rows (") + 27 : message.index("; rows the damage")]
    subprocess.run(move, shell=True, check=True)  # noqa: S602 -- the user's commands, as the message words them
    # exit status 1 when damaged cells break a column constraint: sqlite3 reports those rows and goes on
    done = subprocess.run(salvage, shell=True, capture_output=True, text=True)  # noqa: S602
    assert done.returncode in (0, 1) and all("constraint failed" in e for e in done.stderr.splitlines()), done.stderr
    rows = Ledger(path).attempts()
    assert 1900 < len(rows) < 2000  # all but the damaged page's rows


# -------------------------------------------------------------------------------------------------------------------
# A full disk
# -------------------------------------------------------------------------------------------------------------------

FULL_DISK = r"""
import json, os, sys
from pathlib import Path
root = Path(sys.argv[1])
out = {}
from bridgebench.results.store import ResultStore, StoreError
store = ResultStore(root / "runs")
recs = [{"record_id": f"r{i}", "kind": "k", "pad": "x" * 3000} for i in range(400)]
try:
    store.add(recs)
    out["add"] = "ok"
except StoreError as err:
    out["add"] = str(err)
try:
    store.put_blob(b"z" * 500_000)
    out["blob"] = "ok"
except StoreError as err:
    out["blob"] = str(err)
out["temps"] = os.listdir(root / "runs" / ".tmp")
scan = store.scan()
out["records"] = len(scan.records)
out["skipped"] = [s.reason for s in scan.skipped]
from bridgebench.launch.ledger import Attempt, Ledger, LedgerError
try:
    ledger = Ledger(root / "ledger.sqlite")
    for i in range(5000):
        ledger.add(Attempt(run_id=f"r{i}", attempt=0, name="n" * 200, job_type="optstep", state="PENDING",
                           submitted_at=1.0, updated_at=1.0))
    out["ledger"] = "ok"
except LedgerError as err:
    out["ledger"] = str(err)
print(json.dumps(out))
"""


def full_disk_run(tmp_path: Path, how: str) -> dict:
    script = tmp_path / "full.py"
    script.write_text(FULL_DISK)
    disk = tmp_path / "disk"
    disk.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    if how == "tmpfs":
        cmd = [
            "unshare", "--mount", "sh", "-c",
            f'mount -t tmpfs -o size=400k tmpfs "{disk}" && exec "{sys.executable}" "{script}" "{disk}"',
        ]  # fmt: skip
    else:  # the process may write no file beyond 300 kB (RLIMIT_FSIZE: EFBIG, SIGXFSZ ignored)
        pre = "import resource, signal; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
        pre += "resource.setrlimit(resource.RLIMIT_FSIZE, (300_000, 300_000)); "
        cmd = [sys.executable, "-c", pre + f"exec(open({str(script)!r}).read())", str(disk)]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    if how == "tmpfs" and res.returncode and "mount" in res.stderr:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()[:200]}")
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-3000:]
    return json.loads(res.stdout)


@pytest.mark.parametrize("how", ["tmpfs", "rlimit"])
def test_a_full_disk_is_a_clear_error_and_nothing_is_half_written(tmp_path, how):
    out = full_disk_run(tmp_path, how)
    if how == "tmpfs":
        assert "No space left on device" in out["add"] and "BRIDGEBENCH_RESULTS" in out["add"]
        assert "disk is full" in out["ledger"] and "ledger.sqlite" in out["ledger"]
        assert out["skipped"] == [] and 0 < out["records"] < 400  # the records that were linked are complete
    else:  # a per-file limit: the 3 kB records fit, the 500 kB log copy does not
        assert out["add"] == "ok" and out["records"] == 400
        assert out["ledger"] == "ok" or "ledger.sqlite" in out["ledger"]
    assert ("No space left" in out["blob"] or "File too large" in out["blob"]) and "BRIDGEBENCH_RESULTS" in out["blob"]
    assert out["temps"] == []  # no temp file of the failed writes is left


def test_a_plan_on_a_full_disk_is_a_clear_error_leaving_nothing(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "BRIDGEBENCH_JOB_DIR": str(tmp_path / "jobs")}
    cmd = [
        "unshare", "--mount", "sh", "-c",
        f'mount -t tmpfs -o size=16k tmpfs "{disk}" || exit 99; "{sys.executable}" -m bridgebench.cli plan '
        f'experiment=optstep_local --out "{disk}/plan"; rc=$?; echo "LEFT:$(ls -A "{disk}")"; exit $rc',
    ]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    if res.returncode == 99:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()[:200]}")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert "No space left on device" in res.stderr and "nothing was written" in res.stderr
    assert res.stdout.strip().endswith("LEFT:")  # nothing half-written on the full disk (no plan, no staging folder)
