"""Results store: idempotence, crash safety (SIGKILL mid-add), concurrent writers, validation, throughput."""

from __future__ import annotations

import hashlib
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from bridgebench.results.store import TMP_DIR_NAME, ResultStore, StoreError

REPO = Path(__file__).resolve().parents[2]


def rec(i: int, kind: str = "train") -> dict:
    return {
        "record_id": f"job{i:06d}/0/{kind}",
        "kind": kind,
        "step_time_s": 1.0 + i / 1000,
        "gbs": 512,
        "provenance": {"job": i, "nodes": [f"n{i % 7}"]},
    }


def record_files(root: Path) -> list[Path]:
    return list(root.glob("?/?/*.json"))


def temp_files(root: Path) -> list[Path]:
    d = root / TMP_DIR_NAME
    return list(d.iterdir()) if d.exists() else []


# Writer run in a subprocess: adds rec(i) for i in [lo, hi) (shuffled if seed >= 0), per_add records per add() call,
# after the file `go` exists (unless go == "-"); prints "ready" at start and the total new-count at the end.
WRITER = textwrap.dedent("""
    import random, sys, time
    from pathlib import Path
    sys.path.insert(0, {repo!r})
    from bridgebench.results.store import ResultStore
    from tests.results.test_store import rec
    root, go = sys.argv[1], sys.argv[6]
    lo, hi, per_add, seed = map(int, sys.argv[2:6])
    ids = list(range(lo, hi))
    if seed >= 0:
        random.Random(seed).shuffle(ids)
    store = ResultStore(Path(root))
    print("ready", flush=True)
    while go != "-" and not Path(go).exists():
        time.sleep(0.001)
    new = 0
    for k in range(0, len(ids), per_add):
        new += store.add([rec(i) for i in ids[k:k + per_add]])
    print(new, flush=True)
""").format(repo=str(REPO))


def start_writer(root: Path, lo: int, hi: int, per_add: int, seed: int = -1, go: str = "-") -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(root), str(lo), str(hi), str(per_add), str(seed), go],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )


def test_add_get_idempotent(tmp_path):
    store = ResultStore(tmp_path / "runs")
    assert len(store) == 0 and store.records() == [] and store.get("nope") is None
    batch = [rec(i) for i in range(50)]
    assert store.add(batch) == 50
    assert len(store) == 50
    assert store.add(batch) == 0  # collecting the same records again adds nothing
    assert store.add(iter(batch[:10] + [rec(50)])) == 1  # any iterable
    assert len(store) == 51
    assert store.get(batch[3]["record_id"]) == batch[3]
    assert batch[3]["record_id"] in store
    assert [r["record_id"] for r in store.records()] == sorted(r["record_id"] for r in batch + [rec(50)])
    assert temp_files(store.root) == []
    # one file per record, named by the sha256 of its id, under a 2-level fan-out
    assert len(record_files(store.root)) == 51
    p = store.path_for(batch[0]["record_id"])
    assert p.name == hashlib.sha256(batch[0]["record_id"].encode()).hexdigest() + ".json"
    assert p.parent.parent.parent == store.root and p.parent.parent.name + p.parent.name == p.name[:2]
    assert json.loads(p.read_text()) == batch[0]


def test_one_at_a_time_variant(tmp_path):
    store = ResultStore(tmp_path, workers=1, chunk=1)
    batch = [rec(i) for i in range(30)]
    assert store.add(batch) == 30 and store.add(batch) == 0
    assert store.records() == batch and temp_files(tmp_path) == []


def test_conflicting_content_keeps_first(tmp_path):
    store = ResultStore(tmp_path)
    first = rec(1)
    assert store.add([first]) == 1
    changed = dict(first, step_time_s=99.0)
    assert store.add([changed]) == 0
    assert store.last_conflicts == [first["record_id"]]
    assert store.get(first["record_id"]) == first and len(store) == 1
    # duplicates within one batch: first occurrence wins, nothing duplicated
    assert store.add([rec(2), dict(rec(2), gbs=1), rec(2)]) == 1
    assert store.last_conflicts == [rec(2)["record_id"]]
    assert store.get(rec(2)["record_id"]) == rec(2) and len(store) == 2
    assert store.add([rec(2)]) == 0 and store.last_conflicts == []


