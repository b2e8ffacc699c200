"""The calibration of the memory and time models (``configs/calibration/<name>.yaml``), read and written as plain YAML.

Not a Hydra group of ``configs/config.yaml`` on purpose: a calibration is a fact about bridgebench's models, not
about a run, so it must not enter a run's config hash. ``bridgebench calibrate --write`` refits the ``time`` node
from the shipped published table; the ``memory`` node is set by hand, each value with its source in the file.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bridgebench.errors import BridgebenchError
from bridgebench.model.timing import Calibration, TimeModelError
from bridgebench.paths import CONFIG_DIR

CALIBRATION_DIR = CONFIG_DIR / "calibration"


class CalibrationError(BridgebenchError):
    """An unknown or malformed calibration file; the message names the file and the field."""


@dataclass(frozen=True)
class ModelCalibration:
    """One calibration file: ``time`` (:class:`bridgebench.model.timing.Calibration`), the memory model's constant
    ``other_bytes`` (bytes per GPU), the caching allocator's fragmentation (``fragmentation``: reserved over
    allocated memory at the peak, minus 1, measured in real logs), the routed-token imbalance factor
    (``moe_imbalance``), and where the numbers come from (``source``)."""

    name: str
    time: Calibration
    other_bytes: float
    fragmentation: float
    moe_imbalance: float
    source: str
    raw: dict[str, Any]

    def usable_hbm_bytes(self, hbm_bytes: float) -> float:
        """Predicted peak memory (allocated) a point may have: ``hbm_bytes / (1 + fragmentation)`` -- the caching
        allocator reserves ``1 + fragmentation`` times what it allocates, and the reserved memory must fit the HBM."""
        return hbm_bytes / (1.0 + self.fragmentation)

    @property
    def hbm_margin(self) -> float:
        """The fraction of HBM the pruner keeps free, ``1 - 1 / (1 + fragmentation)``."""
        return 1.0 - 1.0 / (1.0 + self.fragmentation)


def names() -> list[str]:
    return sorted(p.stem for p in CALIBRATION_DIR.glob("*.yaml"))


def load(name: str = "default") -> ModelCalibration:
    """Read ``configs/calibration/<name>.yaml``.

    Raises:
        CalibrationError: unknown name (listing the known ones), a missing node, or a value out of range.
    """
    path = CALIBRATION_DIR / f"{name}.yaml"
    if not path.is_file():
        raise CalibrationError(f"unknown calibration {name!r}; known: {names()}")
    data = yaml.safe_load(path.read_text()) or {}
    try:
        mem = data["memory"]
        time = Calibration.from_mapping(data["time"])
        out = ModelCalibration(
            name=name,
            time=time,
            other_bytes=float(mem["other_bytes"]),
            fragmentation=float(mem["fragmentation"]),
            moe_imbalance=float(mem.get("moe_imbalance", 1.0)),
            source=str(data.get("source", "")),
            raw=data,
        )
    except KeyError as err:
        raise CalibrationError(f"{path}: missing {err.args[0]!r}") from err
    except (TypeError, ValueError, TimeModelError) as err:
        raise CalibrationError(f"{path}: {err}") from err
    if not 0.0 <= out.fragmentation < 1.0 or out.other_bytes < 0 or out.moe_imbalance < 1.0:
        raise CalibrationError(
            f"{path}: memory.fragmentation must be in [0, 1), other_bytes >= 0 and moe_imbalance >= 1, got "
            f"{out.fragmentation}, {out.other_bytes}, {out.moe_imbalance}"
        )
    return out


def write_time(name: str, time: Calibration, source: str) -> Path:
    """Replace the ``time`` node and ``source`` of ``configs/calibration/<name>.yaml`` (kept: ``memory`` and the
    header comment), atomically (temp file + rename). Returns the path.

    Raises:
        CalibrationError: the file does not exist (the memory node is not fitted and must be written by hand).
    """
    path = CALIBRATION_DIR / f"{name}.yaml"
    if not path.is_file():
        raise CalibrationError(f"unknown calibration {name!r}; known: {names()} (copy default.yaml first)")
    text = path.read_text()
    header = "".join(line + "\n" for line in text.splitlines() if line.startswith("#"))
    data = yaml.safe_load(text) or {}
    data["source"] = source
    data["time"] = time.to_mapping()
    body = yaml.safe_dump(data, sort_keys=False, width=120)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}-", suffix=".yaml", dir=CALIBRATION_DIR)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(header + body)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
