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


@dataclass(kw_only=True)
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
    out.update(normalized(flatten(_Holder(comm_overlap=CommOverlapConfig(tp_comm_overlap=False)))))
    return out


@dataclass(kw_only=True)
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
