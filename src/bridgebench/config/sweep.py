"""The sweep engine: a search space enumerated on plain values, checked by the fast rules, deduplicated, scored by
the memory model and ranked by the time model -- no Hydra compose and no ConfigContainer per point.

A space is Hydra overrides (``a=x,y`` sweeps, Hydra's own grammar) and/or ``configs/sweep/<name>.yaml``
(:func:`parse_space`). Axes over config groups (``optimizer=adamw,muon``, ``recipe=...``, ``precision=...``) are
composed once per combination (a :class:`Base`); axes over fields (``model.tensor_model_parallel_size=1,2,4``,
``num_gpus=128,256``, ``job.layers=1,2``) vary plain values on top of a base. Every field axis is checked once
against the schema (unknown key, wrong type, non-positive size: :class:`SweepError` before any point is made).

Stages (each a function over point rows, plain dicts that become ``points.parquet``):

1. :func:`enumerate_points`: the cartesian product; ``pipeline_model_parallel_layout: auto`` resolved per point
   (:func:`bridgebench.model.layout.balanced_layout`); :func:`bridgebench.config.rules.check` on a
   :class:`~bridgebench.config.rules.Point`; points with the same effective values get the same ``point_id`` (a
   hash of the base config's hash and the swept values, ETP = TP when unset) and are kept once.
2. :func:`score_memory`: :func:`bridgebench.model.memory.estimate_memory` on the busiest rank; points above the
   GPU's HBM less the calibrated margin are pruned.
3. :func:`score_time`: :func:`bridgebench.model.timing.predict_time`; points are ranked by predicted model
   TFLOP/s/GPU (optimizer-step benchmark points, which train nothing, by predicted Muon step time, shortest first).

Point statuses: ``invalid`` (a rule: column ``rule``), ``duplicate``, ``over_memory``, ``ranked``; the launch layer
adds ``planned``, ``plan_failed``, ``submitted`` and ``skipped`` for the top K.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import itertools
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from bridgebench.config import rules
from bridgebench.config.calibration import ModelCalibration
from bridgebench.config.compose import ConfigError, compose, model_spec, normalize_overrides
from bridgebench.config.hashing import config_hash
from bridgebench.config.schema import MB_SECTIONS, START_FIELDS, SectionError, check_sections, start_values
from bridgebench.config.time_knobs import TIME_KEYS, time_knobs
from bridgebench.model import memory as mem
from bridgebench.model import timing
from bridgebench.model.layout import LayoutError, balanced_layout
from bridgebench.model.newton_schulz import NSError, NSPolicy, muon_matrices, ns_flops
from bridgebench.model.optimizer import OptimizerKind
from bridgebench.model.spec import ModelSpec, ModelSpecError
from bridgebench.paths import CONFIG_DIR

SWEEP_DIR = CONFIG_DIR / "sweep"
AUTO = "auto"

#: short column name -> config key of the values every stage reads.
KEYS = {
    "num_gpus": "num_gpus",
    "gbs": "train.global_batch_size",
    "mbs": "train.micro_batch_size",
    "tp": "model.tensor_model_parallel_size",
    "pp": "model.pipeline_model_parallel_size",
    "vp": "model.virtual_pipeline_model_parallel_size",
    "cp": "model.context_parallel_size",
    "ep": "model.expert_model_parallel_size",
    "etp": "model.expert_tensor_parallel_size",
    "sequence_parallel": "model.sequence_parallel",
    "layout": "model.pipeline_model_parallel_layout",
    "first_stage_layers": "model.num_layers_in_first_pipeline_stage",
    "last_stage_layers": "model.num_layers_in_last_pipeline_stage",
    "account_embedding": "model.account_for_embedding_in_pipeline_split",
    "account_loss": "model.account_for_loss_in_pipeline_split",
    "seq_length": "model.seq_length",
    "recompute_granularity": "model.recompute_granularity",
    "recompute_method": "model.recompute_method",
    "recompute_num_layers": "model.recompute_num_layers",
    "recompute_modules": "model.recompute_modules",
    "optimizer": "optimizer.optimizer",
    "use_distributed_optimizer": "optimizer.use_distributed_optimizer",
    "ddp_use_distributed_optimizer": "ddp.use_distributed_optimizer",
    "overlap_param_gather": "ddp.overlap_param_gather",
    "ddp_grad_reduce_in_fp32": "ddp.grad_reduce_in_fp32",
    "mp_grad_reduce_in_fp32": "mixed_precision.grad_reduce_in_fp32",
    "fp8_param_gather": "mixed_precision.fp8_param_gather",
    "reuse_grad_buf": "mixed_precision.reuse_grad_buf_for_mxfp8_param_ag",
    "precision": "precision.name",
    "peak_key": "precision.peak",
    "gpu": "gpu.name",
    "gpus_per_node": "gpu.gpus_per_node",
    "compute_capability": "gpu.compute_capability",
    "nvlink_domain": "gpu.nvlink_domain",
    "min_compute_capability": "precision.min_compute_capability",
    "job_type": "job.type",
    "job_layers": "job.layers",
    "job_experts": "job.experts",
    "ns_steps": "optimizer.muon_num_ns_steps",
    "muon_tp_mode": "optimizer.muon_tp_mode",
    "muon_split_qkv": "optimizer.muon_split_qkv",
    "ns_kernel": "accounting.ns_kernel",
    "flops_formula": "accounting.flops_formula",
    **TIME_KEYS,  # the time model's recipe knobs (bridgebench.config.time_knobs)
}
#: keys whose values must be positive integers (``None`` allowed for the optional ones).
POSITIVE = {
    "num_gpus": False,
    "train.global_batch_size": False,
    "train.micro_batch_size": False,
    "model.tensor_model_parallel_size": False,
    "model.pipeline_model_parallel_size": False,
    "model.context_parallel_size": False,
    "model.expert_model_parallel_size": False,
    "model.seq_length": False,
    "model.virtual_pipeline_model_parallel_size": True,
    "model.expert_tensor_parallel_size": True,
    "model.recompute_num_layers": True,
    "model.num_layers_in_first_pipeline_stage": True,
    "model.num_layers_in_last_pipeline_stage": True,
    "job.layers": False,
    "job.experts": False,
    "job.repeats": False,
}
_ARCH = {f.name for f in dataclasses.fields(ModelSpec)} - {"extra"}
#: env vars the capability rules read (``rules.Point.from_config``), as Point field -> env_vars key.
RULE_ENV = {
    "env_nvlink_domain_size": "NVLINK_DOMAIN_SIZE",
    "env_use_mnnvl": "USE_MNNVL",
    "env_hybrid_ep_ranks_per_nvlink_domain": "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN",
}
_INTERPOLATION = re.compile(r"\$\{([A-Za-z_][\w.]*)\}")


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
    return sorted(p.stem for p in SWEEP_DIR.glob("*.yaml"))


def _is_group(key: str) -> bool:
    return (CONFIG_DIR / key.lstrip("+~/")).is_dir() and "." not in key


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
        path = SWEEP_DIR / f"{space}.yaml"
        if not path.is_file():
            raise SweepError(f"unknown sweep space {space!r}; known: {space_names()} (configs/sweep/)")
        file_data = yaml.safe_load(path.read_text()) or {}
        unknown = set(file_data) - {"description", "top_k", "overrides", "space"}
        if unknown:
            raise SweepError(f"{path}: unknown key(s) {sorted(unknown)}; known: description, top_k, overrides, space")
        source = f"configs/sweep/{space}.yaml"
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


@dataclass
class Base:
    """One combination of the group axes, composed once: its overrides, the schema-checked config, its resolved
    values by dotted key, the model and GPU, and the config hash."""

    index: int
    overrides: list[str]
    cfg: DictConfig
    flat: dict[str, Any]
    spec: ModelSpec
    gpu: timing.GpuFacts
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
            refs = sorted({k for name in RULE_ENV.values() for k in _INTERPOLATION.findall(str(raw.get(name, "")))})
            self._env_cache["refs"] = refs
        key = tuple((k, repr(delta[k])) for k in refs if k in delta)
        if key not in self._env_cache:
            cfg = self.cfg
            if key:
                cfg = copy.deepcopy(self.cfg)
                for k in refs:
                    if k in delta:
                        OmegaConf.update(cfg, k, delta[k], merge=False)
            self._env_cache[key] = {f: rules._env(cfg, name) for f, name in RULE_ENV.items()}
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
            vals = _values_of(key, value)
            space.axes.append(Axis(key, tuple(str(v) for v in vals) if _is_group(key) else vals, _is_group(key)))
    if not space.axes:
        raise SweepError(
            "empty search space: give sweep overrides (e.g. model.tensor_model_parallel_size=1,2,4) or --space NAME "
            f"(known: {space_names()})"
        )
    group_axes = [a for a in space.axes if a.group]
    combos = list(itertools.product(*(a.values for a in group_axes))) if group_axes else [()]
    bases = []
    for i, combo in enumerate(combos):
        choice = {a.key: v for a, v in zip(group_axes, combo)}
        ov = list(space.fixed) + [f"{k}={v}" for k, v in choice.items()]
        cfg = compose(ov)
        plain = OmegaConf.to_container(cfg, resolve=True)
        try:
            spec = model_spec(cfg)
        except ConfigError as err:
            raise SweepError(f"base {' '.join(ov)!r}: {err}") from err
        bases.append(
            Base(
                i,
                ov,
                cfg,
                _flat_config(plain),
                spec,
                timing.GpuFacts.from_mapping(plain["gpu"]),
                config_hash(cfg),
                choice,
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
        0, ov, cfg, _flat_config(plain), model_spec(cfg), timing.GpuFacts.from_mapping(plain["gpu"]), config_hash(cfg)
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


# ---------------------------------------------------------------------------------------------------- points
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


def _arch_spec(base: Base, delta: dict[str, Any], cache: dict) -> ModelSpec:
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


def _rule_point(v: dict[str, Any], spec: ModelSpec, env: dict[str, Any] | None = None) -> rules.Point:
    return rules.Point(
        **(env or {}),
        num_gpus=v["num_gpus"],
        num_layers=spec.num_layers,
        num_attention_heads=spec.num_attention_heads,
        seq_length=v["seq_length"],
        gbs=v["gbs"],
        mbs=v["mbs"],
        gpus_per_node=v["gpus_per_node"],
        tp=v["tp"],
        pp=v["pp"],
        vp=v["vp"],
        cp=v["cp"],
        ep=v["ep"],
        etp=v["etp"],
        sequence_parallel=bool(v["sequence_parallel"]),
        mtp_num_layers=spec.mtp_num_layers,
        num_query_groups=spec.num_query_groups,
        num_moe_experts=spec.num_moe_experts,
        pipeline_model_parallel_layout=v["layout"],
        num_layers_in_first_pipeline_stage=v["first_stage_layers"],
        num_layers_in_last_pipeline_stage=v["last_stage_layers"],
        account_for_embedding_in_pipeline_split=bool(v["account_embedding"]),
        account_for_loss_in_pipeline_split=bool(v["account_loss"]),
        optimizer=v["optimizer"],
        use_distributed_optimizer=bool(v["use_distributed_optimizer"]),
        ddp_use_distributed_optimizer=bool(v["ddp_use_distributed_optimizer"]),
        overlap_param_gather=bool(v["overlap_param_gather"]),
        fp8_param_gather=bool(v["fp8_param_gather"]),
        reuse_grad_buf_for_mxfp8_param_ag=bool(v["reuse_grad_buf"]),
        precision=v["precision"],
        gpu=str(v["gpu"]),
        compute_capability=v["compute_capability"],
        min_compute_capability=v["min_compute_capability"],
        nvlink_domain=v["nvlink_domain"],
    )


def _point_id(base: Base, delta: dict[str, Any], v: dict[str, Any]) -> str:
    """Hash of the base config's hash and the point's swept values, with settings that cannot matter made equal:
    ETP unset = TP (Megatron-Core ``TransformerConfig.__post_init__``), recompute modules only with selective
    recompute, recompute method / layers only with full recompute."""
    canon = {k: (v["etp_effective"] if k == KEYS["etp"] else val) for k, val in delta.items()}
    if v["recompute_granularity"] != "selective":
        canon.pop(KEYS["recompute_modules"], None)
    if v["recompute_granularity"] != "full":
        canon.pop(KEYS["recompute_method"], None)
        canon.pop(KEYS["recompute_num_layers"], None)
    text = base.config_hash + json.dumps(canon, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _row(base: Base, delta: dict[str, Any], v: dict[str, Any]) -> dict[str, Any]:
    tp, pp, cp = v["tp"], v["pp"], v["cp"]
    ok = all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in (v["num_gpus"], tp, pp, cp))
    dp = v["num_gpus"] // (tp * pp * cp) if ok and v["num_gpus"] % (tp * pp * cp) == 0 else None
    mods = v["recompute_modules"]
    return {
        "base": base.index,
        "delta": json.dumps(delta, default=list),
        "base_choices": json.dumps(base.choices),
        "model": base.spec.name,
        "gpu": v["gpu"],
        "precision": v["precision"],
        "optimizer": v["optimizer"],
        "num_gpus": v["num_gpus"],
        "tp": tp,
        "pp": pp,
        "vp": v["vp"],
        "cp": cp,
        "ep": v["ep"],
        "etp": v["etp_effective"],
        "dp": dp,
        "mbs": v["mbs"],
        "gbs": v["gbs"],
        "sequence_parallel": bool(v["sequence_parallel"]),
        "layout": v["layout"],
        "recompute_granularity": v["recompute_granularity"],
        "recompute_modules": ",".join(mods) if mods else None,
        "job_type": v["job_type"],
        "job_layers": v["job_layers"],
        "job_experts": v["job_experts"],
    }


def enumerate_points(
    space: Space, bases: Sequence[Base], progress: Callable[[int, int], None] | None = None
) -> list[dict[str, Any]]:
    """Stage 1: every point of the space as a row, with its rule check and duplicate marking.

    Row keys: ``point_id``, ``base``, ``delta`` (JSON of the swept field values), the effective sizes, ``status``
    (``invalid`` / ``duplicate`` / ``valid``), ``rule`` (the first broken rule's id) and ``reason`` (every broken
    rule's message, or the id of the point it duplicates).
    """
    field_axes = [a for a in space.axes if not a.group]
    combos = list(itertools.product(*(a.values for a in field_axes))) if field_axes else [()]
    total = len(bases) * len(combos)
    seen: dict[str, str] = {}
    out = []
    arch_cache: dict = {}
    done = 0
    for base in bases:
        for combo in combos:
            delta = {a.key: v for a, v in zip(field_axes, combo)}
            spec = _arch_spec(base, delta, arch_cache)
            v = effective(base, delta)
            status, rule, reason = "valid", None, ""
            if isinstance(spec, Exception):
                status, rule, reason = "invalid", "model_spec", str(spec)
                spec = base.spec
            if v["sequence_parallel"] == AUTO:
                sp = isinstance(v["tp"], int) and v["tp"] > 1
                delta = {**delta, KEYS["sequence_parallel"]: sp}
                v["sequence_parallel"] = sp
            if v["layout"] == AUTO:
                try:
                    resolved = balanced_layout(spec.num_layers, v["pp"], v["vp"], spec.mtp_layers)
                except (LayoutError, TypeError) as err:
                    status, rule, reason, resolved = "invalid", "positive_int", str(err), None
                delta = {**delta, KEYS["layout"]: resolved}
                v["layout"] = resolved
            row = _row(base, delta, v)
            row["point_id"] = pid = _point_id(base, delta, v)
            if status == "valid":
                found = rules.check(_rule_point(v, spec, base.rule_env(delta)))
                if found:
                    status, rule, reason = "invalid", found[0].rule, "; ".join(str(f) for f in found)
            if status == "valid" and pid in seen:
                status, reason = "duplicate", f"same effective values as point {seen[pid]}"
            elif status == "valid":
                seen[pid] = pid
            row.update(status=status, rule=rule, reason=reason)
            out.append(row)
            done += 1
            if progress and (done % 512 == 0 or done == total):
                progress(done, total)
    return out


# ---------------------------------------------------------------------------------------------------- stage 2, 3
def memory_config(v: dict[str, Any], calib: ModelCalibration) -> mem.MemoryConfig:
    """The memory model's view of a point's effective values (see :func:`effective`)."""
    granularity = v["recompute_granularity"]
    mods = v["recompute_modules"]
    if granularity == "selective" and mods is None:
        mods = ["core_attn"]  # Megatron-Core TransformerConfig.recompute_modules default
    return mem.MemoryConfig(
        num_gpus=v["num_gpus"],
        mbs=v["mbs"],
        gbs=v["gbs"],
        tp=v["tp"],
        pp=v["pp"],
        vp=v["vp"],
        cp=v["cp"],
        ep=v["ep"],
        etp=v["etp"],
        seq_length=v["seq_length"],
        sequence_parallel=bool(v["sequence_parallel"]),
        pipeline_model_parallel_layout=v["layout"],
        optimizer=v["optimizer"],
        use_distributed_optimizer=bool(v["use_distributed_optimizer"]),
        precision=v["precision"],
        fp8_param_gather=bool(v["fp8_param_gather"]),
        grad_reduce_in_fp32=bool(v["ddp_grad_reduce_in_fp32"] or v["mp_grad_reduce_in_fp32"]),
        recompute_granularity=granularity,
        recompute_method=v["recompute_method"],
        recompute_num_layers=v["recompute_num_layers"],
        recompute_modules=tuple(mods or ()),
        moe_imbalance=calib.moe_imbalance,
        other_bytes=calib.other_bytes,
    )


def time_config(v: dict[str, Any], gpu: timing.GpuFacts) -> timing.TimeConfig:
    """The time model's view of a point's effective values (knobs: :func:`bridgebench.config.time_knobs.time_knobs`)."""
    granularity = v["recompute_granularity"]
    mods = v["recompute_modules"]
    if granularity == "selective" and mods is None:
        mods = ["core_attn"]  # Megatron-Core TransformerConfig.recompute_modules default
    return timing.TimeConfig(
        gpu=gpu,
        peak_key=v["peak_key"],
        num_gpus=v["num_gpus"],
        mbs=v["mbs"],
        gbs=v["gbs"],
        tp=v["tp"],
        pp=v["pp"],
        vp=v["vp"],
        cp=v["cp"],
        ep=v["ep"],
        etp=v["etp"],
        pipeline_model_parallel_layout=v["layout"],
        optimizer=v["optimizer"],
        ns_policy=ns_policy(v),
        flops_formula=v["flops_formula"] or "v2",
        sequence_parallel=bool(v["sequence_parallel"]),
        recompute_granularity=granularity,
        recompute_method=v["recompute_method"],
        recompute_num_layers=v["recompute_num_layers"],
        recompute_modules=tuple(mods or ()),
        **time_knobs(v),
    )


def ns_policy(v: dict[str, Any]) -> NSPolicy:
    """Newton-Schulz policy of a point (``optimizer.muon_*``, ``accounting.ns_kernel``)."""
    return NSPolicy(
        num_ns_steps=int(v["ns_steps"] or 5),
        kernel=v["ns_kernel"] or "gemm",
        tp_mode=v["muon_tp_mode"] or "blockwise",
        layer_wise=OptimizerKind(str(v["optimizer"])).layer_wise,
        split_qkv=True if v["muon_split_qkv"] is None else bool(v["muon_split_qkv"]),
    )


def _point_state(base: Base, row: dict[str, Any], cache: dict) -> tuple[ModelSpec, dict[str, Any]]:
    delta = json.loads(row["delta"])
    spec = _arch_spec(base, delta, cache)
    return (base.spec if isinstance(spec, Exception) else spec), effective(base, delta)


def _optstep_subset(spec: ModelSpec, layers: int, experts: int, split_qkv: bool) -> list:
    """The matrices of the optimizer-step benchmark's subset: the first ``layers`` dense and MoE layers, the first
    ``experts`` routed experts of each MoE layer, no MTP (mirrors ``bridgebench.payloads.optstep.select_matrices``)."""
    pattern = spec.moe_layer_pattern
    chosen = set(
        [i for i, moe in enumerate(pattern) if not moe][:layers] + [i for i, m in enumerate(pattern) if m][:layers]
    )
    out = []
    for m in muon_matrices(spec, split_qkv=split_qkv):
        if m.layer not in chosen:
            continue
        if m.is_expert and int(m.name.rsplit("weight", 1)[1]) >= experts:
            continue
        out.append(m)
    return out


#: bytes per element the optimizer-step benchmark keeps per matrix element: fp32 param, grad, Muon momentum and
#: AdamW's two moments (``bridgebench.payloads.optstep`` steps both optimizers on the same fp32 tensors).
OPTSTEP_BYTES_PER_ELEMENT = 4.0 * 5


def score_memory(
    rows: list[dict[str, Any]],
    bases: Sequence[Base],
    calib: ModelCalibration,
    progress: Callable[[int, int], None] | None = None,
) -> None:
    """Stage 2 (in place): memory per GPU of every ``valid`` row (GB = 1e9 B columns ``mem_*_gb``,
    ``mem_total_gb``, ``hbm_usable_gb``, busiest pipeline rank ``mem_stage``); rows above the usable HBM become
    ``over_memory`` with the numbers in ``reason``."""
    todo = [r for r in rows if r["status"] == "valid"]
    cache: dict = {}
    for i, row in enumerate(todo, 1):
        base = bases[row["base"]]
        spec, v = _point_state(base, row, cache)
        usable = calib.usable_hbm_bytes(base.gpu.hbm_bytes)
        row["hbm_usable_gb"] = usable / 1e9
        if v["job_type"] == "optstep":
            mats = _optstep_subset(spec, v["job_layers"], v["job_experts"], ns_policy(v).split_qkv)
            numel = sum(m.rows * m.cols for m in mats)
            biggest = max((m.rows * m.cols for m in mats), default=0)
            total = OPTSTEP_BYTES_PER_ELEMENT * numel + 4.0 * 3 * biggest + calib.other_bytes  # + NS workspace
            row.update(mem_total_gb=total / 1e9, mem_weights_gb=4.0 * numel / 1e9)
        else:
            try:
                b = mem.estimate_memory(spec, memory_config(v, calib))
            except (mem.MemoryModelError, LayoutError) as err:
                row.update(status="invalid", rule="memory_model", reason=str(err))
                continue
            total = b.total
            row.update(
                mem_weights_gb=b.weights / 1e9,
                mem_grads_gb=b.grads / 1e9,
                mem_optimizer_gb=b.optimizer_state / 1e9,
                mem_activations_gb=b.activations / 1e9,
                mem_logits_gb=b.logits / 1e9,
                mem_other_gb=b.other / 1e9,
                mem_total_gb=total / 1e9,
                mem_stage=b.stage,
            )
        if total > usable:
            row["status"] = "over_memory"
            row["rule"] = "memory"
            row["reason"] = (
                f"predicted {total / 1e9:.1f} GB per GPU > {usable / 1e9:.1f} GB usable "
                f"({base.gpu.hbm_bytes / 1e9:.0f} GB HBM x (1 - margin {calib.hbm_margin:g}))"
            )
        else:
            row["status"] = "fits"
        if progress and (i % 256 == 0 or i == len(todo)):
            progress(i, len(todo))


def score_time(
    rows: list[dict[str, Any]],
    bases: Sequence[Base],
    calib: ModelCalibration,
    progress: Callable[[int, int], None] | None = None,
) -> None:
    """Stage 3 (in place): predicted step time of every ``fits`` row (columns ``step_time_s``, ``tflops_per_gpu``,
    ``t_*_s`` terms, ``efficiency``), then ``rank`` (1 = best; equal predictions: less memory first) over them;
    status ``ranked``. ``over_memory`` rows are timed too (for the plot) but stay pruned and unranked."""
    todo = [r for r in rows if r["status"] in ("fits", "over_memory")]
    cache: dict = {}
    for i, row in enumerate(todo, 1):
        base = bases[row["base"]]
        spec, v = _point_state(base, row, cache)
        try:
            if v["job_type"] == "optstep":
                mats = _optstep_subset(spec, v["job_layers"], v["job_experts"], ns_policy(v).split_qkv)
                pol = ns_policy(v)
                flops = sum(ns_flops(m.rows, m.cols, pol.num_ns_steps, pol.kernel) for m in mats)
                rate = base.gpu.peak("bf16") * calib.time.ns_efficiency
                t = flops / rate + calib.time.kappa * len(mats)
                row.update(step_time_s=t, t_ns_s=flops / rate, t_per_matrix_s=calib.time.kappa * len(mats))
                row["tflops_per_gpu"] = flops / t / 1e12
                row["score"] = -t
            else:
                b = timing.predict_time(spec, time_config(v, base.gpu), calib.time)
                row.update({f"t_{k}_s": val for k, val in b.terms.items()})  # every term, seconds per step
                row.update(
                    step_time_s=b.total,
                    tflops_per_gpu=b.tflops_per_gpu,
                    t_compute_s=b.compute,
                    t_recompute_s=b.recompute,
                    t_a2a_s=b.a2a,
                    t_bubble_s=b.bubble,
                    t_overhead_s=b.overhead,
                    t_optimizer_s=b.optimizer,
                    t_ns_s=b.ns,
                    t_per_matrix_s=b.per_matrix,
                    t_allgather_s=b.allgather,
                    efficiency=b.efficiency,
                    efficiency_source=b.efficiency_source,
                    band_pct=b.band_pct,
                    release=b.release,
                    ep_scale_out=b.ep_scale_out,
                )
                row["score"] = b.tflops_per_gpu
        except (timing.TimeModelError, NSError, LayoutError) as err:
            if row["status"] == "fits":
                row.update(status="invalid", rule="time_model", reason=str(err))
            continue
        if row["status"] == "fits":
            row["status"] = "ranked"
        if progress and (i % 256 == 0 or i == len(todo)):
            progress(i, len(todo))
    ranked = sorted((r for r in rows if r["status"] == "ranked"), key=lambda r: (-r["score"], r["mem_total_gb"]))
    for i, r in enumerate(ranked, 1):
        r["rank"] = i


def summarize(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Counts per status and per pruning rule."""
    by_status: dict[str, int] = {}
    by_rule: dict[str, int] = {}
    for r in rows:
        by_status[r["status"]] = by_status.get(r["status"], 0) + 1
        if r.get("rule"):
            by_rule[r["rule"]] = by_rule.get(r["rule"], 0) + 1
    return {"by_status": by_status, "by_rule": dict(sorted(by_rule.items(), key=lambda x: -x[1]))}
