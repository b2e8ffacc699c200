"""Bounds on what a user may hand bridgebench: config files and the values in them, checked before anything is
built or allocated.

Three rules (table: :data:`bridgebench.config.rules.RULES`; explanations: docs/rules.md):

* ``yaml_bounds`` -- a user config file (``$BRIDGEBENCH_CONFIG_DIR/<group>/*.yaml``) is at most
  :data:`MAX_CONFIG_BYTES` and expands to at most :data:`MAX_YAML_NODES` YAML nodes with its aliases followed
  (:func:`check_yaml_file`): the "billion laughs" file -- nine anchors each aliasing the previous one nine times, a
  few hundred bytes that expand to 10^9 nodes -- is refused in milliseconds from PyYAML's node graph
  (``yaml.compose`` shares an aliased node instead of copying it, so counting is linear in the file), before Hydra,
  OmegaConf or ``yaml.safe_load`` expand it;
* ``config_name_confined`` -- an option name is a plain file name of its group (:func:`check_option_name`: no
  ``/``, no ``..``: ``+model@pkg=../..`` is refused), and a user config file or group folder is not a symlink leading
  out of the user config folder (:func:`check_confined`);
* ``config_range`` -- the model, GPU and cluster sections and the run's sizes are validated by pydantic models
  (:func:`check_ranges`) with ranges: sizes positive and below stated caps (so ``model.num_layers=1e10`` is refused
  before a per-layer list is built), divisibility Megatron-Core relies on (``hidden_size % num_attention_heads`` when
  ``kv_channels`` is unset: megatron/core/transformer/transformer_config.py ``__post_init__`` sets
  ``kv_channels = hidden_size // num_attention_heads``; ``num_attention_heads % num_query_groups``), positive peaks
  and bandwidths (a negative peak would give a negative step time).

The caps are far above any published model or machine (the largest shipped model, Kimi K2: 61 layers, hidden 7168,
384 experts; NVIDIA's largest published run: 2,048 GPUs) and low enough that the per-layer, per-expert and per-GPU
lists bridgebench builds stay small.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Annotated, Any, Mapping

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from bridgebench.errors import BridgebenchError

#: largest user config file read, bytes (the largest shipped config is ~6 kB)
MAX_CONFIG_BYTES = 1 << 20
#: most YAML nodes a user config file may expand to, aliases followed (the largest shipped one has a few hundred)
MAX_YAML_NODES = 100_000

#: stated caps of the run's sizes (``config_range``)
MAX_LAYERS = 4096
MAX_HIDDEN = 1 << 20
MAX_HEADS = 1 << 14
MAX_EXPERTS = 1 << 16
MAX_VOCAB = 1 << 24
MAX_SEQ = 1 << 24
MAX_GPUS = 1 << 20
MAX_BATCH = 1 << 30

#: an option name: a file name of its group, nothing that walks the file system
_OPTION = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")


class BoundsError(BridgebenchError):
    """A config file or value outside bridgebench's bounds; the message names the rule, the file or key and the
    bound."""


# ---------------------------------------------------------------------------------------------------- YAML files
def _expanded_nodes(node: yaml.Node, memo: dict[int, int], limit: int) -> int:
    """Nodes ``node`` stands for with aliases followed (memoized per node: linear in the file); stops counting past
    ``limit``."""
    key = id(node)
    if key in memo:
        return memo[key]
    memo[key] = limit + 1  # a recursive alias (a node inside itself) counts as over the limit
    total = 1
    if isinstance(node, yaml.SequenceNode):
        for child in node.value:
            total += _expanded_nodes(child, memo, limit)
            if total > limit:
                break
    elif isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            total += _expanded_nodes(k, memo, limit) + _expanded_nodes(v, memo, limit)
            if total > limit:
                break
    memo[key] = total
    return total


def check_yaml_file(path: str | os.PathLike[str]) -> None:
    """Refuse a config file larger than :data:`MAX_CONFIG_BYTES` or expanding to more than :data:`MAX_YAML_NODES`
    nodes (rule ``yaml_bounds``). A file that is not YAML passes (the reader that loads it names the YAML error).

    Raises:
        BoundsError: naming the rule, the file and the bound.
    """
    p = Path(path)
    size = p.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise BoundsError(
            f"yaml_bounds: {p} is {size:,} bytes; a config file is at most {MAX_CONFIG_BYTES:,} bytes: not read"
        )
    try:
        with p.open("rb") as f:
            root = yaml.compose(f, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return
    if root is None:
        return
    n = _expanded_nodes(root, {}, MAX_YAML_NODES)
    if n > MAX_YAML_NODES:
        raise BoundsError(
            f"yaml_bounds: {p} expands to more than {MAX_YAML_NODES:,} YAML nodes once its aliases (*name) are "
            "followed (a file of nested aliases, 'billion laughs'); a config file needs no such thing: not read"
        )


# ----------------------------------------------------------------------------------------------- names and links
def check_option_name(group: str, value: str) -> None:
    """An option of a config group is a plain file name (rule ``config_name_confined``).

    Raises:
        BoundsError: a name with ``/``, ``..`` or other characters that would leave the group's folder.
    """
    if not _OPTION.match(value) or ".." in value:
        raise BoundsError(
            f"config_name_confined: {group}={value!r} is not an option name of group {group}: an option is a file "
            f"name of configs/{group}/ (letters, digits, _ . -; no '/' or '..')"
        )


def check_confined(path: Path, root: Path) -> None:
    """``path`` (a user config file or group folder) resolves inside ``root`` (rule ``config_name_confined``).

    Raises:
        BoundsError: a symlink leading out of ``root``, naming where it leads.
    """
    real, top = os.path.realpath(path), os.path.realpath(root)
    if not (real == top or real.startswith(top + os.sep)):
        raise BoundsError(
            f"config_name_confined: {path} leads out of the user config folder {root} (to {real}); copy the file "
            "into the folder instead of linking it"
        )


# ------------------------------------------------------------------------------------------------------ ranges
#: positive integers under each stated cap
Layers = Annotated[int, Field(gt=0, le=MAX_LAYERS)]
Hidden = Annotated[int, Field(gt=0, le=MAX_HIDDEN)]
Ffn = Annotated[int, Field(gt=0, le=MAX_HIDDEN * 8)]
Heads = Annotated[int, Field(gt=0, le=MAX_HEADS)]
Experts = Annotated[int, Field(gt=0, le=MAX_EXPERTS)]
Vocab = Annotated[int, Field(gt=0, le=MAX_VOCAB)]
Seq = Annotated[int, Field(gt=0, le=MAX_SEQ)]
Gpus = Annotated[int, Field(gt=0, le=MAX_GPUS)]
Batch = Annotated[int, Field(gt=0, le=MAX_BATCH)]
PerNode = Annotated[int, Field(gt=0, le=1024)]
Mib = Annotated[int, Field(gt=0, le=1 << 30)]
PosFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class _Section(BaseModel):
    """A config section's bounds; every field optional (the Hydra schema requires them; a field holding a resolver
    call is left out rather than resolved)."""

    model_config = ConfigDict(extra="allow")


class ModelBounds(_Section):
    """``model``: architecture sizes (ModelSpec) and parallel sizes (Megatron-Core ModelParallelConfig)."""

    num_layers: Layers | None = None
    hidden_size: Hidden | None = None
    ffn_hidden_size: Ffn | None = None
    num_attention_heads: Heads | None = None
    vocab_size: Vocab | None = None
    seq_length: Seq | None = None
    num_query_groups: Heads | None = None
    kv_channels: Hidden | None = None
    num_moe_experts: Experts | None = None
    moe_ffn_hidden_size: Ffn | None = None
    moe_shared_expert_intermediate_size: Ffn | None = None
    moe_router_topk: Experts = 2
    mtp_num_layers: Annotated[int, Field(ge=0, le=MAX_LAYERS)] | None = None
    make_vocab_size_divisible_by: Vocab = 128
    tensor_model_parallel_size: Gpus = 1
    pipeline_model_parallel_size: Layers = 1
    virtual_pipeline_model_parallel_size: Layers | None = None
    context_parallel_size: Gpus = 1
    expert_model_parallel_size: Experts = 1
    expert_tensor_parallel_size: Gpus | None = None

    @model_validator(mode="after")
    def _divisible(self) -> ModelBounds:
        heads, groups = self.num_attention_heads, self.num_query_groups or self.num_attention_heads
        if heads is None or self.hidden_size is None:  # not given here (a resolver call): judged elsewhere
            return self
        if self.kv_channels is None and self.hidden_size % heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be divisible by num_attention_heads ({heads}) when "
                "kv_channels is not set (Megatron-Core sets kv_channels = hidden_size // num_attention_heads)"
            )
        if groups is not None and heads % groups:
            raise ValueError(f"num_attention_heads ({heads}) must be divisible by num_query_groups ({groups})")
        if self.num_moe_experts is not None and self.moe_router_topk > self.num_moe_experts:
            raise ValueError(
                f"moe_router_topk ({self.moe_router_topk}) exceeds num_moe_experts ({self.num_moe_experts})"
            )
        return self


class GPUBounds(_Section):
    """``gpu``: peaks (TFLOP/s), memory (GB, MiB) and bandwidths (TB/s, GB/s) are positive and finite."""

    gpus_per_node: PerNode | None = None
    nvlink_domain: Gpus | None = None
    compute_capability: PosFloat | None = None
    peak_tflops: dict[str, PosFloat | None] = {}
    hbm_gb: PosFloat | None = None
    hbm_total_mib: Mib | None = None
    hbm_bandwidth_tb_s: PosFloat | None = None
    nvlink_bandwidth_gb_s: PosFloat | None = None
    network_bandwidth_gb_s: PosFloat | None = None


class ClusterBounds(_Section):
    """``cluster``: node and GPU counts, retries and timeouts in range."""

    nodes: Gpus | None = None
    gpus_per_node: Annotated[int, Field(ge=0, le=1024)] = 0
    max_retries: Annotated[int, Field(ge=0, le=100)] = 0
    lost_after_s: PosFloat = 600.0  # (the tunnel's port range: launch/shellsafe.py, rule shell_safe_value)


class TrainBounds(_Section):
    global_batch_size: Batch | None = None
    micro_batch_size: Batch | None = None


class RunBounds(BaseModel):
    """The sections checked, and the run's GPU count."""

    model_config = ConfigDict(extra="ignore")

    num_gpus: Gpus | None = None
    model: ModelBounds | None = None
    gpu: GPUBounds | None = None
    cluster: ClusterBounds | None = None
    train: TrainBounds | None = None


