"""Generate bridgebench recipes from Megatron-Bridge's own perf recipes, release by release, and compare containers.

``recipes/<recipe>/<release>.yaml`` holds exactly the ``ConfigContainer`` fields where that release's upstream perf
recipe differs from what :func:`bridgebench.mbridge.build.build` makes without it (the *start*: the model's base
recipe of the installed Megatron-Bridge + ``configs/`` defaults). Building with the file therefore reproduces the
upstream container field by field (``tests/mbridge/test_fidelity.py`` checks it). The upstream side is
:mod:`bridgebench.mbridge.upstream`: the installed perf recipe functions (26.08) or a shipped dump (older releases).

``recipes/optimizer_switch/<release>/muon.yaml`` holds Kimi K2's Muon changes at that release
(:func:`muon_switch`), applied over any recipe's AdamW values when ``optimizer=muon``.

Command: ``bridgebench recipes generate --release 26.08`` (``bridgebench.cli.recipes``).
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bridgebench.config.schema import MODEL_BOOKKEEPING
from bridgebench.errors import BridgebenchError
from bridgebench.mbridge import compat, upstream
from bridgebench.mbridge.flatten import expand_layout, flatten, layout_string
from bridgebench.paths import RECIPES_DIR

#: optimizer fields ``_apply_kimi_k2_optimizer(cfg, "muon")`` sets: the arguments of
#: ``recipes/utils/optimizer_utils.py::distributed_muon_with_cosine_annealing`` and the switch's own assignments
#: (Megatron-Bridge 0.6.2 ``recipes/kimi/h100/kimi_k2.py``; the same list at v0.3.1
#: ``scripts/performance/configs/kimi/kimi_llm_pretrain.py``). Their Kimi K2 Muon values are always part of the switch.
MUON_SWITCH_FIELDS = (
    "optimizer",
    "lr",
    "min_lr",
    "weight_decay",
    "bf16",
    "fp16",
    "muon_momentum",
    "muon_nesterov",
    "muon_scale_mode",
    "muon_fp32_matmul_prec",
    "muon_num_ns_steps",
    "muon_tp_mode",
    "clip_grad",
    "use_precision_aware_optimizer",
    "main_grads_dtype",
    "main_params_dtype",
    "exp_avg_dtype",
    "exp_avg_sq_dtype",
)
#: Settings Muon requires under the layer-wise distributed optimizer whatever the precision (bridgebench rules
#: muon_fp8_param_gather / muon_reuse_grad_buf; Megatron-Bridge v0.3.1 scripts/performance/configs/kimi/
#: kimi_llm_pretrain.py::set_kimi_k2_common_configs turns them off with dist_muon; 0.6.2's Kimi K2 MXFP8 recipe has
#: them off for both optimizers, so its switch alone would leave another recipe's FP8 param all-gather on).
#: ``fp8_param`` is kept equal to ``fp8_param_gather`` by MixedPrecisionConfig.__setattr__ (0.6.2 mixed_precision.py).
MUON_REQUIRED = {
    "mixed_precision.fp8_param_gather": False,
    "mixed_precision.fp8_param": False,
    "mixed_precision.reuse_grad_buf_for_mxfp8_param_ag": False,
}
#: Older APIs' field names -> bridgebench's (Megatron-Bridge 0.6) names, from :data:`compat.APIS`.
OLD_NAMES = {f"optimizer.{old}": f"optimizer.{new}" for new, old in compat.APIS["0.3"].optimizer_renames.items()}


class RecipeGenError(BridgebenchError):
    """A recipe cannot be generated (no upstream source for it, or a value that cannot be written)."""


def _normalize(key: str, value: Any) -> Any:
    """Comparable form: layouts expanded, env values as strings, integral floats as ints are left alone."""
    if key.endswith("pipeline_model_parallel_layout"):
        return expand_layout(value)
    if key.startswith("env_vars."):
        return None if value is None else str(value)
    return value


def normalized(flat: dict[str, Any]) -> dict[str, Any]:
    """``flat`` with older field names renamed to bridgebench's and values in comparable form."""
    return {OLD_NAMES.get(k, k): _normalize(OLD_NAMES.get(k, k), v) for k, v in flat.items()}


