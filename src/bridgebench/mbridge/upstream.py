"""Megatron-Bridge's own performance recipes, as the reference every bridgebench recipe is generated from and
tested against.

Two kinds of source, one per release family:

- **Installed Megatron-Bridge (0.6.x, NeMo 26.08)**: the flat ``megatron.bridge.perf_recipes`` functions, called
  here (:func:`perf_container`). Kimi K2's optimizer variants go through the recipe's own switch
  ``_apply_kimi_k2_optimizer`` exactly as Megatron-Bridge v0.6.0
  ``scripts/performance/utils/utils.py::get_perf_optimized_recipe`` does for ``--optimizer_type adam``: build the perf
  recipe (Muon, its default), apply the switch, restore the perf recipe's ``lr_decay_iters`` / ``lr_warmup_iters``.
- **Older releases (Megatron-Bridge 0.3.x - 0.5.x)**: their values live in ``scripts/performance`` at the git tag
  (launcher code, not in the wheel). They were executed once with that release's wheel and dumped flat
  (:mod:`bridgebench.mbridge.flatten` format) under ``tests/data/upstream_recipes/<release>/``; :func:`load_dump`
  reads one. ``tests/data/upstream_recipes/SOURCES.md`` has the commands.

Importing this module imports no megatron.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bridgebench.errors import BridgebenchError
from bridgebench.paths import REPO_ROOT

DUMPS = REPO_ROOT / "tests" / "data" / "upstream_recipes"


class UpstreamError(BridgebenchError):
    """No upstream recipe for the asked (recipe, release, optimizer), or its source cannot be read."""


@dataclass(frozen=True, kw_only=True)
class PerfRecipe:
    """One flat perf recipe function of the installed Megatron-Bridge (0.6.x)."""

    module: str
    function: str
    num_gpus: int
    #: optimizer families upstream builds for this recipe, the recipe's default first
    optimizers: tuple[str, ...] = ("adamw",)


def _perf(
    family: str,
    gpu: str,
    file: str,
    model: str,
    num_gpus: int,
    precision: str,
    optimizers: tuple[str, ...] = ("adamw",),
) -> PerfRecipe:
    """Megatron-Bridge 0.6.2's perf recipe naming:
    ``megatron/bridge/perf_recipes/<family>/<gpu>/<file>.py::<model>_pretrain_<num_gpus>gpu_<gpu>_<precision>_config``."""
    return PerfRecipe(
        module=f"megatron.bridge.perf_recipes.{family}.{gpu}.{file}",
        function=f"{model}_pretrain_{num_gpus}gpu_{gpu}_{precision}_config",
        num_gpus=num_gpus,
        optimizers=optimizers,
    )


#: bridgebench recipe -> Megatron-Bridge 0.6.2 ``perf_recipes`` function (the NeMo 26.08 benchmark configuration).
PERF_RECIPES_0_6: dict[str, PerfRecipe] = {
    "kimi_k2_gb300_mxfp8": _perf("kimi", "gb300", "kimi_k2", "kimi_k2", 256, "fp8mx", ("muon", "adamw")),
    "deepseek_v3_gb300_mxfp8": _perf("deepseek", "gb300", "deepseek_v3", "deepseek_v3", 256, "fp8mx"),
    "qwen3_235b_a22b_gb300_mxfp8": _perf("qwen", "gb300", "qwen3_moe", "qwen3_235b_a22b", 256, "fp8mx"),
    **{
        f"qwen3_30b_a3b_{gpu}_mxfp8": _perf("qwen", gpu, "qwen3_moe", "qwen3_30b_a3b", 8, "fp8mx")
        for gpu in ("gb300", "gb200", "b300", "b200")
    },
    "qwen3_30b_a3b_h100_fp8_cs": _perf("qwen", "h100", "qwen3_moe", "qwen3_30b_a3b", 16, "fp8cs"),
}

#: Kimi K2's optimizer switch (Megatron-Bridge 0.6.2 ``recipes/kimi/h100/kimi_k2.py``) and the names it takes.
KIMI_SWITCH = ("megatron.bridge.recipes.kimi.kimi_k2", "_apply_kimi_k2_optimizer")
SWITCH_NAMES = {"adamw": "adam", "muon": "muon"}
#: the recipe whose Muon changes define bridgebench's Muon variant of recipes that have no upstream Muon
MUON_REFERENCE = "kimi_k2_gb300_mxfp8"


def source_path(module: str, function: str) -> str:
    """``src/megatron/bridge/...py::function`` of an installed function (as in the Megatron-Bridge repository)."""
    mod = importlib.import_module(module)
    path = Path(inspect.getsourcefile(getattr(mod, function)) or "")
    parts = path.parts
    rel = "/".join(parts[parts.index("megatron") :]) if "megatron" in parts else path.name
    return f"src/{rel}::{function}"


def perf_container(recipe: str, optimizer: str) -> tuple[Any, str]:
    """The installed Megatron-Bridge's perf recipe container for ``recipe`` and optimizer family ``optimizer``.

    Returns:
        (ConfigContainer exactly as the perf recipe returns it -- no launcher overrides, no ``validate()``,
        source string naming the files and the Megatron-Bridge version).

    Raises:
        UpstreamError: no perf recipe for ``recipe``, or upstream builds no ``optimizer`` variant of it.
    """
    from bridgebench.mbridge import setup

    setup()
    import megatron.bridge

    version = megatron.bridge.__version__.split("+")[0]  # "+<hash>" is a local build tag, not a release
    if recipe not in PERF_RECIPES_0_6:
        raise UpstreamError(
            f"Megatron-Bridge {version} has no perf recipe registered for {recipe!r}; known: {sorted(PERF_RECIPES_0_6)}"
        )
    spec = PERF_RECIPES_0_6[recipe]
    if optimizer not in spec.optimizers:
        raise UpstreamError(f"upstream builds no {optimizer} variant of {recipe}; it has {list(spec.optimizers)}")
    fn = getattr(importlib.import_module(spec.module), spec.function)
    cfg = fn()
    if optimizer != spec.optimizers[0]:
        switch = getattr(importlib.import_module(KIMI_SWITCH[0]), KIMI_SWITCH[1])
        decay, warmup = cfg.scheduler.lr_decay_iters, cfg.scheduler.lr_warmup_iters
        switch(cfg, SWITCH_NAMES[optimizer])
        cfg.scheduler.lr_decay_iters, cfg.scheduler.lr_warmup_iters = decay, warmup
    return cfg, perf_source(recipe, optimizer, version)


def perf_source(recipe: str, optimizer: str, version: str) -> str:
    """The source string of the installed Megatron-Bridge ``version``'s perf recipe of ``recipe`` for optimizer family
    ``optimizer``, as :func:`perf_container` builds it (its function, and the optimizer switch when the family is not
    the recipe's own first one). Raises KeyError for a recipe :data:`PERF_RECIPES_0_6` does not have."""
    spec = PERF_RECIPES_0_6[recipe]
    where = f"megatron-bridge {version} {source_path(spec.module, spec.function)}"
    if optimizer != spec.optimizers[0]:
        where += (
            f" + {source_path(*KIMI_SWITCH)}(cfg, {SWITCH_NAMES[optimizer]!r}) with the perf recipe's lr_decay_iters /"
            f" lr_warmup_iters kept (as v0.6.0 scripts/performance/utils/utils.py::get_perf_optimized_recipe)"
        )
    return where


@dataclass(frozen=True, kw_only=True)
class Dump:
    """A shipped dump of an older release's upstream configuration (``tests/data/upstream_recipes``)."""

    release: str
    recipe: str
    optimizer: str
    meta: dict[str, Any]
    values: dict[str, Any]
    path: Path


def dump_path(release: str, recipe: str, optimizer: str) -> Path:
    """Where the dump of (release, recipe, optimizer family) lives."""
    return DUMPS / release / f"{recipe}__{SWITCH_NAMES.get(optimizer, optimizer)}.yaml"


def load_dump(release: str, recipe: str, optimizer: str) -> Dump:
    """Read one shipped dump. Raises UpstreamError if there is none (listing the releases that have the recipe)."""
    path = dump_path(release, recipe, optimizer)
    if not path.exists():
        have = sorted(p.parent.name for p in DUMPS.glob(f"*/{recipe}__*.yaml"))
        raise UpstreamError(f"no upstream dump for {recipe} / {optimizer} at release {release}; dumps exist for {have}")
    doc = yaml.safe_load(path.read_text())
    meta = doc.pop("_meta")
    return Dump(release=release, recipe=recipe, optimizer=optimizer, meta=meta, values=doc, path=path)


def dumped_releases() -> list[str]:
    """Releases with shipped dumps."""
    return sorted(p.name for p in DUMPS.iterdir() if p.is_dir()) if DUMPS.exists() else []
