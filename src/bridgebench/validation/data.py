"""Where the validation data is: NVIDIA's published tables, Megatron-LM's golden runs and the published ablations,
each a ``configs/paths`` entry (``reference``, ``golden``, ``ablations``) with its ``BRIDGEBENCH_*`` override.

The published tables and the golden runs ship with the repository (``results/reference``); the ablations are read
from the project's reference set beside the clone (``../shared/reference/ablations`` from the repository root, as CI
lays it out) and are not shipped. A reader that needs a folder calls :func:`require`, which names the path and the
variable that moves it when the folder is absent.
"""

from __future__ import annotations

from pathlib import Path

from bridgebench.errors import BridgebenchError
from bridgebench.paths import load_paths, path_variable

#: the ``configs/paths`` entries that hold validation data
DATA_KEYS = ("reference", "golden", "ablations")


class ReferenceDataMissing(BridgebenchError):
    """A validation data folder (or a file in it) is not where ``configs/paths`` says; the message names the path and
    the environment variable that moves it."""


def data_dir(key: str) -> Path:
    """The absolute folder of ``configs/paths`` entry ``key`` (one of :data:`DATA_KEYS`), resolved now (environment
    overrides apply at call time); it may not exist (:func:`require` checks).

    Raises:
        ReferenceDataMissing: ``key`` is not a validation data entry.
    """
    if key not in DATA_KEYS:
        raise ReferenceDataMissing(f"paths: {key!r} is not a validation data entry ({', '.join(DATA_KEYS)})")
    return Path(getattr(load_paths(), key))


def missing_message(key: str, path: Path | None = None) -> str:
    """What to say when ``key``'s folder (or ``path`` in it) is absent: the path and the variable that moves it."""
    where = path or data_dir(key)
    var = path_variable(key)
    return (
        f"validation data {key!r} not found at {where} (configs/paths/default.yaml: {key}; "
        f"set {var}=<folder> to read it elsewhere)"
    )


def require(key: str, *names: str) -> Path:
    """The folder of ``key`` (:func:`data_dir`), checked to exist, and each of ``names`` (file names in it) too.

    Raises:
        ReferenceDataMissing: the folder or one of the files is absent (the message names the path and the
            ``BRIDGEBENCH_*`` variable that moves it).
    """
    folder = data_dir(key)
    if not folder.is_dir():
        raise ReferenceDataMissing(missing_message(key))
    for name in names:
        if not (folder / name).is_file():
            raise ReferenceDataMissing(missing_message(key, folder / name))
    return folder