def _unsettable(value: Any) -> str | None:
    """Why a flattened value cannot be written into a config, or None."""
    text = value if isinstance(value, str) else ""
    if "${CWD}" in text:
        return "a path under the upstream working directory"
    if text.startswith(("<callable", "partial(", "<error", "<")):
        return "not a plain value"
    return None


@dataclass
class Diff:
    """Fields where an upstream container differs from bridgebench's start, sorted into what can be written."""

    values: dict[str, Any] = field(default_factory=dict)  # dotted key -> upstream value (settable)
    skipped: dict[str, str] = field(default_factory=dict)  # dotted key -> why it is not written
    upstream_only: list[str] = field(default_factory=list)  # fields the installed Megatron-Bridge lacks


def diff(upstream_flat: dict[str, Any], start_flat: dict[str, Any]) -> Diff:
    """Fields to write so that ``start`` + them = ``upstream`` (both normalized flat maps)."""
    out = Diff()
    up_env = {k for k in upstream_flat if k.startswith("env_vars.")}
    for key, value in upstream_flat.items():
        if key.startswith("env_vars."):
            continue
        if key not in start_flat:
            out.upstream_only.append(key)
            continue
        if value == start_flat[key]:
            continue
        why = "a class, not a field value" if key.endswith(".__class__") else _unsettable(value)
        if key.split(".", 1)[0] == "model" and key.split(".", 1)[1] in MODEL_BOOKKEEPING:
            why = (
                "bridgebench bookkeeping in configs/model has the same name (provider metadata, no effect on training)"
            )
        if why:
            out.skipped[key] = why
        else:
            out.values[key] = value
    # env_vars: upstream recipes assign the whole environment; written whole when it differs at all
    start_env = {k: v for k, v in start_flat.items() if k.startswith("env_vars.")}
    if {k: upstream_flat[k] for k in up_env} != start_env:
        for k in sorted(up_env):
            out.values[k] = upstream_flat[k]
    return out


def with_empty_sections(start: dict[str, Any]) -> dict[str, Any]:
    """A start whose ``comm_overlap`` is None (some base recipes have none) gets the fields of the
    ``CommOverlapConfig`` that :func:`bridgebench.mbridge.build.apply_config` creates when a config sets any."""
    if start.get("comm_overlap", "") is not None:
        return start
    from megatron.bridge.training.comm_overlap import CommOverlapConfig

    out = {k: v for k, v in start.items() if k != "comm_overlap"}
    out.update(normalized(flatten(_Holder(CommOverlapConfig(tp_comm_overlap=False)))))
    return out


@dataclass
class _Holder:
    comm_overlap: Any


def nest(values: dict[str, Any]) -> dict[str, Any]:
    """Dotted keys -> nested sections (``model.x`` -> ``{"model": {"x": ...}}``); layouts as compact strings."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        section, name = key.split(".", 1)
        if name == "pipeline_model_parallel_layout" and isinstance(value, list):
            value = layout_string(
                [[{"E": "embedding", "t": "decoder", "m": "mtp", "L": "loss"}[c] for c in s] for s in value]
            )
        out.setdefault(section, {})[name] = value
    return out


def entry_groups(recipe: str) -> dict[str, str]:
    """``{"model": ..., "gpu": ..., "precision": ...}`` chosen by a recipe's entry file ``recipes/<recipe>.yaml``."""
    path = RECIPES_DIR / f"{recipe}.yaml"
    if not path.exists():
        raise RecipeGenError(f"no recipe entry {path}")
    out = {}
    for item in yaml.safe_load(path.read_text()).get("defaults", []):
        if isinstance(item, dict):
            for k, v in item.items():
                out[k.replace("override ", "").strip("/ ")] = str(v)
    return out


def start_container(recipe: str, release: str, optimizer: str = "adamw"):
    """What ``build`` makes for ``recipe`` with no release values and no optimizer switch (policies off)."""
    from bridgebench.config.compose import compose
    from bridgebench.mbridge.build import build

    groups = entry_groups(recipe)
    cfg = compose([f"{g}={v}" for g, v in groups.items()] + [f"release={release}", f"optimizer={optimizer}"])
    return build(cfg, validate=False, policies=False).container


