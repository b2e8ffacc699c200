"""The job ledger: every submission, its SLURM job id, state and attempts, in SQLite (stdlib ``sqlite3``).

One row per attempt: ``run_id`` (config hash + ``-r<repeat>``), ``attempt`` (0, 1, ... for retries), SLURM job id,
nemo-run experiment id, state (SLURM's, from ``sacct``), reason (exit code, log outcome), timestamps, plan and job
directories, node list, nodes excluded on retry, and whether the attempt's logs were collected. SQLite gives atomic
transactions and safe concurrent access from several processes (``bridgebench status`` and ``collect`` at once).
Secrets are never stored: the ledger holds no environment.
"""

from __future__ import annotations

import json
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

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


@dataclass
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


class Ledger:
    """SQLite-backed ledger at ``path`` (default ``results/ledger.sqlite``)."""

    def __init__(self, path: Path | None = None):
        self.path = Path(path or load_paths().ledger)  # configs/paths: ledger
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._db() as db:
            db.execute(SCHEMA)
            have = {row["name"] for row in db.execute("PRAGMA table_info(attempts)")}
            for column, kind in EXTRA_COLUMNS.items():
                if column not in have:
                    db.execute(f"ALTER TABLE attempts ADD COLUMN {column} {kind}")

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        db.row_factory = sqlite3.Row
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("BEGIN IMMEDIATE")
            yield db
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
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
        return [
            Attempt(
                **(
                    dict(r)
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
