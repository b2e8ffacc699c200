"""Where bridgebench's files are: the repository folders it ships, and the read/write paths of ``configs/paths``.

``configs/paths/default.yaml`` is the one declaration of every path (plans, ledger, results store, reference data,
generated tables, Hugging Face cache, job folders), each with an ``${oc.env:…}`` override. Code that composes a full
Hydra config reads ``cfg.paths``; code that has no composed config (``collect``, ``status``) calls :func:`load_paths`,
which reads the same file with OmegaConf. Bottom layer: imports nothing from bridgebench.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = REPO_ROOT / "configs"
RECIPES_DIR = REPO_ROOT / "recipes"
PATHS_FILE = CONFIG_DIR / "paths" / "default.yaml"
#: environment variable naming a folder laid out like ``configs/`` (``model/``, ``gpu/``, ``cluster/``, ``sweep/``,
#: ``experiment/``) whose files add options to every command (bring your own model or GPU).
USER_CONFIG_ENV = "BRIDGEBENCH_CONFIG_DIR"
#: the config groups a user folder may add options to.
USER_GROUPS = ("model", "gpu", "cluster", "sweep", "experiment")


def config_dirs() -> tuple[Path, ...]:
    """The config search path, in order: the shipped ``configs/``, then ``$BRIDGEBENCH_CONFIG_DIR`` when set (as
    given, made absolute; ``bridgebench.config.compose.check_user_config_dir`` says what is wrong with it). Every
    reader of config groups goes through this one function, so a cache of composed configs can key on it."""
    extra = os.environ.get(USER_CONFIG_ENV, "").strip()
    if not extra:
        return (CONFIG_DIR,)
    return (CONFIG_DIR, Path(extra).expanduser().absolute())


@contextmanager
def environ_set(name: str, value: str) -> Iterator[None]:
    """Environment variable ``name`` set to ``value`` inside the ``with`` block, then restored (unset again when it
    was unset before), also when the block raises."""
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def config_files(group: str) -> dict[str, Path]:
    """Option name -> YAML file of a config group over :func:`config_dirs` (the shipped file wins a name clash;
    ``bridgebench.config.compose.check_user_config_dir`` refuses clashes before anything is composed)."""
    out: dict[str, Path] = {}
    for folder in config_dirs():
        for path in sorted((folder / group).glob("*.yaml")) if (folder / group).is_dir() else []:
            out.setdefault(path.stem, path)
    return out


@dataclass(frozen=True, kw_only=True)
class Paths:
    """Absolute read/write paths (fields = keys of ``configs/paths/default.yaml``)."""

    plans: Path
    ledger: Path
    results: Path
    reference: Path
    golden: Path
    shared_reference: Path
    ablations: Path
    tables: Path
    hf_cache: Path
    job_dir: Path
    sweeps: Path
    site: Path
    cache: Path
    debug_log: Path

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Paths:
        """Absolute paths from a resolved mapping; relative entries are taken under :data:`REPO_ROOT`."""
        return cls(**{k: _absolute(str(data[k])) for k in cls.__dataclass_fields__})


def _absolute(value: str) -> Path:
    import os

    path = Path(value).expanduser()
    return path if path.is_absolute() else Path(os.path.normpath(REPO_ROOT / path))


def path_variable(key: str) -> str | None:
    """The ``BRIDGEBENCH_*`` variable that overrides ``configs/paths`` entry ``key`` (None when it has none).

    Raises:
        KeyError: ``key`` is not an entry of ``configs/paths/default.yaml``.
    """
    import re

    from omegaconf import OmegaConf

    data = OmegaConf.to_container(OmegaConf.load(PATHS_FILE), resolve=False)
    assert isinstance(data, dict)  # a mapping file (configs/paths/default.yaml)
    raw = data[key]
    m = re.match(r"\$\{oc\.env:([A-Z0-9_]+),", str(raw))
    return m.group(1) if m else None


def load_paths() -> Paths:
    """The resolved ``configs/paths/default.yaml`` (environment overrides applied at call time)."""
    from omegaconf import OmegaConf

    data = OmegaConf.to_container(OmegaConf.load(PATHS_FILE), resolve=True)
    assert isinstance(data, dict)  # a mapping file (configs/paths/default.yaml)
    return Paths.from_mapping({str(k): v for k, v in data.items()})