def built_flat(overrides: list[str], *, policies: bool = True) -> dict[str, Any]:
    """Flattened, normalized container that bridgebench builds for ``overrides`` (not validated: as recipes return)."""
    from bridgebench.config.compose import compose
    from bridgebench.mbridge.build import build

    return normalized(flatten(build(compose(overrides), validate=False, policies=policies).container))


def upstream_flat(recipe: str, release: str, optimizer: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(normalized flat upstream container, meta) for (recipe, release, optimizer family).

    The installed Megatron-Bridge's perf recipes stand for ``installed_release()``; other releases come from dumps.
    """
    if release == installed_release():
        import megatron.bridge

        container, source = upstream.perf_container(recipe, optimizer)
        spec = upstream.PERF_RECIPES_0_6[recipe]
        version = megatron.bridge.__version__.split("+")[0]
        meta = {
            "source": source,
            "megatron_bridge": version,
            "num_gpus": spec.num_gpus,
            "upstream_optimizers": list(spec.optimizers),
            "sources": {o: upstream.perf_source(recipe, o, version) for o in spec.optimizers},
        }
        return normalized(flatten(container)), meta
    dump = upstream.load_dump(release, recipe, optimizer)
    opts = sorted(p.stem.split("__")[1] for p in dump.path.parent.glob(f"{recipe}__*.yaml"))
    meta = {
        "source": dump.meta["source"],
        "megatron_bridge": str(dump.meta["megatron_bridge_version"]),
        "num_gpus": int(dump.meta["source"].split(" -ng ")[1].split()[0]),
        "upstream_optimizers": ["adamw" if o == "adam" else o for o in opts],
        "sources": {
            ("adamw" if o == "adam" else o): str(upstream.load_dump(release, recipe, o).meta["source"]) for o in opts
        },
        "dump": str(dump.path.relative_to(upstream.DUMPS.parents[2])),
    }
    return normalized(dump.values), meta


def installed_release() -> str:
    """The NeMo release whose Megatron-Bridge is installed here (``configs/release/*.yaml`` by version)."""
    from bridgebench.mbridge import setup

    setup()
    import megatron.bridge

    version = megatron.bridge.__version__.split("+")[0]
    from bridgebench.paths import CONFIG_DIR

    for path in sorted(CONFIG_DIR.glob("release/*.yaml")):
        if str(yaml.safe_load(path.read_text()).get("megatron_bridge_version")) == version:
            return path.stem
    raise RecipeGenError(f"no configs/release/*.yaml names Megatron-Bridge {version} (megatron_bridge_version)")


def _yaml(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=118, allow_unicode=True)


def _header_notes(d: Diff) -> list[str]:
    notes = []
    if d.skipped:
        notes.append("Not written (the start keeps its value; tests/mbridge/test_fidelity.py allow-lists them):")
        notes += [f"  {k}: {why}" for k, why in sorted(d.skipped.items())]
    if d.upstream_only:
        notes.append(f"Fields of that release the installed Megatron-Bridge does not have ({len(d.upstream_only)}):")
        line = "  "
        for k in sorted(d.upstream_only):
            if len(line) + len(k) > 110:
                notes.append(line.rstrip())
                line = "  "
            line += k + " "
        notes.append(line.rstrip())
    return notes


#: Environment variables upstream derives from the GPU's NVLink domain and the expert-parallel size (Megatron-Bridge
#: v0.3.1 ``scripts/performance/utils/executors.py`` ``_set_nvl_domain_size`` / HybridEP settings; 0.6.2
#: ``perf_recipes/_common.py``): a recipe writes them as these interpolations wherever upstream's value is the derived
#: one, so that they follow a ``gpu=`` or ``model.expert_model_parallel_size=`` override (and each sweep point) as
#: upstream's launcher would set them; a value that is not the derived one is written as upstream has it.
DERIVED_ENV = {
    "NVLINK_DOMAIN_SIZE": "${gpu.nvlink_domain}",
    "USE_MNNVL": "${bb.flag:${bb.gt:${gpu.nvlink_domain},${gpu.gpus_per_node}}}",
    "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": "${bb.min:${model.expert_model_parallel_size},${gpu.nvlink_domain}}",
}


def _derived_env(env: dict[str, str], domain: int, gpus_per_node: int, ep: int) -> dict[str, str]:
    """``env`` with each :data:`DERIVED_ENV` value that equals its derivation replaced by the interpolation."""
    derived = {
        "NVLINK_DOMAIN_SIZE": str(domain),
        "USE_MNNVL": "1" if domain > gpus_per_node else "0",
        "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": str(min(ep, domain)),
    }
    return {k: DERIVED_ENV[k] if k in DERIVED_ENV and v == derived[k] else v for k, v in env.items()}


def generate_recipe(recipe: str, release: str) -> tuple[Path, str]:
    """(path, text) of ``recipes/<recipe>/<release>.yaml`` from upstream (AdamW variant; Muon via the switch).

    Raises:
        UpstreamError: no upstream recipe / dump for it.
    """
    up, meta = upstream_flat(recipe, release, "adamw")
    start = with_empty_sections(normalized(flatten(start_container(recipe, release))))
    d = diff(up, start)
    body = {
        "num_gpus": meta["num_gpus"],
        "recipe_meta": {
            "name": recipe,
            "release": release,
            "megatron_bridge": meta["megatron_bridge"],
            "source": meta["source"],
            "upstream_optimizers": meta["upstream_optimizers"],
            "sources": meta["sources"],
            "generated_by": f"bridgebench recipes generate --release {release} --recipe {recipe}",
        },
        **nest(d.values),
    }
    if "env_vars" in body:
        from bridgebench.config.compose import compose

        gpu = compose([f"gpu={entry_groups(recipe)['gpu']}"]).gpu
        ep = int(d.values.get("model.expert_model_parallel_size", start["model.expert_model_parallel_size"]))
        env = {k: str(v) for k, v in body["env_vars"].items()}
        body["env_vars"] = _derived_env(env, int(gpu.nvlink_domain), int(gpu.gpus_per_node), ep)
    head = [
        "# @package _global_",
        f"# {recipe} at NeMo release {release}: the fields where Megatron-Bridge {meta['megatron_bridge']}'s own perf",
        "# recipe differs from what bridgebench builds without this file (base model recipe + configs/ defaults).",
        f"# Source: {meta['source']}",
    ]
    if "dump" in meta:
        head.append(f"# Executed once with that release's code; dump: {meta['dump']} (see its SOURCES.md).")
    head.append(f"# Generated by: bridgebench recipes generate --release {release} --recipe {recipe} (do not edit).")
    head += [f"# {n}" for n in _header_notes(d)]
    return RECIPES_DIR / recipe / f"{release}.yaml", "\n".join(head) + "\n" + _yaml(body)


#: Releases without a Kimi K2 recipe whose Muon switch is another release's, and why that is the same code.
MUON_SWITCH_STANDINS = {
    "26.02": (
        "26.02.01",
        "Megatron-Bridge v0.3.0 (26.02) has no Kimi K2 perf config; its "
        "recipes/utils/optimizer_utils.py::distributed_muon_with_cosine_annealing is identical to v0.3.1's (26.02.01, "
        "wheels compared), so 26.02's Muon changes are v0.3.1's Kimi K2 launcher path",
    ),
}


def muon_switch(release: str) -> tuple[Path, str]:
    """(path, text) of ``recipes/optimizer_switch/<release>/muon.yaml``: Kimi K2's Muon changes at ``release``.

    The changes are the :data:`MUON_SWITCH_FIELDS` with Kimi K2 Muon's values plus every other field in which Kimi
    K2's Muon and AdamW containers differ at that release. Applied over Kimi K2's AdamW values they give exactly
    upstream's Kimi K2 Muon; over another recipe's AdamW values they make bridgebench's Muon variant of it.

    Raises:
        UpstreamError: no Kimi K2 Muon / AdamW source at that release.
    """
    ref = upstream.MUON_REFERENCE
    source_release, standin = MUON_SWITCH_STANDINS.get(release, (release, ""))
    muon, meta = upstream_flat(ref, source_release, "muon")
    adam, _ = upstream_flat(ref, source_release, "adamw")
    values = {f"optimizer.{f}": muon[f"optimizer.{f}"] for f in MUON_SWITCH_FIELDS if f"optimizer.{f}" in muon}
    for key, value in muon.items():
        if not key.startswith("env_vars.") and adam.get(key) != value and not _unsettable(value):
            values[key] = value
    for key, value in MUON_REQUIRED.items():
        if values.get(key, value) != value:
            raise RecipeGenError(f"Kimi K2 Muon at {source_release} has {key}={values[key]!r}; Muon requires {value!r}")
        values[key] = value
    body = {
        "optimizer_variant": {"name": "muon", "source": f"Kimi K2 Muon at {source_release}: {meta['source']}"},
        **nest(values),
    }
    head = [
        "# @package _global_",
        f"# Muon at NeMo release {release}: Kimi K2's Muon changes (the optimizer switch _apply_kimi_k2_optimizer sets",
        "# these fields; plus every other field in which Kimi K2's Muon and AdamW configurations differ), and the",
        "# settings Muon requires (no FP8 param all-gather: bridgebench.mbridge.recipes.MUON_REQUIRED).",
        "# Applied after the recipe's release values when optimizer=muon (configs/config.yaml).",
        f"# Source: {meta['source']}",
        *([f"# Stand-in: {standin}."] if standin else []),
        f"# Generated by: bridgebench recipes generate --release {release} (do not edit).",
    ]
    return RECIPES_DIR / "optimizer_switch" / release / "muon.yaml", "\n".join(head) + "\n" + _yaml(body)


def field_catalog(provider_classes: list[type] | None = None) -> dict[str, Any]:
    """The installed Megatron-Bridge's field names and plain types per ``ConfigContainer`` section
    (``src/bridgebench/config/mbridge_fields.json``; the model section is the union of the providers' fields)."""
    import dataclasses

    import megatron.bridge
    from megatron.bridge.models.gpt_provider import GPTModelProvider
    from megatron.bridge.models.mla_provider import MLAModelProvider
    from megatron.bridge.training.config import ConfigContainer

    from bridgebench.config.schema import MB_SECTIONS

    def kind(tp: Any) -> tuple[str, bool]:
        args = typing.get_args(tp)
        origin = typing.get_origin(tp)
        nullable = type(None) in args
        inner = (
            [a for a in args if a is not type(None)]
            if args and origin in (typing.Union, __import__("types").UnionType)
            else [tp]
        )
        names = set()
        for a in inner:
            o = typing.get_origin(a) or a
            names.add({bool: "bool", int: "int", float: "float", str: "str", list: "list", dict: "dict"}.get(o, "any"))
        if names == {"int", "float"}:
            names = {"float"}
        return (names.pop() if len(names) == 1 else "any"), nullable or tp is Any

    def fields_of(cls: type) -> dict[str, Any]:
        try:
            hints = typing.get_type_hints(cls)
        except Exception:  # noqa: BLE001  (unresolvable forward references: types unknown, names still checked)
            hints = {}
        out = {}
        for f in dataclasses.fields(cls):
            k, n = kind(hints.get(f.name, Any))
            out[f.name] = {"type": k, "nullable": n}
        return out

    containers = {f.name: f.type for f in dataclasses.fields(ConfigContainer)}
    hints = typing.get_type_hints(ConfigContainer)
    sections: dict[str, Any] = {}
    for section in MB_SECTIONS:
        if section == "model":
            merged: dict[str, Any] = {}
            for cls in [GPTModelProvider, MLAModelProvider, *(provider_classes or [])]:
                merged.update(fields_of(cls))
            sections[section] = merged
            continue
        tp = hints.get(section, containers[section])
        classes = [a for a in (typing.get_args(tp) or (tp,)) if dataclasses.is_dataclass(a)]
        merged = {}
        for cls in classes[:1] if section != "dataset" else classes[:1]:
            merged.update(fields_of(cls))
        sections[section] = merged
    return {"megatron_bridge": megatron.bridge.__version__.split("+")[0], "sections": sections}


def start_catalog() -> dict[str, Any]:
    """The values :func:`bridgebench.mbridge.build.build` starts from in each of
    :data:`bridgebench.config.schema.START_FIELDS`, per model (the installed Megatron-Bridge's base recipe,
    :func:`bridgebench.mbridge.compat.recipe`) and per mixed-precision recipe (``get_mixed_precision_config``), for
    ``src/bridgebench/config/mbridge_starts.json`` (:func:`bridgebench.config.schema.start_values` reads it).

    Imports megatron and builds every model's base recipe (seconds each).

    Raises:
        RecipeGenError: a value that is not plain JSON (it could not be compared with a composed config).
    """
    from bridgebench.config.compose import compose, group_options
    from bridgebench.config.schema import START_FIELDS
    from bridgebench.mbridge import setup

    setup()
    import megatron.bridge
    from megatron.bridge.training.mixed_precision import get_mixed_precision_config

    api_name = compat.api_of_version(megatron.bridge.__version__)

    def plain(obj: Any, key: str) -> Any:
        value = getattr(obj, key.split(".", 1)[1])
        if isinstance(value, tuple):
            value = list(value)
        if type(value).__name__ == "dtype":  # torch.float32 -> "torch.float32", as configs write dtypes
            value = str(value)
        if not (value is None or isinstance(value, (bool, int, float, str, list))):
            raise RecipeGenError(f"{key} = {value!r} is not a plain value")
        return value

    from bridgebench.config.schema import GENERIC_START
    from bridgebench.mbridge.provider import generic_container
    from bridgebench.model.spec import ModelSpec

    def values(container: Any) -> dict[str, Any]:
        return {k: plain(getattr(container, k.split(".")[0]), k) for k in START_FIELDS if not k.startswith("mixed_")}

    models: dict[str, Any] = {}
    for option in group_options("model"):
        name = str(compose([f"model={option}"]).model.name)
        if name in compat.RECIPES:  # shipped models; a model of $BRIDGEBENCH_CONFIG_DIR starts from the generic one
            models[name] = values(compat.recipe(name, api_name)())
    tiny = ModelSpec(name="generic", num_layers=2, hidden_size=64, ffn_hidden_size=128, num_attention_heads=4,
                     vocab_size=128, seq_length=128)  # fmt: skip
    models[GENERIC_START] = values(generic_container(tiny))
    precisions: dict[str, Any] = {}
    for option in group_options("precision"):
        name = str(compose([f"precision={option}"]).precision.mixed_precision_recipe)
        mp = get_mixed_precision_config(name)
        precisions[name] = {k: plain(mp, k) for k in START_FIELDS if k.startswith("mixed_precision.")}
    return {
        "megatron_bridge": megatron.bridge.__version__.split("+")[0],
        "fields": list(START_FIELDS),
        "model": models,
        "mixed_precision": precisions,
    }


#: the parallel and memory fields recorded per perf recipe in ``mbridge_perf.json`` (besides ``START_FIELDS``).
PERF_FIELDS = (
    "model.tensor_model_parallel_size",
    "model.pipeline_model_parallel_size",
    "model.virtual_pipeline_model_parallel_size",
    "model.context_parallel_size",
    "model.expert_model_parallel_size",
    "model.expert_tensor_parallel_size",
    "model.sequence_parallel",
    "model.pipeline_model_parallel_layout",
    "model.num_layers_in_first_pipeline_stage",
    "model.num_layers_in_last_pipeline_stage",
    "model.account_for_embedding_in_pipeline_split",
    "model.account_for_loss_in_pipeline_split",
    "model.mtp_num_layers",
    "model.seq_length",
    "model.moe_token_dispatcher_type",
    "model.moe_flex_dispatcher_backend",
    "model.cuda_graph_impl",
    "train.micro_batch_size",
    "train.global_batch_size",
    "ddp.use_distributed_optimizer",
    "optimizer.use_distributed_optimizer",
    "optimizer.optimizer",
    "optimizer.main_grads_dtype",
    "mixed_precision.fp8_param_gather",
    "env_vars.PYTORCH_CUDA_ALLOC_CONF",
    # the communication knobs the time model reads (bridgebench.config.time_knobs), for published rows whose release
    # bridgebench ships no recipe of (bridgebench.validation.time_calibration)
    "comm_overlap.tp_comm_overlap",
    "comm_overlap.overlap_moe_expert_parallel_comm",
    "model.moe_shared_expert_overlap",
    "mixed_precision.fp8_dot_product_attention",
)
#: perf recipe function name -> (model, N GPUs, gpu, precision token, variant suffix)
_PERF_NAME = (
    r"^(?P<model>[a-z0-9_]+?)_pretrain_(?P<gpus>\d+)gpu_(?P<gpu>[a-z0-9]+)_"
    r"(?P<prec>bf16|fp8cs|fp8mx|fp8sc|nvfp4)(?:_(?P<variant>[a-z0-9_]+?))?_config$"
)
#: perf recipe precision token -> ``configs/precision`` option (``fp8sc``: sub-channel / blockwise FP8, no option)
PERF_PRECISIONS = {"bf16": "bf16", "fp8cs": "fp8_cs", "fp8mx": "mxfp8", "nvfp4": "nvfp4"}


def perf_catalog() -> dict[str, Any]:
    """Every pretraining perf recipe of the installed Megatron-Bridge (``megatron.bridge.perf_recipes``) for a
    shipped model, GPU and precision: its function, sizes and the values of :data:`PERF_FIELDS` and of the memory
    model's :data:`bridgebench.config.schema.START_FIELDS`, for ``src/bridgebench/config/mbridge_perf.json`` (the
    settings NVIDIA's published runs used, which their tables do not print: recompute, Megatron-FSDP, offloading,
    optimizer dtypes; ``bridgebench.validation.published_points`` reads it).

    Imports megatron and calls every perf recipe function (milliseconds each).

    Raises:
        RecipeGenError: a value that is not plain JSON.
    """
    import importlib
    import inspect
    import re

    from bridgebench.config.catalog import options
    from bridgebench.config.compose import compose, group_options
    from bridgebench.config.schema import START_FIELDS
    from bridgebench.mbridge import setup

    setup()
    import megatron.bridge

    models = {str(compose([f"model={o}"]).model.name) for o in group_options("model")} & set(compat.RECIPES)
    gpus = set(options("gpu"))
    fields = list(PERF_FIELDS) + [k for k in START_FIELDS if k not in PERF_FIELDS]
    out: dict[str, Any] = {}
    for family in ("llama", "qwen", "deepseek", "kimi"):
        mod = importlib.import_module(f"megatron.bridge.perf_recipes.{family}")
        for fn_name in sorted(dir(mod)):
            m = re.match(_PERF_NAME, fn_name)
            if not m or m["model"] not in models or m["gpu"] not in gpus or m["prec"] not in PERF_PRECISIONS:
                continue
            container = getattr(mod, fn_name)()
            values: dict[str, Any] = {}
            for key in fields:
                section, name = key.split(".", 1)
                obj = getattr(container, section)
                value = obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)
                if section == "env_vars" and value is not None:
                    value = str(value)
                if key.endswith("pipeline_model_parallel_layout") and value is not None:
                    value = layout_string(value)
                if isinstance(value, tuple):
                    value = list(value)
                if type(value).__name__ == "dtype":
                    value = str(value)
                if not (value is None or isinstance(value, (bool, int, float, str, list))):
                    raise RecipeGenError(f"{fn_name}: {key} = {value!r} is not a plain value")
                values[key] = value
            fn = getattr(mod, fn_name)
            where = Path(inspect.getsourcefile(fn) or "").parts
            source = "src/" + "/".join(where[where.index("megatron") :]) + f"::{fn.__name__}"
            out[fn_name] = {
                "model": m["model"],
                "num_gpus": int(m["gpus"]),
                "gpu": m["gpu"],
                "precision": PERF_PRECISIONS[m["prec"]],
                "variant": m["variant"],
                "source": source,
                "values": values,
            }
    return {"megatron_bridge": megatron.bridge.__version__.split("+")[0], "recipes": out}
