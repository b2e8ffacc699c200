"""A cache of composed configs, so each distinct config is composed by Hydra once: in this process, and across
processes on disk.

A Hydra compose of ``configs/config.yaml`` plus bridgebench's schema check costs 0.2-0.4 s of CPU, and a command such
as ``bridgebench table`` asks for the same handful of configs many times. The cache key is a SHA-256 over

- the content (and relative path) of every file under every config folder Hydra searches (:func:`search_dirs`:
  ``configs/`` -- whose ``recipe`` group links to ``recipes/`` and is followed -- and every folder named in
  ``BRIDGEBENCH_CONFIG_DIR``), read at each lookup, so an edited, added or removed file
  is a miss;
- the source of the code that composes and checks (every file of ``bridgebench/config/``, ``bridgebench/model/spec.py``
  and ``bridgebench/paths.py``) and the installed Hydra and OmegaConf versions, read once per process;
- the normalized overrides and whether Hydra's own node is kept (then the working directory too: Hydra records it).

Values are pickled ``DictConfig`` objects (environment interpolations such as ``${oc.env:BRIDGEBENCH_PLANS,plans}``
stay unresolved, so they follow the environment of the process that reads them); every lookup returns a fresh copy.
Failed composes are never cached. The on-disk copy lives under ``configs/paths``' ``cache`` folder
(``BRIDGEBENCH_CACHE``; ``BRIDGEBENCH_CACHE=off`` turns the disk cache off) and is bounded (:data:`MAX_FILES`).
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
from pathlib import Path
from typing import Any, Callable

from bridgebench.paths import USER_CONFIG_ENV, config_dirs

#: The environment variable that names the user's config folder (a Hydra tree that adds options to groups).
CONFIG_DIR_ENV = USER_CONFIG_ENV
#: Files kept on disk at most; beyond it the oldest half is removed.
MAX_FILES = 4000
_FORMAT = b"bridgebench-compose-cache-1"
_PKG = Path(__file__).resolve().parents[1]

_memo: dict[str, bytes] = {}
stats = {"hits_memory": 0, "hits_disk": 0, "misses": 0}


def search_dirs() -> list[Path]:
    """Every config folder a compose reads: :func:`bridgebench.paths.config_dirs` (``configs/`` and
    ``$BRIDGEBENCH_CONFIG_DIR``)."""
    return list(config_dirs())


def tree_digest(dirs: list[Path] | None = None) -> str:
    """SHA-256 over the relative path and content of every file under ``dirs`` (symlinks followed), in a stable
    order; a folder that does not exist counts as its name only."""
    h = hashlib.sha256()
    for i, root in enumerate(dirs if dirs is not None else search_dirs()):
        h.update(f"\0dir{i}:{root}\0".encode())
        if not root.is_dir():
            continue
        files = []
        for folder, subdirs, names in os.walk(root, followlinks=True):
            subdirs.sort()
            files += [Path(folder) / n for n in names if not n.endswith((".pyc", ".tmp"))]
        for path in sorted(files):
            h.update(str(path.relative_to(root)).encode() + b"\0")
            try:
                h.update(path.read_bytes())
            except OSError as err:  # unreadable: Hydra will fail on it too; never a stale hit
                h.update(f"<{type(err).__name__}>".encode())
            h.update(b"\0")
    return h.hexdigest()


@functools.cache
def code_digest() -> str:
    """SHA-256 of the code that composes and checks configs, and of Hydra's and OmegaConf's versions (per process)."""
    import hydra
    import omegaconf

    h = hashlib.sha256(f"hydra {hydra.__version__} omegaconf {omegaconf.__version__}".encode())
    files = sorted((_PKG / "config").glob("*")) + [_PKG / "model" / "spec.py", _PKG / "paths.py"]
    for path in files:
        if path.is_file():
            h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def key_of(overrides: tuple[str, ...], hydra_node: bool) -> str:
    """The cache key of one compose (see the module docstring)."""
    h = hashlib.sha256(_FORMAT)
    h.update(code_digest().encode())
    h.update(tree_digest().encode())
    h.update(repr((overrides, hydra_node, os.getcwd() if hydra_node else None)).encode())
    return h.hexdigest()


def _disk_dir() -> Path | None:
    value = os.environ.get("BRIDGEBENCH_CACHE")
    if value is not None and value.strip().lower() in ("off", "0", "none", ""):
        return None
    from bridgebench.paths import load_paths

    return load_paths().cache / "compose"


def cached(overrides: tuple[str, ...], hydra_node: bool, make: Callable[[], Any]) -> Any:
    """The composed config for ``overrides``: a fresh copy from memory or disk, else ``make()`` (then stored).

    Exceptions from ``make`` propagate and nothing is stored.
    """
    key = key_of(overrides, hydra_node)
    blob = _memo.get(key)
    if blob is not None:
        stats["hits_memory"] += 1
        return pickle.loads(blob)
    folder = _disk_dir()
    path = folder / f"{key}.pkl" if folder is not None else None
    if path is not None and path.is_file():
        try:
            raw = path.read_bytes()
            if raw.startswith(_FORMAT + b"\n"):
                blob = raw[len(_FORMAT) + 1 :]
                value = pickle.loads(blob)
                _memo[key] = blob
                stats["hits_disk"] += 1
                return value
        except Exception:  # noqa: BLE001  (a damaged or foreign file is a miss, never an error)
            blob = None
    stats["misses"] += 1
    value = make()
    blob = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    _memo[key] = blob
    if path is not None:
        _store(path, blob)
    return pickle.loads(blob)


def _store(path: Path, blob: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(_FORMAT + b"\n" + blob)
        tmp.replace(path)
        entries = list(path.parent.glob("*.pkl"))
        if len(entries) > MAX_FILES:
            entries.sort(key=lambda p: p.stat().st_mtime)
            for old in entries[: len(entries) // 2]:
                old.unlink(missing_ok=True)
    except OSError:
        pass  # a read-only or full disk: the in-memory copy still serves this process


def clear_memory() -> None:
    """Forget the in-process copies (the disk cache stays)."""
    _memo.clear()