@pytest.mark.parametrize(
    "bad, field",
    [
        ({"kind": "train"}, "record_id"),
        ({"record_id": "", "kind": "train"}, "record_id"),
        ({"record_id": 7, "kind": "train"}, "record_id"),
        ({"record_id": "x"}, "kind"),
        ({"record_id": "x", "kind": "train", "step_time_s": math.nan}, "step_time_s"),
        ({"record_id": "x", "kind": "train", "m": {"loss": [1.0, math.inf]}}, r"m\.loss\[1\]"),
        ({"record_id": "x", "kind": "train", "when": object()}, "when"),
        ({"record_id": "x", "kind": "train", "tags": {"a", "b"}}, "tags"),
        ({"record_id": "x", "kind": "train", "m": {1: 2}}, "m"),
        ({"record_id": "x", "kind": "train", "s": "\ud800"}, "Unicode"),
        ("not a dict", "#2"),
    ],
)
def test_bad_input_rejects_whole_batch(tmp_path, bad, field):
    store = ResultStore(tmp_path / "runs")
    store.add([rec(100)])
    with pytest.raises(StoreError, match=field):
        store.add([rec(0), rec(1), bad, rec(3)])
    assert [r["record_id"] for r in store.records()] == [rec(100)["record_id"]]  # nothing of the batch written
    assert temp_files(store.root) == []


def test_values_normalized(tmp_path):
    np = pytest.importorskip("numpy")
    store = ResultStore(tmp_path)
    store.add(
        [
            {
                "record_id": "a",
                "kind": "k",
                "n": np.int64(3),
                "x": np.float32(0.5),
                "ok": np.bool_(True),
                "t": (1, 2),
                "none": None,
            }
        ]
    )
    got = store.get("a")
    assert got == {"record_id": "a", "kind": "k", "n": 3, "x": 0.5, "ok": True, "t": [1, 2], "none": None}
    assert type(got["n"]) is int and type(got["ok"]) is bool


def test_records_kind_and_frame(tmp_path):
    store = ResultStore(tmp_path)
    assert store.frame().empty
    store.add(
        [rec(i, "train") for i in range(5)]
        + [rec(i, "eval") for i in range(3)]
        + [{"record_id": "z/extra", "kind": "eval", "only_here": 1}]
    )
    evals = store.records(kind="eval")
    assert [r["record_id"] for r in evals] == sorted([rec(i, "eval")["record_id"] for i in range(3)] + ["z/extra"])
    assert len(store.records("train")) == 5 and store.records("missing") == []
    df = store.frame()
    assert len(df) == 9
    assert set(df.columns) == {"record_id", "kind", "step_time_s", "gbs", "provenance", "only_here"}
    assert list(df["record_id"]) == sorted(df["record_id"])
    df_eval = store.frame("eval")
    assert len(df_eval) == 4 and set(df_eval["kind"]) == {"eval"}
    assert df_eval.set_index("record_id").loc["z/extra", "only_here"] == 1


def test_sigkill_mid_add(tmp_path):
    root = tmp_path / "runs"
    n = 20_000
    proc = start_writer(root, 0, n, per_add=200)
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    deadline = time.monotonic() + 60
    while not (root.exists() and record_files(root)):  # writing has begun
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
        time.sleep(0.005)
    time.sleep(0.3)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    visible = record_files(root)
    assert 0 < len(visible) < n, "the writer was not killed mid-add"
    for path in visible:  # every visible record is complete and is what was written
        data = json.loads(path.read_text())
        i = int(data["record_id"][3:9])
        assert data == rec(i) and path == ResultStore(root).path_for(data["record_id"])
    leftover = temp_files(root)  # the records in flight at the kill (ignored by readers)
    assert len(leftover) <= ResultStore(root).chunk
    print(f"\nSIGKILL after ~0.3 s: {len(visible)} records visible, {len(leftover)} temp file(s) left")

    store = ResultStore(root)
    assert len(store) == len(visible)
    new = store.add([rec(i) for i in range(n)])
    assert new == n - len(visible)
    assert len(store) == n
    got = store.records()
    assert [r["record_id"] for r in got] == [rec(i)["record_id"] for i in range(n)]  # once each, none lost
    assert got == [rec(i) for i in range(n)]
    assert temp_files(root) == []  # the dead writer's temps were cleaned up


