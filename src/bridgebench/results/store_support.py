"""The results store's parts below the store itself: its error, what a scan reports (skipped files, duplicate
attempts), record identity and hashing, record validation and normalisation, and the file-system steps a crash-safe
write needs (directory fsync, quiet unlink, same-file and live-process checks). :mod:`bridgebench.results.store`
uses them; its docstring describes the layout."""

from __future__ import annotations

import errno
import hashlib
import json
import math
import numbers
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bridgebench.errors import BridgebenchError

if (
    TYPE_CHECKING
):  # pandas is only needed by frame(); keep `import bridgebench.results.store` light for writer processes
    pass

TMP_DIR_NAME = ".tmp"
#: content-addressed copies of logs and scripts (``<root>/blobs/<2 hex>/<sha256>``); not records
BLOB_DIR_NAME = "blobs"
#: A temp file of another host, or of a process we cannot prove dead, is removed once older than this.
STALE_TEMP_AGE_S = 3600.0
#: a file in the record folders larger than this is not read (records are a few kB to a few MB)
MAX_RECORD_BYTES = 64 << 20
HEX_DIGITS = frozenset("0123456789abcdef")
#: errno values that mean "the disk (or the quota, or the file size limit) is full"
FULL_DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


class StoreError(BridgebenchError):
    """A record breaks a rule (the message names the record and the field), or a stored file is unreadable."""


def full_disk_error(err: OSError, root: Path, what: str) -> StoreError | None:
    """A StoreError saying the disk is full, for an OSError that says so (else None)."""
    if err.errno not in FULL_DISK_ERRNOS:
        return None
    return StoreError(
        f"cannot write {what} into the results store {root}: {os.strerror(err.errno)}. Nothing half-written is left "
        "(records already stored are complete); free space there, or point BRIDGEBENCH_RESULTS at a disk with room, "
        "and run the command again"
    )


@dataclass(frozen=True, kw_only=True)
class Skipped:
    """A file in the store that is not counted, and why (the field, for a record that breaks the schema)."""

    path: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class Duplicate:
    """A file holding the same record as ``of`` (the record's own file): a ``copy``, ``hard link`` or ``symlink``,
    or the record itself stored under a name other than its id's (``misplaced``: ``of`` is the name it should have),
    or a record of the same attempt under another record id (``same attempt``: :func:`attempt_identity`)."""

    path: str
    of: str
    how: str


@dataclass(kw_only=True)
class StoreScan:
    """What :meth:`ResultStore.scan` found: the records (each once, by ``record_id``), the files skipped and the
    duplicates."""

    records: list[dict] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    duplicates: list[Duplicate] = field(default_factory=list)

    def notes(self) -> list[str]:
        """One line per skipped file and per duplicate, for the user (empty when the store is clean)."""
        out = [f"skipped {s.path}: {s.reason}" for s in self.skipped]
        for d in self.duplicates:
            if d.how == "misplaced":
                out.append(f"counted once: {d.path} holds a record stored under another name than its id's ({d.of})")
            elif d.how == "same attempt":
                out.append(f"counted once: {d.path} holds the same attempt as {d.of} under another record id")
            else:
                out.append(f"counted once: {d.path} is a {d.how} of {d.of}")
        return out


def attempt_identity(record: dict) -> tuple[str, str, str, str] | None:
    """What makes a record one attempt's: (cluster id, SLURM job id, bridgebench's attempt UUID, kind) from its
    provenance, the parts collect builds its record id from (launch/collect.py ``record_id``); None for a record
    without an attempt UUID (hand-made or older records: counted by record id alone). Two records with different
    ids and the same identity are one attempt counted twice: :meth:`ResultStore.scan` keeps one."""
    prov = record.get("provenance")
    if not isinstance(prov, dict) or not prov.get("attempt_uid"):
        return None
    return (
        str(prov.get("cluster_id") or "cluster-unknown"),
        str(prov.get("slurm_job_id")),
        str(prov["attempt_uid"]),
        str(record.get("kind")),
    )


def record_hash(record_id: str) -> str:
    """Filesystem-safe name of a record: sha256 hex of its UTF-8 ``record_id``."""
    return hashlib.sha256(record_id.encode("utf-8")).hexdigest()


def normalize_value(value: Any, path: str, where: str) -> Any:
    """A JSON-exact copy of ``value`` (tuples -> lists, numpy scalars -> Python); StoreError naming ``path`` if not."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        f = float(value)
        if not math.isfinite(f):
            raise StoreError(
                f"{where}: field {path!r} is {f!r}; NaN/inf are not stored (JSON has none) -- use None for 'no value'"
            )
        return f
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise StoreError(f"{where}: field {path!r} has a non-string key {key!r} (JSON keys are strings)")
            out[key] = normalize_value(item, f"{path}.{key}" if path else key, where)
        return out
    if isinstance(value, (list, tuple)):
        return [normalize_value(item, f"{path}[{i}]", where) for i, item in enumerate(value)]
    if type(value).__module__ == "numpy" and hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        return normalize_value(value.item(), path, where)  # np.bool_, np.str_ ...
    raise StoreError(f"{where}: field {path!r} is not JSON-serializable ({type(value).__name__}: {value!r:.80})")


def validate_record(record: Any, index: int) -> tuple[str, dict, bytes]:
    """(record_id, normalized record, canonical UTF-8 JSON) of one input record."""
    if not isinstance(record, dict):
        raise StoreError(f"record #{index}: must be a dict, got {type(record).__name__}")
    for name in ("record_id", "kind"):
        value = record.get(name)
        if not isinstance(value, str) or not value:
            raise StoreError(f"record #{index}: field {name!r} must be a non-empty string, got {value!r}")
    rid = record["record_id"]
    norm = normalize_value(record, "", f"record #{index} ({rid!r})")
    from bridgebench.results.record_schema import problems

    bad = problems(norm)
    if bad:
        where, msg = bad[0]
        raise StoreError(f"record #{index} ({rid!r}): field {where!r} breaks the record schema: {msg}")
    try:
        data = json.dumps(norm, ensure_ascii=False, allow_nan=False).encode("utf-8") + b"\n"
    except UnicodeEncodeError as exc:  # lone surrogates
        raise StoreError(f"record #{index} ({rid!r}): a string is not valid Unicode ({exc})") from exc
    return rid, norm, data


def fsync_dir(path: str | Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    except OSError as exc:  # some filesystems refuse fsync on directories; nothing more can be done there
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def unlink_quiet(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except FileNotFoundError:
        return False


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True
