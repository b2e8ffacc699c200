"""collect reads what a job wrote as untrusted input (issue 17, break 8): logs are streamed (marker search and the
copy into the store hold one chunk, not the log), and entries of a job folder that are not regular files -- FIFOs,
devices, symlinks leading out of it (a job-written symlink to /dev/zero never finished) -- are refused by path,
leaving that attempt uncollected and every other one collected. The memory figure (a 500 MB log) is measured by
``benchmarks/bench_collect_memory.py``."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bridgebench.launch import jobfiles
from bridgebench.launch.ledger import Ledger
from bridgebench.results.store import ResultStore
from tests.launch.test_collect import _attempt

REPO = Path(__file__).resolve().parents[2]


def collect_in_subprocess(tmp_path: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """``collect`` over the test's ledger and store in a fresh process (a hang fails the test instead of the run)."""
    code = (
        "import sys\n"
        "from bridgebench.launch.collect import collect, CollectRefused\n"
        "from bridgebench.launch.ledger import Ledger\n"
        "from bridgebench.results.store import ResultStore\n"
        "try:\n"
        f"    print('added', collect(Ledger({str(tmp_path / 'ledger.sqlite')!r}), ResultStore({str(tmp_path / 'runs')!r})))\n"  # noqa: E501
        "except CollectRefused as err:\n"
        "    print('refused', err)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout)


def two_attempts(tmp_path: Path):
    ledger = Ledger(tmp_path / "ledger.sqlite")
    good, bad = _attempt(tmp_path, job="1", uid="u1"), _attempt(tmp_path, job="2", uid="u2")
    bad.run_id = "abc123-r1"
    ledger.add(good)
    ledger.add(bad)
    return ledger, good, bad


@pytest.mark.parametrize(
    "make,says",
    [
        (lambda d: os.mkfifo(d / "experiments" / "log-x_2_0.out"), "a FIFO"),
        (lambda d: (d / "experiments" / "log-x_2_0.out").symlink_to("/dev/zero"), "leading out of the job folder"),
        (lambda d: (d / "out").mkdir() or (d / "out" / "optstep.json").symlink_to("/etc/passwd"), "leading out"),
        (lambda d: os.mkfifo(d / "out.fifo"), "a FIFO"),
    ],
)
def test_non_regular_files_in_a_job_folder_are_refused_by_path(tmp_path, make, says):
    ledger, good, bad = two_attempts(tmp_path)
    make(Path(bad.job_dir))
    res = collect_in_subprocess(tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.startswith("refused") and says in res.stdout and bad.job_dir in res.stdout, res.stdout
    assert "1 new record(s) added, 1 attempt(s) set aside" in res.stdout
    state = {a.uid: a.collected for a in Ledger(tmp_path / "ledger.sqlite").attempts()}
    assert state == {"u1": True, "u2": False}  # the good attempt collected, the refused one left for later


def test_a_symlink_inside_the_job_folder_is_fine(tmp_path):
    ledger, good, bad = two_attempts(tmp_path)
    d = Path(bad.job_dir)
    (d / "latest.out").symlink_to(d / "experiments" / "sbatch_x_2.out")
    assert jobfiles.refused(d) == []
    res = collect_in_subprocess(tmp_path)
    assert res.stdout.strip() == "added 2", res.stdout + res.stderr[-2000:]


def test_logs_are_copied_into_the_store_streamed(tmp_path):
    store = ResultStore(tmp_path / "runs")
    log = tmp_path / "big.out"
    with open(log, "wb") as f:
        for _ in range(40):
            f.write(os.urandom(1 << 20))
    (copy,) = jobfiles.log_copies(store, [log])
    data = log.read_bytes()
    assert copy["sha256"] == hashlib.sha256(data).hexdigest() and copy["bytes"] == len(data)
    assert store.get_blob(copy["sha256"]) == data
    assert os.listdir(tmp_path / "runs" / ".tmp") == []
    fifo = tmp_path / "f.out"
    os.mkfifo(fifo)
    with pytest.raises(Exception, match="not a regular file"):
        store.put_blob_file(fifo)


def test_the_marker_is_found_past_a_huge_line_without_holding_it(tmp_path):
    """A 40 MB line without a newline (longer than any marker line) before and inside the marker search: skipped;
    the last marker wins; rank prefixes are allowed; a marker split over two chunks is found."""
    log = tmp_path / "x.out"
    payload = {"model": "m", "device": "cpu"}
    with open(log, "wb") as f:
        f.write(b'0: BRIDGEBENCH_OPTSTEP {"model": "old"}\n')
        f.write(b"BRIDGEBENCH_OPTSTEP " + b"x" * (40 << 20) + b"\n")  # a marker line too long to be a payload's
        f.write(b"y" * (jobfiles.CHUNK_BYTES - 7))  # the next marker starts across a chunk boundary
        f.write(b"\n3: BRIDGEBENCH_OPTSTEP " + json.dumps(payload).encode() + b"\n")
        f.write(b"noise\n" * 1000)
    assert jobfiles.last_marker([log], "BRIDGEBENCH_OPTSTEP ") == payload


def test_an_oversized_result_file_is_not_read(tmp_path, monkeypatch):
    monkeypatch.setattr(jobfiles, "MAX_JSON_BYTES", 100)
    f = tmp_path / "optstep.json"
    f.write_text(json.dumps({"x": "y" * 200}))
    with pytest.raises(jobfiles.JobFileError, match="more than a result file"):
        jobfiles.read_json(f)