def test_concurrent_writers(tmp_path):
    root = tmp_path / "runs"
    go = tmp_path / "go"
    # overlapping sets, shuffled differently so both race on the shared ids at the same time
    procs = [
        start_writer(root, 0, 6000, per_add=500, seed=1, go=str(go)),
        start_writer(root, 3000, 9000, per_add=500, seed=2, go=str(go)),
    ]
    for p in procs:
        assert p.stdout.readline().strip() == "ready", p.stderr.read()
    go.touch()
    reader, reads = ResultStore(root), 0
    while any(p.poll() is None for p in procs):  # a concurrent reader only ever sees complete records
        seen = reader.records()
        assert all(r == rec(int(r["record_id"][3:9])) for r in seen)
        reads += 1
        time.sleep(0.01)
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    news = [int(out.split()[-1]) for out, _ in outs]
    store = ResultStore(root)
    assert sum(news) == 9000, news  # each record created by exactly one writer
    assert len(store) == 9000
    assert temp_files(root) == []
    single = ResultStore(tmp_path / "single")
    assert single.add([rec(i) for i in range(9000)]) == 9000
    assert store.records() == single.records() == [rec(i) for i in range(9000)]
    print(f"\nconcurrent writers: new counts {news}, total {len(store)}; {reads} concurrent full reads")


def test_concurrent_threads_same_batch(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    batch = [rec(i) for i in range(2000)]
    stores = [ResultStore(tmp_path) for _ in range(4)]
    with ThreadPoolExecutor(4) as pool:
        news = list(pool.map(lambda s: s.add(batch), stores))
    assert sum(news) == 2000 and len(stores[0]) == 2000
    assert stores[0].records() == batch


def test_stale_temp_cleanup(tmp_path):
    store = ResultStore(tmp_path)
    store.add([rec(0)])
    tmp = tmp_path / TMP_DIR_NAME
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp / f"{store._host}.{dead.pid}.abc.tmp").write_text('{"record_id": "half')  # a dead writer's temp
    (tmp / f"{store._host}.{os.getpid()}.live.tmp").write_text("x")  # ours: in flight, kept
    old = tmp / "otherhost.12345.def.tmp"
    old.write_text("x")
    os.utime(old, (time.time() - 7200, time.time() - 7200))  # another host's, hours old
    fresh = tmp / "otherhost.12345.ghi.tmp"
    fresh.write_text("x")  # another host's, recent: may be in flight, kept
    assert len(store) == 1 and store.records() == [rec(0)]  # readers ignore temps
    store.add([rec(1)])
    assert sorted(p.name for p in temp_files(tmp_path)) == sorted(
        [f"{store._host}.{os.getpid()}.live.tmp", "otherhost.12345.ghi.tmp"]
    )


def test_throughput_10k(tmp_path):
    store = ResultStore(tmp_path / "runs")
    batch = [rec(i) for i in range(10_000)]
    t0 = time.perf_counter()
    assert store.add(batch) == 10_000
    t_add = time.perf_counter() - t0
    t0 = time.perf_counter()
    got = store.records()
    t_read = time.perf_counter() - t0
    t0 = time.perf_counter()
    assert store.add(batch) == 0
    t_readd = time.perf_counter() - t0
    t0 = time.perf_counter()
    df = store.frame()
    t_frame = time.perf_counter() - t0
    assert got == batch and len(df) == 10_000
    print(
        f"\n10,000 records: add {t_add:.2f} s ({10_000 / t_add:,.0f}/s), records() {t_read:.2f} s "
        f"({10_000 / t_read:,.0f}/s), idempotent re-add {t_readd:.2f} s, frame() {t_frame:.2f} s"
    )
    assert t_add < 20 and t_read < 10 and t_readd < 20  # generous bounds for slow disks; typical is ~1-2 s


def test_temp_removed_before_link_is_rewritten(tmp_path, monkeypatch):
    """A writer paused past STALE_TEMP_AGE_S may find its temp deleted by another writer: it writes it again."""
    import bridgebench.results.store as store_mod

    real_link, calls = os.link, []

    def link(src, dst):
        calls.append(src)
        if len(calls) == 1:
            os.unlink(src)  # another writer judged it stale
        return real_link(src, dst)

    monkeypatch.setattr(store_mod.os, "link", link)
    store = ResultStore(tmp_path, workers=1)
    assert store.add([rec(1)]) == 1
    assert calls[-1] != calls[0]  # linked a fresh temp
    assert store.records() == [rec(1)] and temp_files(tmp_path) == []
