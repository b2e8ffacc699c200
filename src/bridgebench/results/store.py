"""Durable, idempotent results store: one JSON file per record under ``results/runs/``.

A record is a JSON-able dict with two mandatory non-empty strings: ``record_id`` (derived by the caller, stable across
re-collection, e.g. ``"<slurm job id>/<attempt>/<kind>"``) and ``kind``. Collecting the same runs again is harmless:
a record whose ``record_id`` is stored already is never written twice.

Layout::

    <root>/a/b/ab...(64 hex).json       one record; name = sha256(record_id) hex; 2-level fan-out, 16 x 16 leaf dirs
    <root>/.tmp/<host>.<pid>.<random>-<n>.tmp   records being written (never read; stale ones removed by writers)
    <root>/blobs/ab/ab...(64 hex)       a log or script a record refers to by sha256 (:meth:`ResultStore.put_blob`)

Writing: the canonical JSON of a record is written to a fresh temp file under ``<root>/.tmp`` (same filesystem as the
final name, so a hard link works; one temp directory rather than one per leaf so that a writer finds a dead writer's
leftovers with a single listdir), ``os.fsync``-ed and closed, then hard-linked to its final name with ``os.link``,
which atomically creates the name with the complete, already-synced content or fails with ``FileExistsError`` if
the name exists; the temp name is then unlinked. :meth:`ResultStore.add` does this in chunks (default 64 records):
write the chunk's temps, fsync them concurrently on a thread pool (the filesystem commits concurrent fsyncs together:
~10x faster than one by one), link them. After the last chunk, every leaf directory the batch touched, their parents
and the root are ``fsync``-ed. There is no lock: ``os.link`` is the only arbiter, so any number of processes (on one
host, or several hosts sharing a POSIX filesystem with hard links: ext4, xfs, NFS, Lustre, GPFS) may add
overlapping records at once; exactly one creates each record, the others find it exists.

Fan-out: 256 leaf directories hold ~4,000 records each at a million records, well within what ext4/xfs/NFS index
directories handle. Finer fan-outs were measured slower here (ext4, 10,000 fresh records): every extra leaf directory
costs a mkdir, a directory fsync per batch and a slow rmdir (rmtree of 20,000 records: 3.8 s with 16 x 16 leaves,
21 s with 256 x 16, 79 s with 256 x 256).

Guarantees (precisely):

* **Atomic visibility.** A record file is either absent or complete: readers only look at ``a/b/<64 hex>.json``
  names, and such a name only ever appears through ``os.link`` of a fully written, fsynced temp file. A reader never
  sees a partial or empty record, whatever happens to the writer.
* **Process crash (SIGKILL, OOM kill, exception) during ``add``.** Every record whose link completed stays, complete
  (the kernel has it; no fsync needed for that). Lost are only the records of the chunk in flight that were not yet
  linked -- at most ``chunk`` records (default 64; ``chunk=1`` makes it exactly the one being written). They exist
  only as temp files under ``.tmp``, which readers ignore and the next ``add`` on the same host deletes (other
  hosts' temps once older than :data:`STALE_TEMP_AGE_S`). Adding the batch again completes it (idempotence).
* **OS crash / power loss.** Once ``add`` returns, every record of its batch (new or already stored, including one a
  concurrent writer just created) is durable: its data was fsynced before its name existed, and the directory
  entries on its path have been fsynced since. Records of an ``add`` that had not returned may be missing after
  such a crash, but none is present with partial or empty content (data is synced before the link). This relies on
  the filesystem honouring ``fsync`` on files and directories (ext4/xfs do; a directory fsync the filesystem
  rejects with EINVAL/ENOTSUP is skipped).
* **Idempotence.** Adding a record whose ``record_id`` is stored adds nothing and is not counted as new. If the
  stored content differs from the new one, the FIRST stored version is kept (records are immutable; derive a new
  ``record_id`` for a re-measurement), the id is listed in :attr:`ResultStore.last_conflicts` and a warning is
  logged. Duplicates within one batch are handled the same way (first occurrence wins).
* **Concurrency.** Concurrent ``add`` calls (threads or processes) with overlapping records end with exactly the union,
  each record once, and the new-counts they return sum to the number of distinct records created. Readers running
  concurrently see a subset growing over time, never a partial record. A record is visible to readers as soon as it
  is linked, possibly before the ``add`` that wrote it has returned (i.e. before it is power-loss durable).

Validation: the whole batch is checked before anything is written; the first bad record raises :class:`StoreError`
naming the record and the field, and nothing of that batch is written. A record must fit the record schema
(:mod:`bridgebench.results.record_schema`, pydantic: open to fields added later). Values must be ``None``, bool, str,
finite int/float (numpy scalars are converted), lists/tuples (stored as lists) or dicts with str keys. **NaN and
+-inf are rejected** (JSON has no NaN; a silent ``null`` would blur "not measured" and "broken measurement" -- the
caller must say ``None`` explicitly).

Reading (:meth:`ResultStore.scan`; :meth:`ResultStore.records` is its records): **a record is its id, not its file
name**. Every ``*.json`` under the fan-out folders is read; copies, hard links and symlinks of a record (under any name)
are counted once -- the file named after the id's hash is the record, the others are listed by name as duplicates; a
file holding an id stored elsewhere with other content is skipped. A symlink leading out of the store, a file that
is not a regular file (FIFO, device), a file larger than :data:`MAX_RECORD_BYTES`, corrupt or truncated JSON and a
record that breaks the schema are skipped, each listed with its file and the reason (the field, for the schema) --
one bad file never blocks ``report`` or ``compare`` of the others. :meth:`StoreScan.notes` words the list.

Full disk: a write that fails for lack of space (``ENOSPC``, ``EDQUOT``, ``EFBIG``) raises :class:`StoreError` saying
so; the temp files of the failed chunk are removed, so nothing half-written is left (records already linked stay
complete).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import socket
import stat
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from bridgebench.paths import load_paths
from bridgebench.results import store_support as ss
from bridgebench.results.store_support import TMP_DIR_NAME, StoreError

if (
    TYPE_CHECKING
):  # pandas is only needed by frame(); keep `import bridgebench.results.store` light for writer processes
    import pandas as pd

log = logging.getLogger(__name__)


class ResultStore:
    """The records under ``root`` (default ``results/runs``); see the module docstring for the guarantees.

    Args:
        root: store directory; created on the first :meth:`add` (reading a missing store gives no records).
        workers: threads that fsync a chunk's temp files concurrently (the filesystem then commits them together).
        chunk: records written per step of :meth:`add`: write their temps, fsync them all, link them all. A process
            crash mid-add loses at most this many records (the unlinked ones of the current step). ``chunk=1,
            workers=1`` is the strictly one-record-at-a-time variant (~7x slower measured on ext4).
    """

    def __init__(self, root: Path | None = None, workers: int = 16, chunk: int = 64) -> None:
        self.root = Path(root) if root is not None else load_paths().results  # configs/paths: results
        self._root_s = str(self.root)
        self.workers = max(1, int(workers))
        self.chunk = max(1, int(chunk))
        #: record_ids of the last add() that were stored already with DIFFERENT content (the stored one was kept).
        self.last_conflicts: list[str] = []
        #: what the last :meth:`scan` / :meth:`records` skipped and counted once (:meth:`ss.StoreScan.notes`)
        self.last_scan = ss.StoreScan()
        self._host = socket.gethostname().replace("/", "_").replace(".", "_") or "host"
        self._counter = itertools.count()  # next() is atomic under the GIL: unique temp names across threads

    # ---------------------------------------------------------------- paths
    def path_for(self, record_id: str) -> Path:
        """Final file of ``record_id`` (which may not exist): ``<root>/a/b/ab<62 more hex>.json``."""
        return Path(self._final(record_id))

    def _final(self, record_id: str) -> str:
        h = ss.record_hash(record_id)
        return f"{self._root_s}{os.sep}{h[0]}{os.sep}{h[1]}{os.sep}{h}.json"

    def _record_files(self) -> list[Path]:
        """Every ``*.json`` file or symlink in the fan-out folders (temp files, blobs and other names are ignored);
        symlinked or unreadable folders are reported by :meth:`scan`."""
        return [Path(p) for p, _ in self._entries()[0]]

    def _entries(self) -> tuple[list[tuple[str, bool]], list[ss.Skipped]]:
        out: list[tuple[str, bool]] = []
        skipped: list[ss.Skipped] = []
        try:
            level1 = [e for e in os.scandir(self.root) if len(e.name) == 1 and e.name in ss.HEX_DIGITS]
        except FileNotFoundError:
            return out, skipped
        for d1 in sorted(level1, key=lambda e: e.name):
            for d2 in sorted(self._subdirs(d1, skipped), key=lambda e: e.name):
                if len(d2.name) != 1 or d2.name not in ss.HEX_DIGITS:
                    continue
                for f in sorted(self._subdirs(d2, skipped, files=True), key=lambda e: e.name):
                    if f.name.endswith(".json"):
                        out.append((f.path, f.is_symlink()))
        return out, skipped

    def _subdirs(self, entry: os.DirEntry, skipped: list[ss.Skipped], files: bool = False) -> list[os.DirEntry]:
        """The entries of a fan-out folder; a symlinked folder is not followed (listed as skipped)."""
        if entry.is_symlink():
            skipped.append(
                ss.Skipped(
                    path=entry.path, reason=f"a symlinked folder (to {os.path.realpath(entry.path)}): not followed"
                )
            )
            return []
        if not entry.is_dir(follow_symlinks=False):
            return []
        try:
            return [e for e in os.scandir(entry.path) if files or len(e.name) == 1]
        except OSError as err:
            skipped.append(ss.Skipped(path=entry.path, reason=f"cannot be listed ({err.strerror})"))
            return []

    # ---------------------------------------------------------------- reading
    @staticmethod
    def _read(path: str | Path) -> dict | None:
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return None
        try:
            return json.loads(raw)
        except ValueError as exc:  # cannot come from add(); someone edited or truncated the file by hand
            raise StoreError(
                f"{path}: corrupt record file ({exc}); move it out of the store (its blobs stay) and collect again "
                "if the attempt is still in the ledger"
            ) from exc

    def _load(self, path: str, is_link: bool, root_real: str) -> tuple[dict | None, tuple[int, int] | None, str | None]:
        """(record, (device, inode) of the file read, why it is skipped) of one entry; never raises for bad files."""
        target = path
        if is_link:
            target = os.path.realpath(path)
            if not (target == root_real or target.startswith(root_real + os.sep)):
                return None, None, f"a symlink leading out of the store (to {target}): refused"
        try:
            fd = os.open(target, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
        except FileNotFoundError:
            return None, None, "a dangling symlink" if is_link else "removed while reading"
        except OSError as err:
            return None, None, f"cannot be opened ({err.strerror})"
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return None, None, "not a regular file (a FIFO, device or socket): refused"
            if st.st_size > ss.MAX_RECORD_BYTES:
                return None, None, f"{st.st_size} bytes, more than a record ({ss.MAX_RECORD_BYTES} at most): not read"
            chunks = []
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
        finally:
            os.close(fd)
        raw = b"".join(chunks)
        try:
            rec = json.loads(raw)
        except ValueError as exc:
            what = "empty" if not raw.strip() else f"corrupt or truncated JSON ({exc})"
            return None, None, f"{what}; move it out of the store, then collect again if its attempt is in the ledger"
        from bridgebench.results.record_schema import problems

        bad = problems(rec)
        if bad:
            fields = "; ".join(f"field {where!r}: {msg}" for where, msg in bad[:5])
            return None, None, f"breaks the record schema ({fields}{' ...' if len(bad) > 5 else ''})"
        return rec, (st.st_dev, st.st_ino), None

    def get(self, record_id: str) -> dict | None:
        """The stored record with this ``record_id``, or None."""
        if not isinstance(record_id, str):
            raise StoreError(f"record_id must be a string, got {record_id!r}")
        path = self._final(record_id)
        rec = self._read(path)
        if rec is not None and (not isinstance(rec, dict) or rec.get("record_id") != record_id):
            got = rec.get("record_id") if isinstance(rec, dict) else type(rec).__name__
            raise StoreError(f"{path}: holds record_id {got!r}, expected {record_id!r}")
        return rec

    def __contains__(self, record_id: object) -> bool:
        return isinstance(record_id, str) and os.path.exists(self._final(record_id))

    def __len__(self) -> int:
        return len(self.scan().records)

    def scan(self, kind: str | None = None) -> ss.StoreScan:
        """The store's records (of ``kind`` if given) -- each ``record_id`` once, sorted --, the files skipped and the
        duplicates (module docstring). Never raises for a bad file. Not a snapshot while writers run (records linked
        during the call may or may not be included; each one returned is complete)."""
        entries, skipped = self._entries()
        root_real = os.path.realpath(self.root)
        found: dict[str, list[tuple[str, bool, dict, tuple[int, int]]]] = {}
        for path, is_link in entries:
            rec, ident, why = self._load(path, is_link, root_real)
            if why:
                skipped.append(ss.Skipped(path=path, reason=why))
            else:
                found.setdefault(rec["record_id"], []).append((path, is_link, rec, ident))
        out = ss.StoreScan(skipped=skipped)
        for rid, copies in found.items():
            own = self._final(rid)
            copies.sort(key=lambda c: (c[0] != own, c[1], c[0]))  # its own name first, real files before links
            path, _, rec, ident = copies[0]
            if path != own:
                out.duplicates.append(ss.Duplicate(path=path, of=own, how="misplaced"))
            for other, link, other_rec, other_ident in copies[1:]:
                if other_rec != rec:
                    why = f"holds record_id {rid!r} of {path} with other content: not counted"
                    out.skipped.append(ss.Skipped(path=other, reason=why))
                else:
                    how = "symlink" if link else "hard link" if other_ident == ident else "copy"
                    out.duplicates.append(ss.Duplicate(path=other, of=path, how=how))
            if kind is None or rec.get("kind") == kind:
                out.records.append(rec)
        out.records = self._one_per_attempt(out)
        out.records.sort(key=lambda r: r["record_id"])
        self.last_scan = out
        return out

    def _one_per_attempt(self, out: ss.StoreScan) -> list[dict]:
        """Each attempt once: records with different ids but the same attempt identity (:func:`ss.attempt_identity`)
        count once -- the one whose id is the identity's own (``<cluster>/<job>/<attempt uuid>/<kind>``, as collect
        names it), else the first by id; the others are listed as ``same attempt`` duplicates."""
        by_attempt: dict[tuple, list[dict]] = {}
        keep: list[dict] = []
        for rec in out.records:
            ident = ss.attempt_identity(rec)
            if ident is None:
                keep.append(rec)
            else:
                by_attempt.setdefault(ident, []).append(rec)
        for ident, recs in by_attempt.items():
            own = "/".join(str(x) for x in ident)
            recs.sort(key=lambda r: (r["record_id"] != own, r["record_id"]))
            keep.append(recs[0])
            for other in recs[1:]:
                out.duplicates.append(
                    ss.Duplicate(
                        path=self._final(other["record_id"]), of=self._final(recs[0]["record_id"]), how="same attempt"
                    )
                )
        return keep

    def records(self, kind: str | None = None) -> list[dict]:
        """All stored records (of ``kind`` if given), each ``record_id`` once, sorted by it (:meth:`scan`; what it
        skipped is in :attr:`last_scan`)."""
        return self.scan(kind).records

    def frame(self, kind: str | None = None) -> pd.DataFrame:
        """:meth:`records` as a DataFrame: one row per record, one column per top-level key (union over records;
        a key a record lacks is NaN/None there; nested dicts and lists stay Python objects)."""
        import pandas as pd

        return pd.DataFrame.from_records(self.records(kind))

    def stored_differs(self, record: dict) -> dict | None:
        """The stored record with ``record``'s id when its content differs from ``record`` (a conflict a caller must
        not drop silently), else None (not stored, or stored identically). Raises :class:`StoreError` for a bad
        record."""
        rid, norm, _ = ss.validate_record(record, 0)
        stored = self.get(rid)
        return stored if stored is not None and stored != norm else None

    # ---------------------------------------------------------------- blobs
    def blob_path(self, digest: str) -> Path:
        """File of a content-addressed blob: ``<root>/blobs/<2 hex>/<64 hex>`` (may not exist)."""
        if len(digest) != 64 or not set(digest) <= ss.HEX_DIGITS:
            raise StoreError(f"not a sha256 hex digest: {digest!r}")
        return self.root / ss.BLOB_DIR_NAME / digest[:2] / digest

    def put_blob(self, data: bytes) -> str:
        """Store ``data`` (a log, a script) under its sha256 and return the hex digest. Same guarantees as records:
        written to a synced temp file and hard-linked into place (atomic, idempotent, safe with concurrent
        writers); readers of :meth:`records` never see blobs.

        Raises:
            StoreError: the disk is full (nothing half-written is left)."""
        digest = hashlib.sha256(data).hexdigest()
        if self.blob_path(digest).exists():
            return digest
        try:
            self._ensure_root()
            tmp = self._write_synced(data, self._prefix())
            self._link_blob(tmp, digest)
        except OSError as err:
            full = ss.full_disk_error(err, self.root, "a log copy")
            if full is None:
                raise
            raise full from err
        return digest

    def put_blob_file(self, path: str | os.PathLike, chunk: int = 1 << 20) -> tuple[str, int]:
        """Store the file at ``path`` as a blob, streamed (memory: one ``chunk``); ``(sha256 hex, bytes)``. Only a
        regular file is read (opened without blocking, checked with ``fstat``: a FIFO or device is refused).

        Raises:
            StoreError: ``path`` is not a regular file, or the disk is full (nothing half-written is left).
        """
        tmp = f"{self._prefix()}{next(self._counter)}.tmp"
        h = hashlib.sha256()
        size = 0
        src = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            self._ensure_root()
            if not stat.S_ISREG(os.fstat(src).st_mode):
                raise StoreError(f"{path}: not a regular file (a FIFO, device or socket): not copied into the store")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            try:
                while block := os.read(src, chunk):
                    h.update(block)
                    size += len(block)
                    view = memoryview(block)
                    while view:
                        view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            self._link_blob(tmp, h.hexdigest())
        except OSError as err:
            ss.unlink_quiet(tmp)
            full = ss.full_disk_error(err, self.root, f"the log {path}")
            if full is None:
                raise
            raise full from err
        except BaseException:
            ss.unlink_quiet(tmp)
            raise
        finally:
            os.close(src)
        return h.hexdigest(), size

    def _prefix(self) -> str:
        # temp names <host>.<pid>.<random>-<n>.tmp: host and pid let a later writer tell a dead writer's temps
        return os.path.join(self._root_s, TMP_DIR_NAME, f"{self._host}.{os.getpid()}.{uuid.uuid4().hex[:12]}-")

    def _link_blob(self, tmp: str, digest: str) -> None:
        """Give a synced temp its blob name (kept if it exists) and remove the temp."""
        final = self.blob_path(digest)
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(tmp, final)
            except FileExistsError:
                pass
            ss.fsync_dir(final.parent)
        finally:
            ss.unlink_quiet(tmp)

    def get_blob(self, digest: str) -> bytes | None:
        """The blob with this sha256, or None."""
        try:
            return self.blob_path(digest).read_bytes()
        except FileNotFoundError:
            return None

    # ---------------------------------------------------------------- writing
    def add(self, records: Iterable[dict]) -> int:
        """Store ``records``; return how many were new (``record_id`` not stored before).

        The whole batch is validated first (:class:`StoreError`, nothing written). Then, chunk by chunk: each new
        record's canonical JSON goes to a temp file, the chunk's temps are fsynced, and each is hard-linked to its
        final name (``os.link``: atomic, fails if the name exists). Finally the directories on the batch's paths are
        fsynced, so when ``add`` returns every record of the batch is durable. An id stored already -- same content
        or not -- adds nothing; differing content keeps the stored version and lands in :attr:`last_conflicts`.
        """
        try:
            return self._add(records)
        except OSError as err:
            full = ss.full_disk_error(err, self.root, "records")
            if full is None:
                raise
            raise full from err

    def _add(self, records: Iterable[dict]) -> int:
        batch: dict[str, tuple[dict, bytes]] = {}
        conflicts: list[str] = []
        for i, record in enumerate(records):
            rid, norm, data = ss.validate_record(record, i)
            if rid in batch:
                if batch[rid][1] != data and batch[rid][0] != norm:
                    conflicts.append(rid)
                continue
            batch[rid] = (norm, data)
        self.last_conflicts = conflicts
        if not batch:
            return 0
        self._ensure_root()
        self._clean_stale_temps()
        items = list(batch.items())
        # temp names <host>.<pid>.<random>-<n>.tmp: host and pid let a later writer tell a dead writer's temps
        prefix = os.path.join(self._root_s, TMP_DIR_NAME, f"{self._host}.{os.getpid()}.{uuid.uuid4().hex[:12]}-")
        pool = ThreadPoolExecutor(self.workers) if self.workers > 1 and len(items) > 1 else None
        new = 0
        try:
            for k in range(0, len(items), self.chunk):
                n, conf = self._add_chunk(items[k : k + self.chunk], prefix, pool)
                new += n
                conflicts.extend(conf)
            # Make the entries on the batch's paths durable -- also of records a concurrent writer just created.
            leaves = {os.path.dirname(self._final(rid)) for rid, _ in items}
            dirs = sorted(leaves) + sorted({os.path.dirname(d) for d in leaves}) + [self._root_s]
            if pool is None:
                for d in dirs:
                    ss.fsync_dir(d)
            else:
                list(pool.map(ss.fsync_dir, dirs))
        finally:
            if pool is not None:
                pool.shutdown()
        if conflicts:
            log.warning(
                "%s: %d record(s) already stored with different content; kept the stored version: %s",
                self.root,
                len(conflicts),
                ", ".join(conflicts[:5]) + (" ..." if len(conflicts) > 5 else ""),
            )
        return new

    def _add_chunk(
        self, items: list[tuple[str, tuple[dict, bytes]]], prefix: str, pool: ThreadPoolExecutor | None
    ) -> tuple[int, list[str]]:
        """Write, fsync and link one chunk; (number new, ids stored already with different content)."""
        new, conflicts = 0, []
        pending: list[tuple[str, str, dict, bytes, str]] = []  # (rid, final, norm, data, tmp)
        fds: list[int] = []
        try:
            for rid, (norm, data) in items:
                final = self._final(rid)
                if os.path.exists(final):  # stored already: nothing to write
                    if not self._same(final, norm, data):
                        conflicts.append(rid)
                    continue
                tmp = f"{prefix}{next(self._counter)}.tmp"
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
                fds.append(fd)
                pending.append((rid, final, norm, data, tmp))
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            if pool is None or len(fds) < 2:
                for fd in fds:
                    os.fsync(fd)
            else:
                list(pool.map(os.fsync, fds))
            for fd in fds:
                os.close(fd)
            fds = []
            for rid, final, norm, data, tmp in pending:
                status = self._link(tmp, final, norm, data, prefix)
                new += status == "new"
                if status == "conflict":
                    conflicts.append(rid)
        finally:
            for fd in fds:
                os.close(fd)
            for *_, tmp in pending:
                ss.unlink_quiet(tmp)
        return new, conflicts

    def _link(self, tmp: str, final: str, norm: dict, data: bytes, prefix: str) -> str:
        """Give the synced temp its final name; 'new', 'same' (exists, equal) or 'conflict' (exists, different)."""
        own = None  # a temp written here, if ours was removed as stale (this process paused > ss.STALE_TEMP_AGE_S)
        try:
            for _ in range(3):
                try:
                    try:
                        os.link(tmp, final)
                    except FileNotFoundError:
                        if os.path.isdir(os.path.dirname(final)):
                            raise  # the temp is gone
                        os.makedirs(os.path.dirname(final), exist_ok=True)  # first record of this fan-out dir
                        os.link(tmp, final)
                    return "new"
                except FileExistsError:
                    if ss.same_file(tmp, final):  # NFS: our link succeeded but a retransmitted request said EEXIST
                        return "new"
                    return "same" if self._same(final, norm, data) else "conflict"
                except FileNotFoundError:
                    if own:
                        ss.unlink_quiet(own)
                    tmp = own = self._write_synced(data, prefix)
            raise StoreError(f"{final}: could not be written (its temp file kept disappearing)")
        finally:
            if own:
                ss.unlink_quiet(own)

    def _write_synced(self, data: bytes, prefix: str) -> str:
        tmp = f"{prefix}{next(self._counter)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except BaseException:  # a full disk: no half-written temp left behind
            os.close(fd)
            ss.unlink_quiet(tmp)
            raise
        os.close(fd)
        return tmp

    def _same(self, final: str, norm: dict, data: bytes) -> bool:
        with open(final, "rb") as f:
            stored = f.read()
        if stored == data:
            return True
        try:
            return json.loads(stored) == norm
        except ValueError as exc:
            raise StoreError(f"{final}: corrupt record file ({exc})") from exc

    def _ensure_root(self) -> None:
        tmp = self.root / TMP_DIR_NAME
        if tmp.is_dir():
            return
        created = not self.root.exists()
        tmp.mkdir(parents=True, exist_ok=True)
        if created:
            ss.fsync_dir(self.root.parent)

    def _clean_stale_temps(self) -> None:
        """Delete temp files left by writers that died: this host's temps whose process is gone, and any temp
        older than :data:`ss.STALE_TEMP_AGE_S` (another host's, or one whose pid was reused)."""
        tmp_dir = self.root / TMP_DIR_NAME
        now = time.time()
        try:
            entries = list(os.scandir(tmp_dir))
        except FileNotFoundError:
            return
        for entry in entries:
            parts = entry.name.split(".")
            stale = False
            if len(parts) == 4 and parts[0] == self._host and parts[1].isdigit():
                pid = int(parts[1])
                stale = pid != os.getpid() and not ss.pid_alive(pid)
            if not stale:
                try:
                    stale = now - entry.stat().st_mtime > ss.STALE_TEMP_AGE_S
                except FileNotFoundError:
                    continue
            if stale:
                ss.unlink_quiet(entry.path)
