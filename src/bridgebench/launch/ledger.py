"""The job ledger: every submission, its SLURM job id, state and attempts, in SQLite (stdlib ``sqlite3``).

One row per attempt: ``run_id`` (config hash + ``-r<repeat>``), ``attempt`` (0, 1, ... for retries), SLURM job id,
nemo-run experiment id, state (SLURM's, from ``sacct``), reason (exit code, log outcome), timestamps, plan and job
directories, node list, nodes excluded on retry, and whether the attempt's logs were collected. SQLite gives atomic
transactions and safe concurrent access from several processes (``bridgebench status`` and ``collect`` at once).
Secrets are never stored: the ledger holds no environment. Forward-compatible: a ledger a newer bridgebench wrote
(columns this version does not know) is read and written as usual -- the unknown columns are left as they are.

A ledger file SQLite cannot read (corrupt, truncated, not a database) or cannot write (disk full) raises
:class:`LedgerError` naming the file and how to recover, never SQLite's own message alone (which for a truncated
file is ``cannot rollback - no transaction is active``, from a rollback after the real error).
"""

from __future__ import annotations

import json
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Iterator

from bridgebench.errors import BridgebenchError
from bridgebench.paths import load_paths

FINAL_STATES = {
    "COMPLETED",
    "FAILED",
    "TIMEOUT",
    "CANCELLED",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
    "PREEMPTED",
}

#: bridgebench's own state for a job SLURM stopped reporting for longer than ``cluster.lost_after_s`` (its controller
#: lost it, or the cluster state was purged); re-checked on every refresh, so a job SLURM reports again comes back.
LOST = "LOST"

SCHEMA = """
CREATE TABLE IF NOT EXISTS attempts (
    run_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    name TEXT NOT NULL,
    job_type TEXT NOT NULL,
    slurm_job_id TEXT,
    experiment_id TEXT,
    state TEXT NOT NULL,
    reason TEXT,
    exit_code TEXT,
    submitted_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    plan_dir TEXT,
    job_dir TEXT,
    node_list TEXT,
    excluded_nodes TEXT,
    collected INTEGER NOT NULL DEFAULT 0,
    retried INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, attempt)
)
"""

#: columns added after the first release (``Ledger`` adds them to an older ledger file): bridgebench's own attempt
#: UUID, the cluster identity and SLURM job name (a job id alone is not unique: launch/provenance.py), SLURM's start
#: and end times, since when SLURM has not reported the job (LOST after ``cluster.lost_after_s``), the job this one
#: waits for, the container it was started in, the sha256 of the submitted script, the code that submitted it, and
#: the job folder on the cluster (launch/nodepaths.py: where the job's logs and out/ are; fetched back over SSH).
EXTRA_COLUMNS = {
    "uid": "TEXT",
    "cluster_id": "TEXT",
    "job_name": "TEXT",
    "started_at": "REAL",
    "ended_at": "REAL",
    "unknown_since": "REAL",
    "depends_on": "TEXT",
    "container_image": "TEXT",
    "script_sha256": "TEXT",
    "bridgebench_version": "TEXT",
    "git_commit": "TEXT",
    "git_dirty": "INTEGER",
    "node_job_dir": "TEXT",
}


@dataclass(kw_only=True)
class Attempt:
    run_id: str
    attempt: int
    name: str
    job_type: str
    state: str
    submitted_at: float
    updated_at: float
    slurm_job_id: str | None = None
    experiment_id: str | None = None
    reason: str | None = None
    exit_code: str | None = None
    plan_dir: str | None = None
    job_dir: str | None = None
    node_list: str | None = None
    excluded_nodes: list[str] = field(default_factory=list)
    collected: bool = False
    retried: bool = False
    uid: str | None = None
    cluster_id: str | None = None
    job_name: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    unknown_since: float | None = None
    depends_on: str | None = None
    container_image: str | None = None
    script_sha256: str | None = None
    bridgebench_version: str | None = None
    git_commit: str | None = None
    git_dirty: bool | None = None
    node_job_dir: str | None = None  # the job folder on the cluster (launch/nodepaths.py); fetched back over SSH

    @property
    def finished(self) -> bool:
        """SLURM reported a final state (COMPLETED, FAILED, ...): the attempt's logs can be collected."""
        return self.state.split(" ")[0] in FINAL_STATES

    @property
    def settled(self) -> bool:
        """Nothing more will happen without someone acting: finished, or LOST (SLURM no longer knows the job)."""
        return self.finished or self.state == LOST


class LedgerError(BridgebenchError):
    """The ledger file cannot be read or written; the message names it and says how to recover."""


#: SQLite primary result codes (https://www.sqlite.org/rescode.html; extended codes carry them in the low byte)
_CORRUPT = {sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB}
_IOERR = 10  # SQLITE_IOERR: a failed read (truncated file) or write (EFBIG: file-size limit, EIO)


