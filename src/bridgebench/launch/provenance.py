"""Who submitted what where: bridgebench's version and git commit, and the identity of the SLURM cluster.

SLURM job ids are only unique within one controller state: purging the local cluster (``make cluster-purge``),
a second cluster or a wrapped id counter hands out the same id again. A submission is therefore known by
``cluster_id`` + SLURM job id + bridgebench's own attempt UUID (``launch/ledger.py``), and ``cluster_id`` is
``<cluster name>-<uuid>`` where the cluster declares a file holding a UUID made with its state (the local cluster's
``launch/cluster/up.sh`` writes ``<state>/cluster-id``; purging the state makes a new one), else the name alone.
"""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path
from typing import Any

from bridgebench import __version__
from bridgebench.paths import REPO_ROOT

_UUID = re.compile(r"^[0-9a-fA-F-]{8,64}$")


@functools.cache
def code_version() -> dict[str, Any]:
    """``{"bridgebench_version", "git_commit", "git_dirty"}`` of this checkout (commit and dirty flag None when
    it is not a git checkout or git is missing). ``git_dirty`` counts tracked files with uncommitted changes."""
    out: dict[str, Any] = {"bridgebench_version": __version__, "git_commit": None, "git_dirty": None}
    try:
        commit = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
        if commit.returncode == 0:
            out["git_commit"] = commit.stdout.strip()
            status = subprocess.run(
                ["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
                timeout=30,
            )
            out["git_dirty"] = bool(status.stdout.strip()) if status.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        pass
    return out


def identity_path(cluster: Any) -> Path | None:
    """The cluster's identity file on the submit side (relative paths are under the repository), or None."""
    value = cluster.get("identity_file")
    if not value:
        return None
    path = Path(str(value)).expanduser()
    return path if path.is_absolute() else REPO_ROOT / path


def cluster_identity(cluster: Any) -> str:
    """``<name>-<uuid>`` when the cluster's identity file holds a UUID, else ``<name>``."""
    name = str(cluster.get("name"))
    path = identity_path(cluster)
    if path is not None:
        try:
            uid = path.read_text().strip()
        except OSError:
            uid = ""
        if _UUID.match(uid):
            return f"{name}-{uid}"
    return name