def _value_text(v: Any) -> str:
    if isinstance(v, float) and (math.isinf(v) or math.isnan(v) or abs(v) >= 1e6):
        return f"{v:g}"
    return repr(v)


def _phrase(e: Mapping[str, Any]) -> str:
    """A pydantic error as bridgebench words it: ``must be a positive integer``, ``must be at most 4096 (the
    stated cap)``, or pydantic's own message."""
    ctx, kind = e.get("ctx") or {}, e.get("type", "")
    is_int = isinstance(e.get("input"), int) and not isinstance(e.get("input"), bool)
    if kind == "greater_than" and ctx.get("gt") == 0:
        return "must be a positive integer" if is_int else "must be positive"
    if kind == "greater_than_equal" and ctx.get("ge") == 0:
        return "must be a non-negative integer" if is_int else "must be non-negative"
    if kind == "less_than_equal":
        return f"must be at most {ctx.get('le'):,} (the stated cap, docs/rules.md config_range)"
    if kind == "finite_number":
        return "must be a finite number"
    return "must be " + str(e["msg"]).removeprefix("Value error, ").removeprefix("Input should be ")


def check_ranges(plain: dict[str, Any], *, where: str = "config") -> None:
    """Validate the ``model``, ``gpu``, ``cluster`` and ``train`` sections and ``num_gpus`` of a composed config (a
    plain dict) with :class:`RunBounds` (rule ``config_range``).

    Raises:
        BoundsError: one line per field out of range: ``model.num_layers = 1e+10: Input should be less than or
            equal to 4096``.
    """
    try:
        RunBounds.model_validate(plain)
    except ValidationError as err:
        lines = []
        for e in err.errors(include_url=False):
            key = ".".join(str(x) for x in e["loc"])
            if e.get("type") == "value_error":  # a cross-field rule (divisibility): its own sentence
                lines.append(f"  {key}: {e['msg'].removeprefix('Value error, ')}")
            else:
                lines.append(f"  {key} {_phrase(e)}, got {_value_text(e.get('input'))}")
        raise BoundsError(f"config_range: {where} has values out of range:\n" + "\n".join(lines)) from None


