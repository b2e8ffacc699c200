"""A search space: Hydra overrides (``a=x,y`` sweeps, Hydra's own grammar) and/or a sweep file
(``configs/sweep/<name>.yaml`` or ``$BRIDGEBENCH_CONFIG_DIR/sweep/<name>.yaml``), parsed into fixed overrides and
axes (:func:`parse_space`). Axes over config groups (``optimizer=adamw,muon``, ``recipe=...``) are composed once per
combination; axes over fields vary plain values on top (``bridgebench.sweep.bases``)."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any, Sequence

import yaml

from bridgebench.config.compose import ConfigError, is_group, normalize_overrides
from bridgebench.paths import CONFIG_DIR, config_files
from bridgebench.sweep.keys import AUTO, KEYS

SWEEP_DIR = CONFIG_DIR / "sweep"


class SweepError(ConfigError):
    """A search space that cannot be swept (empty, unknown field, wrong type, non-positive size); nothing is
    written."""


# ---------------------------------------------------------------------------------------------------- space
@dataclass(frozen=True)
class Axis:
    """One swept key and its values (typed as Hydra parses them); ``group`` for a config group (``optimizer``)."""

    key: str
    values: tuple
    group: bool


@dataclass
class Space:
    """A search space: fixed overrides, axes, how many points to plan (``top_k``), where it came from."""

    name: str
    fixed: list[str]
    axes: list[Axis]
    top_k: int = 8
    source: str = "command line"
    description: str = ""

    @property
    def size(self) -> int:
        """Points before any rule: the product of the axes' lengths."""
        return math.prod(len(a.values) for a in self.axes)

    def fingerprint(self) -> str:
        """Hash of the fixed overrides and the axes (a resumed sweep must have the same one)."""
        text = json.dumps([self.fixed, [(a.key, [repr(v) for v in a.values]) for a in self.axes]], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def space_names() -> list[str]:
    """Sweep spaces of the config search path (``configs/sweep``, ``$BRIDGEBENCH_CONFIG_DIR/sweep``)."""
    return sorted(config_files("sweep"))


def _is_group(key: str) -> bool:
    return is_group(key)


def _values_of(key: str, raw: Any) -> tuple:
    """Typed values of one axis: a YAML list as is, a string in Hydra's sweep grammar parsed by Hydra."""
    if isinstance(raw, list):
        return tuple(raw)
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    text = "null" if raw is None else str(raw).lower() if isinstance(raw, bool) else str(raw)
    try:
        ov = OverridesParser.create().parse_override(f"{key}={text}")
    except HydraException as err:
        raise SweepError(f"cannot parse the values of {key!r}: {str(err).splitlines()[0]}") from err
    return tuple(ov.sweep_iterator()) if ov.is_sweep_override() else (ov.value(),)


def parse_space(overrides: Sequence[str], space: str | None = None, *, top_k: int | None = None) -> Space:
    """A :class:`Space` from command-line overrides and an optional ``configs/sweep/<space>.yaml``.

    The file holds ``description``, ``top_k``, ``overrides`` (fixed, e.g. a recipe) and ``space`` (key -> a YAML
    list or a Hydra sweep string such as ``"1,2,4"`` or ``"range(1,9)"``). The command line wins over the file for
    the same key; an experiment's ``hydra.sweeper.params`` add axes too (:func:`compose_bases`).

    Raises:
        SweepError: unknown space name, no axis at all, an axis without values, or an unparsable value.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    file_data: dict[str, Any] = {}
    source = "command line"
    if space:
        path = config_files("sweep").get(space)
        if path is None:
            raise SweepError(f"unknown sweep space {space!r}; known: {space_names()} (configs/sweep/)")
        try:
            file_data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as err:
            raise SweepError(f"bad_yaml: {path} is not valid YAML: {str(err).splitlines()[0]}") from err
        if not isinstance(file_data, dict):
            raise SweepError(f"bad_yaml: {path} must hold a mapping, got {type(file_data).__name__}")
        unknown = set(file_data) - {"description", "top_k", "overrides", "space"}
        if unknown:
            raise SweepError(f"{path}: unknown key(s) {sorted(unknown)}; known: description, top_k, overrides, space")
        source = f"configs/sweep/{space}.yaml" if path.parent == SWEEP_DIR else str(path)
    fixed: dict[str, str] = {}
    axes: dict[str, Axis] = {}
    for line in normalize_overrides([str(o) for o in file_data.get("overrides") or []]):
        fixed[line.split("=", 1)[0].lstrip("+~")] = line
    for key, raw in (file_data.get("space") or {}).items():
        values = _values_of(key, raw)
        axes[key] = Axis(key, values, _is_group(key))
    parser = OverridesParser.create()
    for ov in parser.parse_overrides(normalize_overrides(list(overrides))):
        key = ov.key_or_group.lstrip("+~/")
        if ov.is_sweep_override():
            values = tuple(ov.sweep_iterator())
            if ov.is_delete() or ov.package:
                raise SweepError(f"cannot sweep {ov.input_line!r}: deletions and package overrides are not sweepable")
            axes[key] = Axis(key, values, _is_group(key))
            fixed.pop(key, None)
        elif key in (KEYS["layout"], KEYS["sequence_parallel"]) and str(ov.value()) == AUTO:
            axes[key] = Axis(key, (AUTO,), False)  # derived per point (see enumerate_points)
            fixed.pop(key, None)
        else:
            fixed[key] = ov.input_line
            axes.pop(key, None)
    for axis in axes.values():
        if not axis.values:
            raise SweepError(f"axis {axis.key!r} has no values (empty search space)")
    group_axes = [a for a in axes.values() if a.group]
    for axis in group_axes:
        axes[axis.key] = Axis(axis.key, tuple(str(v) for v in axis.values), True)
    k = top_k if top_k is not None else int(file_data.get("top_k", 8))
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise SweepError(f"top_k must be a non-negative integer, got {k!r}")
    return Space(
        name=space or "adhoc",
        fixed=list(fixed.values()),
        axes=list(axes.values()),
        top_k=k,
        source=source,
        description=str(file_data.get("description", "")),
    )
