"""A search space: Hydra overrides (``a=x,y`` sweeps, Hydra's own grammar) and/or a sweep file
(``configs/sweep/<name>.yaml`` or ``$BRIDGEBENCH_CONFIG_DIR/sweep/<name>.yaml``), parsed into fixed overrides and
axes (:func:`parse_space`) -- a product of axes -- or into a list of points (``points:``, each a mapping of keys to
values: exactly those configurations, e.g. the rows of a published ablation). Axes over config groups
(``optimizer=adamw,muon``, ``recipe=...``) are composed once per combination; axes over fields vary plain values on
top (``bridgebench.sweep.bases``)."""

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


#: most points a search space may hold (rule ``sweep_space_cap``): counted from the axes' lengths before any value
#: list or point is built. Every stage keeps its point rows in memory: measured peak RSS of ``bridgebench sweep
#: --space kimi_k2_256 --top-k 0`` is 549 MB for its 30,720 points and 317 MB for 7,680 (TP fixed), about 10 kB per
#: point over a ~240 MB base, so a space at the cap stays within about 2.3 GB.
MAX_SWEEP_POINTS = 200_000


def _sweep_length(ov: Any) -> int | None:
    """Values a Hydra sweep override will give, without building them: a ``range(start, stop, step)`` by
    arithmetic, a choice list by its length; None when Hydra's sweep is of another kind."""
    from hydra.core.override_parser.types import ChoiceSweep, RangeSweep

    value = ov.value()
    if isinstance(value, RangeSweep):
        start, stop, step = value.start, value.stop, value.step or 1
        if start is None or stop is None:
            return None
        return max(0, math.ceil((stop - start) / step))
    if isinstance(value, ChoiceSweep):
        return len(value.list)
    return None


def check_size(count: int, what: str) -> None:
    """Refuse a space (or one axis of it) of more than :data:`MAX_SWEEP_POINTS` points (rule ``sweep_space_cap``).

    Raises:
        SweepError: naming the count, the cap and what to do.
    """
    if count > MAX_SWEEP_POINTS:
        raise SweepError(
            f"sweep_space_cap: {what} has {count:,} points, more than the {MAX_SWEEP_POINTS:,} a sweep may hold "
            "(every stage keeps its points in memory); fix more keys, or sweep in parts (e.g. one optimizer or "
            "GPU count at a time)"
        )


class SweepError(ConfigError):
    """A search space that cannot be swept (empty, unknown field, wrong type, non-positive size); nothing is
    written."""


# ---------------------------------------------------------------------------------------------------- space
@dataclass(frozen=True, kw_only=True)
class Axis:
    """One swept key and its values (typed as Hydra parses them); ``group`` for a config group (``optimizer``)."""

    key: str
    values: tuple
    group: bool


@dataclass(kw_only=True)
class Space:
    """A search space: fixed overrides, axes, how many points to plan (``top_k``), where it came from."""

    name: str
    fixed: list[str]
    axes: list[Axis]
    top_k: int = 8
    source: str = "command line"
    description: str = ""
    #: an explicit list of points (``points:`` in a sweep file): key -> value per point, group keys allowed; the
    #: axes then hold each key's distinct values (for the schema checks) and are not multiplied
    points: list[dict[str, Any]] | None = None

    @property
    def size(self) -> int:
        """Points before any rule: the product of the axes' lengths, or the number of listed points."""
        if self.points is not None:
            return len(self.points)
        return math.prod(len(a.values) for a in self.axes)

    def fingerprint(self) -> str:
        """Hash of the fixed overrides and the axes or points (a resumed sweep must have the same one)."""
        listed = (
            [[(k, repr(v)) for k, v in sorted(p.items())] for p in self.points] if self.points is not None else None
        )
        text = json.dumps(
            [self.fixed, [(a.key, [repr(v) for v in a.values]) for a in self.axes]] + ([listed] if listed else []),
            sort_keys=True,
        )
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def space_names() -> list[str]:
    """Sweep spaces of the config search path (``configs/sweep``, ``$BRIDGEBENCH_CONFIG_DIR/sweep``)."""
    return sorted(config_files("sweep"))


def _is_group(key: str) -> bool:
    return is_group(key)


def values_of(key: str, raw: Any) -> tuple:
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
    if ov.is_sweep_override() and (n := _sweep_length(ov)) is not None:
        check_size(n, f"axis {key}")
    return tuple(ov.sweep_iterator()) if ov.is_sweep_override() else (ov.value(),)


def parse_space(overrides: Sequence[str], space: str | None = None, *, top_k: int | None = None) -> Space:
    """A :class:`Space` from command-line overrides and an optional ``configs/sweep/<space>.yaml``.

    The file holds ``description``, ``top_k``, ``overrides`` (fixed, e.g. a recipe) and ``space`` (key -> a YAML
    list or a Hydra sweep string such as ``"1,2,4"`` or ``"range(1,9)"``). The command line wins over the file for
    the same key; an experiment's ``hydra.sweeper.params`` add axes too (:func:`compose_bases`).

    Raises:
        SweepError: unknown space name, no axis at all, an axis without values, or an unparsable value.
    """
    file_data, source, path = _space_file(space) if space else ({}, "command line", "")
    fixed: dict[str, str] = {}
    axes: dict[str, Axis] = {}
    for line in normalize_overrides([str(o) for o in file_data.get("overrides") or []]):
        fixed[line.split("=", 1)[0].lstrip("+~")] = line
    for key, raw in (file_data.get("space") or {}).items():
        values = values_of(key, raw)
        axes[key] = Axis(key=key, values=values, group=_is_group(key))
    points = _points_of(file_data.get("points"), path) if space and "points" in file_data else None
    _apply_overrides(overrides, fixed, axes, points, space)
    if points is not None:
        for key in dict.fromkeys(k for p in points for k in p):
            distinct = list(dict.fromkeys(repr(p[key]) for p in points if key in p))
            values = tuple(next(p[key] for p in points if key in p and repr(p[key]) == d) for d in distinct)
            axes[key] = Axis(key=key, values=values, group=_is_group(key))
    for axis in axes.values():
        if not axis.values:
            raise SweepError(f"axis {axis.key!r} has no values (empty search space)")
    if points is None:  # the product of the axes, counted before any point is built
        check_size(math.prod(len(a.values) for a in axes.values()), "the search space")
    else:
        check_size(len(points), "the list of points")
    group_axes = [a for a in axes.values() if a.group]
    for axis in group_axes:
        axes[axis.key] = Axis(key=axis.key, values=tuple(str(v) for v in axis.values), group=True)
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
        points=points,
    )