class Ledger:
    """SQLite-backed ledger at ``path`` (default ``results/ledger.sqlite``).

    Raises:
        LedgerError: the file is corrupt, truncated or not a database, or the disk is full (the message says how to
            recover).
    """

    def __init__(self, path: Path | None = None):
        self.path = Path(path or load_paths().ledger)  # configs/paths: ledger
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise LedgerError(f"cannot create the folder of the job ledger {self.path}: {err}") from err
        with self._db() as db:
            db.execute(SCHEMA)
            have = {row["name"] for row in db.execute("PRAGMA table_info(attempts)")}
            for column, kind in EXTRA_COLUMNS.items():
                if column not in have:
                    db.execute(f"ALTER TABLE attempts ADD COLUMN {column} {kind}")

    def _error(self, err: sqlite3.Error) -> LedgerError | None:
        """A LedgerError for SQLite errors that mean a damaged file, a full disk or an I/O failure (else None: pass
        the error on, e.g. a locked database or an integrity error)."""
        code = getattr(err, "sqlite_errorcode", None)
        primary = code & 0xFF if isinstance(code, int) else None
        p = self.path
        recover = (
            f"Records already collected are safe in the results store. To recover: move it aside (mv {p} "
            f"{p}.corrupt), then either salvage its readable rows (sqlite3 {p}.corrupt .dump | sed "
            f"'s/^ROLLBACK; -- due to errors$/COMMIT;/' | sqlite3 {p}; rows the damage made unreadable are reported "
            "as errors and left out) or start with a new, empty ledger (attempts "
            "not yet collected are then forgotten by bridgebench; SLURM still lists their jobs: sacct)"
        )
        if primary == sqlite3.SQLITE_FULL or "disk is full" in str(err):
            return LedgerError(
                f"cannot write the job ledger {p}: the disk is full ({err}); nothing was changed in it. Free space "
                f"there (or set BRIDGEBENCH_LEDGER to a disk with room) and run the command again"
            )
        if primary == _IOERR:
            return LedgerError(
                f"SQLite could not read or write the job ledger {p} ({err}): a full disk or a file-size limit "
                f"(nothing was changed then: make room and run the command again), or a truncated file. {recover}"
            )
        if primary in _CORRUPT or any(m in str(err) for m in ("malformed", "not a database")):
            return LedgerError(f"the job ledger {p} is corrupt or truncated; SQLite says: {err}. {recover}")
        return None

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        try:
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        except sqlite3.Error as err:
            raise (self._error(err) or err) from err
        db.row_factory = sqlite3.Row
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("BEGIN IMMEDIATE")
            yield db
            db.execute("COMMIT")
        except BaseException as err:
            if db.in_transaction:  # a damaged file fails before BEGIN: there is nothing to roll back then
                try:
                    db.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            mapped = self._error(err) if isinstance(err, sqlite3.Error) else None
            if mapped is not None:
                raise mapped from err
            raise
        finally:
            db.close()

    def add(self, a: Attempt) -> None:
        """Insert a new attempt (raises sqlite3.IntegrityError if (run_id, attempt) exists)."""
        row = asdict(a) | {
            "excluded_nodes": json.dumps(a.excluded_nodes),
            "collected": int(a.collected),
            "retried": int(a.retried),
            "git_dirty": None if a.git_dirty is None else int(a.git_dirty),
        }
        with self._db() as db:
            db.execute(
                f"INSERT INTO attempts ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values())
            )

    def update(self, run_id: str, attempt: int, **fields) -> None:
        """Update fields of one attempt (``updated_at`` is set to now)."""
        fields["updated_at"] = time.time()
        if "excluded_nodes" in fields:
            fields["excluded_nodes"] = json.dumps(fields["excluded_nodes"])
        for key in ("collected", "retried", "git_dirty"):
            if fields.get(key) is not None:
                fields[key] = int(fields[key])
        sets = ", ".join(f"{k} = ?" for k in fields)
        with self._db() as db:
            db.execute(
                f"UPDATE attempts SET {sets} WHERE run_id = ? AND attempt = ?", [*fields.values(), run_id, attempt]
            )

    def attempts(self, run_id: str | None = None) -> list[Attempt]:
        """All attempts (of one run), ordered by submission time."""
        with self._db() as db:
            rows = db.execute(
                "SELECT * FROM attempts" + (" WHERE run_id = ?" if run_id else "") + " ORDER BY submitted_at, attempt",
                [run_id] if run_id else [],
            ).fetchall()
        known = {f.name for f in fields(Attempt)}  # a newer bridgebench's extra columns are kept in the file, unread
        return [
            Attempt(
                **(
                    {k: v for k, v in dict(r).items() if k in known}
                    | {
                        "excluded_nodes": json.loads(r["excluded_nodes"] or "[]"),
                        "collected": bool(r["collected"]),
                        "retried": bool(r["retried"]),
                        "git_dirty": None if r["git_dirty"] is None else bool(r["git_dirty"]),
                    }
                )
            )
            for r in rows
        ]

    def runs_of(self, config_hash: str) -> list[str]:
        """Run ids (``<hash>-r<repeat>``) of a config hash in the ledger, by repeat index."""
        with self._db() as db:
            rows = db.execute(
                "SELECT DISTINCT run_id FROM attempts WHERE run_id LIKE ?", [f"{config_hash}-r%"]
            ).fetchall()
        return sorted((r[0] for r in rows), key=lambda rid: int(rid.rsplit("-r", 1)[1]))

    def next_attempt(self, run_id: str) -> int:
        with self._db() as db:
            row = db.execute("SELECT MAX(attempt) FROM attempts WHERE run_id = ?", [run_id]).fetchone()
        return 0 if row[0] is None else row[0] + 1