def check_model_file(data: Any, path: Path) -> None:
    """A user model file's values (the same ranges as :class:`ModelBounds`).

    Raises:
        BoundsError: not a mapping, or a value out of range.
    """
    if not isinstance(data, dict):
        raise BoundsError(f"config_range: {path} must hold a mapping, got {type(data).__name__}")
    check_ranges({"model": data}, where=str(path))


def _reads_outside(raw: Any) -> bool:
    """True when a raw config value holds an interpolation with a resolver (``${name:...}``) anywhere inside it:
    resolving it could read the environment or a file, which bounds checks never do."""
    if isinstance(raw, str):
        return "${" in raw and ":" in raw
    if isinstance(raw, dict):
        return any(_reads_outside(v) for v in raw.values())
    if isinstance(raw, list):
        return any(_reads_outside(v) for v in raw)
    return False


def check_config(cfg: Any) -> None:
    """:func:`check_ranges` on a composed config (an OmegaConf ``DictConfig``): the checked fields are resolved one
    by one (``${...}`` interpolations between config keys); a field holding a resolver call (``${oc.env:VAR}``: it
    could read the environment or a file) is never resolved here, and one that cannot be resolved is left to the
    check that reads it.

    Raises:
        BoundsError: rule ``config_range``.
    """
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    def pick(section: str, names: set[str]) -> dict[str, Any] | None:
        node = OmegaConf.select(cfg, section)
        if node is None:
            return None
        out: dict[str, Any] = {}
        got = OmegaConf.to_container(node, resolve=False) if OmegaConf.is_config(node) else None
        raw: dict[Any, Any] = got if isinstance(got, dict) else {}
        for name in names:
            if _reads_outside(raw.get(name)):
                continue  # a resolver call (${oc.env:...}) is never resolved here: the env_resolver rule judges it
            try:
                value = OmegaConf.select(cfg, f"{section}.{name}", throw_on_missing=False)
                if OmegaConf.is_config(value):
                    value = OmegaConf.to_container(value, resolve=True)
            except OmegaConfBaseException:
                continue
            if value is not None:
                out[name] = value
        return out

    plain: dict[str, Any] = {}
    for section, model in (("model", ModelBounds), ("gpu", GPUBounds), ("cluster", ClusterBounds)):
        got = pick(section, set(model.model_fields))
        if got is not None:
            plain[section] = got
    if (train := pick("train", set(TrainBounds.model_fields))) is not None:
        plain["train"] = train
    try:
        top = OmegaConf.to_container(cfg, resolve=False)
        if isinstance(top, dict) and not _reads_outside(top.get("num_gpus")):
            plain["num_gpus"] = OmegaConf.select(cfg, "num_gpus", throw_on_missing=False)
    except OmegaConfBaseException:
        pass
    if "model" in plain and "num_layers" not in plain["model"]:
        del plain["model"]  # not a model section the ranges apply to (a partial test config)
    if "gpu" in plain and "hbm_gb" not in plain["gpu"]:
        del plain["gpu"]
    check_ranges(plain)


_SECTIONS: dict[str, type[BaseModel]] = {
    "model": ModelBounds,
    "gpu": GPUBounds,
    "cluster": ClusterBounds,
    "train": TrainBounds,
}


def check_value(key: str, value: Any) -> None:
    """One dotted key's value against its range alone (a sweep axis value, set on top of a composed base): the
    field's bound of :class:`ModelBounds`, :class:`GPUBounds`, :class:`ClusterBounds`, :class:`TrainBounds` or
    ``num_gpus``; keys without a bound pass.

    Raises:
        BoundsError: rule ``config_range``, naming the key, the value and the bound.
    """
    from pydantic import TypeAdapter

    section, _, name = key.partition(".")
    model: type[BaseModel] | None = RunBounds if not name else _SECTIONS.get(section)
    name = name or section
    if model is None or name not in model.model_fields:
        return
    info = model.model_fields[name]
    hint: Any = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
    try:
        TypeAdapter(hint).validate_python(value)
    except ValidationError as err:
        e = err.errors(include_url=False)[0]
        raise BoundsError(f"config_range: {key} {_phrase(e)}, got {_value_text(value)}") from None