def _space_file(space: str) -> tuple[dict[str, Any], str, str]:
    """The mapping of ``configs/sweep/<space>.yaml`` (from the config search path), its source for the output
    (relative when under ``configs/sweep``) and its path.

    Raises:
        SweepError: unknown space, not YAML, not a mapping, an unknown key, both ``space:`` and ``points:``.
    """
    path = config_files("sweep").get(space)
    if path is None:
        raise SweepError(f"unknown sweep space {space!r}; known: {space_names()} (configs/sweep/)")
    try:
        file_data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise SweepError(f"bad_yaml: {path} is not valid YAML: {str(err).splitlines()[0]}") from err
    if not isinstance(file_data, dict):
        raise SweepError(f"bad_yaml: {path} must hold a mapping, got {type(file_data).__name__}")
    unknown = set(file_data) - {"description", "top_k", "overrides", "space", "points"}
    if unknown:
        raise SweepError(
            f"{path}: unknown key(s) {sorted(unknown)}; known: description, top_k, overrides, space, points"
        )
    if file_data.get("points") is not None and file_data.get("space"):
        raise SweepError(
            f"sweep_points_or_axes: {path} has both `space:` (a product of axes) and `points:` (a list); "
            "give one of them"
        )
    return file_data, f"configs/sweep/{space}.yaml" if path.parent == SWEEP_DIR else str(path), str(path)


def _apply_overrides(
    overrides: Sequence[str],
    fixed: dict[str, str],
    axes: dict[str, Axis],
    points: list[dict[str, Any]] | None,
    space: str | None,
) -> None:
    """Command-line overrides into ``fixed`` and ``axes`` (the command line wins over the file for the same key): a
    sweep (``a=1,2``) is an axis, ``auto`` for the layout or sequence parallelism an axis derived per point, any
    other a fixed override.

    Raises:
        SweepError: a sweep or a key of the points given beside a space of points; a swept deletion or package
            override.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    for ov in parser.parse_overrides(normalize_overrides(list(overrides))):
        key = ov.key_or_group.lstrip("+~/")
        if ov.is_sweep_override() and points is not None:
            raise SweepError(
                f"sweep_points_or_axes: {ov.input_line!r} sweeps values, but space {space!r} is a list of points; "
                "add the values to its points instead"
            )
        if points is not None and any(key in p for p in points):
            raise SweepError(f"sweep_points_or_axes: {key!r} is set by the points of space {space!r}")
        if ov.is_sweep_override():
            if (n := _sweep_length(ov)) is not None:
                check_size(n, f"axis {key}")
            values = tuple(ov.sweep_iterator())
            if ov.is_delete() or ov.package:
                raise SweepError(f"cannot sweep {ov.input_line!r}: deletions and package overrides are not sweepable")
            axes[key] = Axis(key=key, values=values, group=_is_group(key))
            fixed.pop(key, None)
        elif key in (KEYS["layout"], KEYS["sequence_parallel"]) and str(ov.value()) == AUTO:
            axes[key] = Axis(key=key, values=(AUTO,), group=False)  # derived per point (see enumerate_points)
            fixed.pop(key, None)
        else:
            fixed[key] = ov.input_line
            axes.pop(key, None)


def _points_of(raw: Any, path: str) -> list[dict[str, Any]]:
    """The ``points:`` of a sweep file: a non-empty list of non-empty mappings from a config key (a field such as
    ``model.tensor_model_parallel_size`` or a group such as ``precision``) to one plain value; group values become
    strings (option names), as on an axis.

    Raises:
        SweepError: (rule ``sweep_points``) not a list, an empty list, an entry that is not a mapping or is empty, a
            value that is itself a sweep (a list given for a key that takes a scalar is passed on to the schema
            check), or the same point twice.
    """
    if not isinstance(raw, list) or not raw:
        raise SweepError(f"sweep_points: {path}: `points:` must be a non-empty list of mappings, got {raw!r}")
    out: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(raw, 1):
        if not isinstance(entry, dict) or not entry:
            raise SweepError(
                f"sweep_points: {path}: point {i} must be a non-empty mapping of key: value, got {entry!r}"
            )
        point = {}
        for key, value in entry.items():
            key = str(key).lstrip("+~")
            point[key] = str(value) if _is_group(key) else value
        ident = json.dumps(sorted((k, repr(v)) for k, v in point.items()))
        if ident in seen:
            raise SweepError(f"sweep_points: {path}: point {i} repeats point {seen[ident]} ({entry})")
        seen[ident] = i
        out.append(point)
    return out
