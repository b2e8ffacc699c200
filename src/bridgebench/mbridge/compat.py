"""Megatron-Bridge API differences between releases, in one place, keyed by ``release.api`` (``configs/release``).

What differs (sources: Megatron-Bridge tags v0.3.1 / v0.4.0 / v0.5.0 / v0.6.0 and the Megatron-LM submodule commit
each pins, ``megatron/core/optimizer/optimizer_config.py``):

- Muon Nesterov flag: ``muon_use_nesterov`` up to Megatron-Core in MB 0.4.x, ``muon_nesterov`` from MB 0.5.0.
- ``muon_coefficient_type`` and ``muon_scalar_optimizer`` do not exist in MB 0.3.x (fixed to quintic / adam there).
- ``tokenizer.use_tokenizer_vocab_size`` exists from MB 0.6 (``training/tokenizers/config.py``); before, the model's
  vocabulary was never resized from the tokenizer, i.e. the field is implicitly False there.
- Recipe entry points: the generic names below exist at the same module paths in 0.3.x and 0.6.x (0.6.x keeps them
  as aliases of per-GPU recipes such as ``recipes/qwen/h100/qwen3_moe.py``).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

from bridgebench.errors import BridgebenchError


class CompatError(BridgebenchError):
    """A setting cannot be expressed in the target Megatron-Bridge release."""


@dataclass(frozen=True, kw_only=True)
class Api:
    """Megatron-Bridge API of one release family."""

    optimizer_renames: dict[str, str] = field(default_factory=dict)
    #: fields absent in this API, with the only value they implicitly have there
    optimizer_absent: dict[str, Any] = field(default_factory=dict)
    #: other ``section.field`` names absent in this API, with the value they implicitly have there
    absent: dict[str, Any] = field(default_factory=dict)


_OLD_RENAMES = {"muon_nesterov": "muon_use_nesterov"}
_OLD_ABSENT = {"muon_coefficient_type": "quintic", "muon_scalar_optimizer": "adam"}
_NO_VOCAB_POLICY = {"tokenizer.use_tokenizer_vocab_size": False}
APIS: dict[str, Api] = {
    "0.1": Api(optimizer_renames=_OLD_RENAMES, optimizer_absent=_OLD_ABSENT, absent=_NO_VOCAB_POLICY),
    "0.2": Api(optimizer_renames=_OLD_RENAMES, optimizer_absent=_OLD_ABSENT, absent=_NO_VOCAB_POLICY),
    "0.3": Api(optimizer_renames=_OLD_RENAMES, optimizer_absent=_OLD_ABSENT, absent=_NO_VOCAB_POLICY),
    "0.4": Api(optimizer_renames=_OLD_RENAMES, optimizer_absent={}, absent=_NO_VOCAB_POLICY),
    "0.5": Api(optimizer_renames={}, optimizer_absent={}, absent=_NO_VOCAB_POLICY),
    "0.6": Api(),
}

#: Megatron-Bridge recipe module -> the configs/model names whose pretrain recipe it holds, each as
#: ``<name>_pretrain_config`` (same path in 0.3.x and 0.6.x)
_RECIPE_MODULES = {
    "megatron.bridge.recipes.kimi.kimi_k2": ("kimi_k2",),
    "megatron.bridge.recipes.qwen.qwen3_moe": ("qwen3_30b_a3b", "qwen3_235b_a22b"),
    "megatron.bridge.recipes.deepseek": ("deepseek_v3",),
    "megatron.bridge.recipes.llama": ("llama3_70b", "llama31_405b"),
}
#: configs/model name -> (module, function) of Megatron-Bridge's pretrain recipe.
RECIPES: dict[str, tuple[str, str]] = {
    name: (module, f"{name}_pretrain_config") for module, names in _RECIPE_MODULES.items() for name in names
}


def api(name: str) -> Api:
    """The :class:`Api` of a release's ``api`` key. Raises CompatError for an unknown one."""
    if name not in APIS:
        raise CompatError(f"unknown Megatron-Bridge API {name!r}; known: {sorted(APIS)}")
    return APIS[name]


def api_of_version(version: str) -> str:
    """``"0.6.2"`` -> ``"0.6"`` (the key of :data:`APIS`)."""
    return ".".join(version.split(".")[:2])


#: Per-API exceptions to :data:`RECIPES`: the base recipe Megatron-Bridge's own perf recipes start from where the
#: generic alias names another one. 0.6.2 ``perf_recipes/qwen/common.py`` imports the 8-GPU H100 recipe as
#: ``qwen3_30b_a3b_pretrain_config``, while ``recipes/qwen/qwen3_moe.py``'s alias of that name is the 16-GPU one.
RECIPES_BY_API: dict[str, dict[str, tuple[str, str]]] = {
    "0.6": {
        "qwen3_30b_a3b": (
            "megatron.bridge.recipes.qwen.h100.qwen3_moe",
            "qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config",
        ),
    },
}


def recipe(model: str, api_name: str | None = None) -> Callable[[], Any]:
    """Megatron-Bridge's pretrain recipe function for a configs/model name (the one the perf recipes of
    ``api_name`` start from). Raises CompatError if none."""
    if model not in RECIPES:
        raise CompatError(f"no Megatron-Bridge recipe known for model {model!r}; known: {sorted(RECIPES)}")
    module, fn = RECIPES_BY_API.get(api_name or "", {}).get(model, RECIPES[model])
    return getattr(importlib.import_module(module), fn)


def optimizer_fields(fields: dict[str, Any], api_name: str) -> dict[str, Any]:
    """Translate bridgebench optimizer fields (Megatron-Bridge 0.6 names) to ``api_name``'s names.

    Raises:
        CompatError: a field the target API lacks, set to a value other than the one it implicitly has there.
    """
    a = api(api_name)
    out = {}
    for key, value in fields.items():
        if value is None:
            continue
        if not _absent(f"optimizer.{key}", value, a.optimizer_absent.get(key, _PRESENT), api_name):
            out[a.optimizer_renames.get(key, key)] = value
    return out


def section_fields(section: str, fields: dict[str, Any], api_name: str) -> dict[str, Any]:
    """Translate one ``ConfigContainer`` section's fields (Megatron-Bridge 0.6 names, as in bridgebench configs) to
    ``api_name``'s names; ``optimizer`` goes through :func:`optimizer_fields`. ``None`` values are kept (they are
    settings: "unset" is a key that is absent).

    Raises:
        CompatError: a field the target API lacks, set to a value other than the one it implicitly has there.
    """
    a = api(api_name)
    if section == "optimizer":
        nones = {
            a.optimizer_renames.get(k, k): None for k, v in fields.items() if v is None and k not in a.optimizer_absent
        }
        return {**optimizer_fields(fields, api_name), **nones}
    out = {}
    for key, value in fields.items():
        dotted = f"{section}.{key}"
        if not _absent(dotted, value, a.absent.get(dotted, _PRESENT), api_name):
            out[key] = value
    return out


#: :func:`_absent`'s ``fixed`` for a field the target API has
_PRESENT = object()


def _absent(dotted: str, value: Any, fixed: Any, api_name: str) -> bool:
    """True when field ``dotted`` is absent from API ``api_name`` (``fixed``: the value it implicitly has there, or
    :data:`_PRESENT`) and ``value`` is that value: the field is dropped.

    Raises:
        CompatError: the field is absent there and ``value`` differs from the value it is fixed to.
    """
    if fixed is _PRESENT:
        return False
    if value != fixed:
        raise CompatError(
            f"{dotted}={value!r} is not available in Megatron-Bridge API {api_name} (fixed to {fixed!r} there)"
        )
    return True
