"""The field catalogues ``bridgebench recipes fields`` writes from the installed Megatron-Bridge: every config
class's fields and types (:func:`field_catalog`, ``mbridge_fields.json``), the base recipes' start values
(:func:`start_catalog`, ``mbridge_starts.json``) and the perf recipes' settings (:func:`perf_catalog`,
``mbridge_perf.json``)."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

from bridgebench.mbridge import compat
from bridgebench.mbridge.flatten import layout_string
from bridgebench.mbridge.recipes import RecipeGenError


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
    "model.fp8_output_proj",
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
