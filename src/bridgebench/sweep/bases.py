"""Bases: one composed config per combination of a space's group axes (Hydra composes once per combination, never
per point), the values every stage reads (:func:`effective`), and the overrides that compose one point
(:func:`point_overrides`)."""

from __future__ import annotations

import copy
import dataclasses
import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from bridgebench.config import rules
from bridgebench.config.bounds import BoundsError, check_value
from bridgebench.config.compose import ConfigError, compose, is_group, model_spec, normalize_overrides
from bridgebench.config.hashing import config_hash
from bridgebench.config.schema import MB_SECTIONS, START_FIELDS, SectionError, check_sections, start_values
from bridgebench.model.spec import ModelSpec, ModelSpecError
from bridgebench.model.steptime.config import GpuFacts
from bridgebench.sweep.keys import AUTO, INTERPOLATION, KEYS, POSITIVE, RULE_ENV
from bridgebench.sweep.space import Axis, Space, SweepError, space_names, values_of

_ARCH = {f.name for f in dataclasses.fields(ModelSpec)} - {"extra"}


# ---------------------------------------------------------------------------------------------------- bases
def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(node, dict):
        for k, v in node.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, dict) and v:
                out.update(_flatten(v, key))
            else:
                out[key] = v
    return out


def _flat_config(plain: dict[str, Any]) -> dict[str, Any]:
    """A composed config's resolved values by dotted key, with the Megatron-Bridge fields the models read that the
    config leaves out (:data:`bridgebench.config.schema.START_FIELDS`) at the value the built ``ConfigContainer``
    keeps: its base recipe's or mixed-precision recipe's (:func:`bridgebench.config.schema.start_values`)."""
    flat = _flatten(plain)
    absent = [k for k in START_FIELDS if k not in flat]
    if absent:
        try:
            starts = start_values(str(plain["model"]["name"]), str(plain["precision"]["mixed_precision_recipe"]))
        except SectionError as err:
            raise ConfigError(str(err)) from err
        flat.update({k: starts[k] for k in absent})
    return flat


@dataclass(kw_only=True)
class Base:
    """One combination of the group axes, composed once: its overrides, the schema-checked config, its resolved
    values by dotted key, the model and GPU, and the config hash."""

    index: int
    overrides: list[str]
    cfg: DictConfig
    flat: dict[str, Any]
    spec: ModelSpec
    gpu: GpuFacts
    config_hash: str
    choices: dict[str, str] = field(default_factory=dict)
    _env_cache: dict = field(default_factory=dict, repr=False)

    def rule_env(self, delta: dict[str, Any]) -> dict[str, Any]:
        """The env values the capability rules read, as the point's composed config would resolve them: the base's,
        or -- when an env var interpolates a swept key (``NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN`` follows EP) --
        resolved again on a copy of the base config with those keys set (cached per combination)."""
        refs = self._env_cache.get("refs")
        if refs is None:
            env = self.cfg.get("env_vars") or {}
            raw = OmegaConf.to_container(env, resolve=False) if env else {}
            refs = sorted({k for name in RULE_ENV.values() for k in INTERPOLATION.findall(str(raw.get(name, "")))})
            self._env_cache["refs"] = refs
        key = tuple((k, repr(delta[k])) for k in refs if k in delta)
        if key not in self._env_cache:
            cfg = self.cfg
            if key:
                cfg = copy.deepcopy(self.cfg)
                for k in refs:
                    if k in delta:
                        OmegaConf.update(cfg, k, delta[k], merge=False)
            self._env_cache[key] = {f: rules.env_value(cfg, name) for f, name in RULE_ENV.items()}
        return self._env_cache[key]


def compose_bases(space: Space, progress: Callable[[int, int], None] | None = None) -> list[Base]:
    """Compose one config per combination of the group axes (an experiment's ``hydra.sweeper.params`` become axes
    unless the space sets them), then check every field axis against the schema.

    Raises:
        SweepError: no axis at all (empty search space), an unknown field, a value of the wrong type, a
            non-positive size.
        bridgebench.config.compose.ConfigError: bad fixed overrides.
    """
    head = compose(space.fixed, return_hydra_config=True)
    params = head.hydra.sweeper.get("params")
    params = OmegaConf.to_container(params, resolve=False) if params else {}
    given = {a.key for a in space.axes} | {o.split("=", 1)[0].lstrip("+~") for o in space.fixed}
    for key, value in params.items():
        if key not in given:
            vals = values_of(key, value)
            space.axes.append(
                Axis(key=key, values=tuple(str(v) for v in vals) if is_group(key) else vals, group=is_group(key))
            )
    if not space.axes:
        raise SweepError(
            "empty search space: give sweep overrides (e.g. model.tensor_model_parallel_size=1,2,4) or --space NAME "
            f"(known: {space_names()})"
        )
    group_axes = [a for a in space.axes if a.group]
    if space.points is not None:  # a list of points: only the group combinations the points use
        keys = [a.key for a in group_axes]
        combos = [dict(c) for c in dict.fromkeys(tuple((k, p[k]) for k in keys if k in p) for p in space.points)]
    else:
        combos = [
            {a.key: v for a, v in zip(group_axes, combo)}
            for combo in (itertools.product(*(a.values for a in group_axes)) if group_axes else [()])
        ]
    bases = []
    for i, choice in enumerate(combos):
        ov = list(space.fixed) + [f"{k}={v}" for k, v in choice.items()]
        cfg = compose(ov)
        plain = OmegaConf.to_container(cfg, resolve=True)
        try:
            spec = model_spec(cfg)
        except ConfigError as err:
            raise SweepError(f"base {' '.join(ov)!r}: {err}") from err
        bases.append(
            Base(
                index=i,
                overrides=ov,
                cfg=cfg,
                flat=_flat_config(plain),
                spec=spec,
                gpu=GpuFacts.from_mapping(plain["gpu"]),
                config_hash=config_hash(cfg),
                choices=choice,
            )
        )
        if progress:
            progress(i + 1, len(combos))
    _check_field_axes(space, bases[0])
    return bases


