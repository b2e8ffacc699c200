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
from bridgebench.model.steptime.calibration import Calibration
from bridgebench.model.steptime.config import TimeModelError
from bridgebench.paths import CONFIG_DIR

CALIBRATION_DIR = CONFIG_DIR / "calibration"


class CalibrationError(BridgebenchError):
    """An unknown or malformed calibration file; the message names the file and the field."""


@dataclass(frozen=True, kw_only=True)
class ModelCalibration:
    """One calibration file: ``time`` (:class:`bridgebench.model.steptime.calibration.Calibration`), the memory
    model's constant ``other_bytes`` (bytes per GPU), the caching allocator's fragmentation (reserved over allocated
    memory at the peak, minus 1, measured in real logs: ``fragmentation`` the lowest, which the pruner uses, and
    ``fragmentation_typical`` the median, above which a point is flagged ``tight``), the bytes a datasheet's
    "GB" of GPU memory stands for where the driver's figure is not recorded (``datasheet_gb_bytes``), the
    routed-token imbalance factor (``moe_imbalance``), and where the numbers come from (``source``)."""

    name: str
    time: Calibration
    other_bytes: float
    fragmentation: float
    moe_imbalance: float
    source: str
    raw: dict[str, Any]
    fragmentation_typical: float = 0.0
    datasheet_gb_bytes: float = 1e9

    def usable_hbm_bytes(self, hbm_bytes: float) -> float:
        """Predicted peak memory (allocated) a point may have and still run: ``hbm_bytes / (1 + fragmentation)``,
        the caching allocator reserving at least ``1 + fragmentation`` times what it allocates (the lowest measured
        ratio: a point above it cannot run, whatever the allocator settings)."""
        return hbm_bytes / (1.0 + self.fragmentation)

    def typical_hbm_bytes(self, hbm_bytes: float) -> float:
        """Predicted peak a point may have with the median measured fragmentation (above it: ``tight``)."""
        return hbm_bytes / (1.0 + self.fragmentation_typical)

    @property
    def hbm_margin(self) -> float:
        """The fraction of HBM the pruner keeps free, ``1 - 1 / (1 + fragmentation)``."""
        return 1.0 - 1.0 / (1.0 + self.fragmentation)


def calibration_dirs() -> tuple[Path, ...]:
    """Where calibrations are read: ``configs/calibration``, then ``$BRIDGEBENCH_CONFIG_DIR/calibration`` (a
    cluster's own calibration, ``bridgebench calibrate --from-runs``, may live with the user's configs)."""
    from bridgebench.paths import config_dirs

    return tuple(d / "calibration" for d in config_dirs())


def path_of(name: str) -> Path | None:
    """The file of calibration ``name`` (the shipped one wins a clash), or None."""
    for d in calibration_dirs():
        if (d / f"{name}.yaml").is_file():
            return d / f"{name}.yaml"
    return None


def sha256(name: str) -> str | None:
    """sha256 of calibration ``name``'s file (None when there is no such file)."""
    import hashlib

    path = path_of(name)
    return hashlib.sha256(path.read_bytes()).hexdigest() if path else None


def names() -> list[str]:
    return sorted({p.stem for d in calibration_dirs() for p in d.glob("*.yaml")})


def load(name: str = "default") -> ModelCalibration:
    """Read ``configs/calibration/<name>.yaml``.

    Raises:
        CalibrationError: unknown name (listing the known ones), a missing node, or a value out of range.
    """
    path = path_of(name) if name and "/" not in name and not name.startswith(".") else None
    if path is None:
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
            fragmentation_typical=float(mem.get("fragmentation_typical", mem["fragmentation"])),
            datasheet_gb_bytes=float(mem.get("datasheet_gb_bytes", 1e9)),
            moe_imbalance=float(mem.get("moe_imbalance", 1.0)),
            source=str(data.get("source", "")),
            raw=data,
        )
    except KeyError as err:
        raise CalibrationError(f"{path}: missing {err.args[0]!r}") from err
    except (TypeError, ValueError, TimeModelError) as err:
        raise CalibrationError(f"{path}: {err}") from err
    frags = (out.fragmentation, out.fragmentation_typical)
    if not all(0.0 <= f < 1.0 for f in frags) or out.fragmentation_typical < out.fragmentation:
        raise CalibrationError(
            f"{path}: memory.fragmentation <= fragmentation_typical must both be in [0, 1), got {frags}"
        )
    if out.other_bytes < 0 or out.moe_imbalance < 1.0 or out.datasheet_gb_bytes <= 0:
        raise CalibrationError(
            f"{path}: memory.other_bytes >= 0, moe_imbalance >= 1 and datasheet_gb_bytes > 0, got "
            f"{out.other_bytes}, {out.moe_imbalance}, {out.datasheet_gb_bytes}"
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