def base_of(overrides: Sequence[str]) -> Base:
    """One composed point (no sweep) as a :class:`Base`, for commands that model a single configuration.

    Raises:
        bridgebench.config.compose.ConfigError: bad overrides, or an override that sweeps values.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    ov = normalize_overrides(list(overrides))
    if any(o.is_sweep_override() for o in OverridesParser.create().parse_overrides(ov)):
        raise ConfigError("an override sweeps values (a=x,y): this command models one configuration")
    cfg = compose(ov)
    plain = OmegaConf.to_container(cfg, resolve=True)
    return Base(
        index=0,
        overrides=ov,
        cfg=cfg,
        flat=_flat_config(plain),
        spec=model_spec(cfg),
        gpu=GpuFacts.from_mapping(plain["gpu"]),
        config_hash=config_hash(cfg),
    )


def _check_field_axes(space: Space, base: Base) -> None:
    """Every field axis names a key of the composed config -- in a Megatron-Bridge section (open maps), a field of
    that section (:func:`bridgebench.config.schema.check_sections`) -- and each value fits its type."""
    probe = copy.deepcopy(base.cfg)
    for axis in space.axes:
        if axis.group:
            continue
        section, _, name = axis.key.partition(".")
        mb_field = section in MB_SECTIONS and name and "." not in name
        if mb_field:
            try:
                check_sections({section: {name: axis.values[0]}})
            except SectionError as err:
                if "is not a field" in str(err):
                    raise SweepError(f"unknown field {axis.key!r}: {err}") from err
        elif axis.key not in base.flat and OmegaConf.select(base.cfg, axis.key, default="__missing__") == "__missing__":
            raise SweepError(f"unknown field {axis.key!r}: not a key of the composed config (check the spelling)")
        for value in axis.values:
            if axis.key in POSITIVE:
                optional = POSITIVE[axis.key]
                if not (value is None and optional) and (
                    isinstance(value, bool) or not isinstance(value, int) or value < 1
                ):
                    raise SweepError(
                        f"positive_int: {axis.key} must be a positive integer{' or null' if optional else ''}, "
                        f"got {value!r} in the space"
                    )
            try:  # sizes under their stated caps before any point is built (config/bounds.py)
                check_value(axis.key, value)
            except BoundsError as err:
                raise SweepError(str(err)) from None
            if axis.key in (KEYS["layout"], KEYS["sequence_parallel"]) and value == AUTO:
                continue
            try:
                if mb_field:  # open map in the Hydra schema: the declared type or Megatron-Bridge's field type
                    check_sections({section: {name: value}})
                else:
                    OmegaConf.update(probe, axis.key, value, merge=False)
            except (OmegaConfBaseException, ValueError) as err:
                msg = str(err).splitlines()[0]
                raise SweepError(f"{axis.key}={value!r} does not fit the schema: {msg}") from err


def format_value(value: Any) -> str:
    """A plain value in Hydra's override grammar (strings single-quoted, lists in brackets)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    text = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{text}'"


def point_overrides(base: Base, delta: dict[str, Any]) -> list[str]:
    """The Hydra overrides that compose a point: the base's, then one ``key=value`` per swept field (``+key=value``
    for a Megatron-Bridge field the base config leaves out, which Hydra only adds with ``+``)."""
    missing = "__missing__"
    return list(base.overrides) + [
        f"{'+' if OmegaConf.select(base.cfg, k, default=missing) == missing else ''}{k}={format_value(v)}"
        for k, v in delta.items()
    ]


def effective(base: Base, delta: dict[str, Any]) -> dict[str, Any]:
    """Short-name values (:data:`KEYS`) of a point: its swept fields over the base."""
    flat = base.flat
    out = {short: delta[key] if key in delta else flat.get(key) for short, key in KEYS.items()}
    if out["etp"] is None:
        out["etp_effective"] = out["tp"]
    else:
        out["etp_effective"] = out["etp"]
    return out


def arch_spec(base: Base, delta: dict[str, Any], cache: dict) -> ModelSpec:
    arch = {k[6:]: v for k, v in delta.items() if k.startswith("model.") and k[6:] in _ARCH}
    if not arch:
        return base.spec
    key = (base.index, tuple(sorted((k, repr(v)) for k, v in arch.items())))
    if key not in cache:
        data = {k[6:]: v for k, v in base.flat.items() if k.startswith("model.") and k[6:] in _ARCH}
        data.update(arch)
        for k in ("moe_layer_freq",):
            if k in data and isinstance(data[k], tuple):
                data[k] = list(data[k])
        try:
            cache[key] = ModelSpec.from_mapping(data)
        except (ModelSpecError, TypeError) as err:
            cache[key] = err
    return cache[key]
