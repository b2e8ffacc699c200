"""NVIDIA's published perf-table rows as calibration rows of the time model, and the fit behind
``configs/calibration/<name>.yaml`` (``bridgebench calibrate``).

Each row of ``results/reference/published_pretrain_throughput.csv`` whose model has a ``configs/model`` entry becomes
a :class:`bridgebench.model.steptime.fit.Row`: the model at the row's sequence length (DeepSeek V3 "w/o MTP" rows
without MTP), the row's GPU facts (``configs/gpu``), parallel sizes and batch, the precision's peak key (25.09 rows name
no precision: their footnote pairs differ in FP8 quantization granularity, so they are FP8), the release's FLOPs formula
(``configs/release``) and the release itself, Kimi K2 rows as layer-wise Muon (``dist_muon``, their footnote says
Muon; the Muon recipes' ``overlap_param_gather: false``), the others AdamW with the distributed optimizer. A pipeline
split that Megatron-Core cannot do evenly gets the split ``auto`` gives (:func:`recipe_layout`): the embedding and loss
counted as layers where that divides (Megatron-Bridge's Llama 3.1 405B and Qwen3 MoE recipes), else
:func:`bridgebench.model.layout.balanced_layout` (Kimi K2's 61 layers: the layouts of Megatron-Bridge's Kimi K2
recipe). Megatron-FSDP rows (the table's FSDP column) are priced as
Megatron-FSDP. An empty ETP cell is ETP = TP unless that cannot fit the expert grid (then 1, the MoE recipes' value);
a row whose sizes cannot fit its GPU count at all (DeepSeekV3 25.09 GB200: PP8 x EP64 on 256 GPUs) is left out.

The tables do not state the recipe's communication knobs. Where bridgebench ships the row's recipe at the row's release
(``recipes/<model>_<gpu>_<precision>/<release>.yaml``), the row takes that recipe's knobs exactly as the sweep and
``muon-cost`` compose them (:func:`bridgebench.sweep.time_config`: dispatcher, EP / TP overlap, FP8 attention,
recompute, DDP overlap flags), so a calibration row and a sweep point of the same recipe and release are priced
alike. A row whose own recipe lacks its release takes its recipe's knobs at the nearest release where that recipe
has the row's sizes and batch (the same tuned configuration: DeepSeek V3 and Qwen3 235B-A22B publish the 26.08
configurations from 26.06 on), else borrows the GPU-independent knobs (:data:`SHARED_KNOBS`: EP / TP
overlap, FP8 attention, recompute) of a recipe of the same model and precision on another GPU at that release
(NVIDIA's recipes of one model move together: Qwen3 30B-A3B gains EP overlap and FP8 attention at 26.06 on GB300 and
on the other GPUs at 26.08, the first release bridgebench ships them at). The other rows take those of NVIDIA's
perf recipes as the executed 26.02 - 26.06 dumps show them
(``tests/data/upstream_recipes``): sequence parallelism with TP > 1,
``tp_comm_overlap``, ``overlap_grad_reduce`` and ``overlap_param_gather`` on, the flex dispatcher
(:data:`DISPATCHER_BY_GPU`), no EP overlap, ``p2p`` context parallelism, no recompute.

Rows that take neither their own recipe's knobs (at the release, or at the nearest release with the same sizes)
take the settings the tables do not print from the same source the memory check of the same row uses
(:mod:`bridgebench.validation.published_points`: the installed Megatron-Bridge 0.6.2 perf recipe of the same model,
GPU and precision that matches the row best, corrected by ``published_settings.yaml`` where a release's own
launcher presets differ): :data:`UNPRINTED` -- recompute, dispatcher, Megatron-FSDP, gradient precision, FP8 param
gather, a corrected MBS -- and :data:`PERF_COMM` -- TP / EP overlap, shared-expert overlap, FP8 attention
(``mbridge_perf.json``, written by ``bridgebench recipes fields``). One row is then priced with one set of settings
for memory and time, and a group's rows keep the same knobs from release to release instead of switching between a
sibling's at one release and the defaults at the next (the 26.06 -> 26.08 GB200 rows of Qwen3 235B-A22B and
DeepSeek V3 took the GB300 recipe's EP overlap at 26.08 only). A model / GPU / precision with no 0.6.2 perf recipe
keeps the sibling-or-default knobs above.

25.09 rows name no precision: each takes the precision the memory check infers for it
(:func:`bridgebench.validation.published_points.precision_of`: the ``(y)`` half of an ``x (y)`` pair is block-scaled
-- MXFP8 on Blackwell --, the other half FP8 current scaling; the 25.11 table prints the same pairs as
``FP8-CS (FP8-MX)``), so each half joins its own precision's group and level.
"""

from __future__ import annotations

import csv
import dataclasses
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable, Iterable

from bridgebench.config.catalog import load_gpu, peak_key
from bridgebench.config.compose import ConfigError, compose, model_spec, recipe_releases
from bridgebench.config.rules.upstream import without_refused_ep_overlap
from bridgebench.model.layout import auto_split, split_layout
from bridgebench.model.spec import ModelSpec
from bridgebench.model.steptime.calibration import Calibration
from bridgebench.model.steptime.config import GpuFacts, TimeConfig
from bridgebench.model.steptime.fit import Row, calibrate, calibrate_with_bands
from bridgebench.model.steptime.predict import predict_time
from bridgebench.model.steptime.release import release_index
from bridgebench.paths import RECIPES_DIR
from bridgebench.results.records import PUBLISHED_CSV, RunRecord, load_published
from bridgebench.validation import metrics
from bridgebench.validation.gemm_fit import measured_gemm_rates
from bridgebench.validation.published_points import (
    PRINTED_KEYS,
    SettingsError,
    fsdp_cells,
    perf_match,
    precision_of,
    printed_replacement,
    record_point,
    release_entries,
)

if TYPE_CHECKING:
    from bridgebench.validation.muon_fit import MuonFit

__all__ = ["DISPATCHER_BY_GPU", "CalibrationReport", "fit", "fit_report", "published_rows", "release_index"]

#: the MoE dispatcher of NVIDIA's perf recipes by GPU (``moe_token_dispatcher_type``, ``moe_flex_dispatcher_backend``):
#: the flex dispatcher with HybridEP on Blackwell (the executed 26.02 - 26.06 dumps, ``tests/data/upstream_recipes``,
#: for GB200 / GB300 / B300; Megatron-Bridge 0.6.2 ``perf_recipes/{qwen,deepseek}/b200`` use HybridEP for their larger
#: expert groups) and DeepEP on Hopper (the 26.02 H100 dump). A recipe whose experts fit one node exchanges the same
#: bytes with any of them; the choice matters once the expert group leaves the node.
DISPATCHER_BY_GPU = {
    **dict.fromkeys(("gb200", "gb300", "b300", "b200"), ("flex", "hybridep")),
    **dict.fromkeys(("h100", "h200"), ("flex", "deepep")),
}


def _formula(release: str, cache: dict[str, str]) -> str:
    if release not in cache:
        cache[release] = str(compose([f"release='{release}'"]).release.flops_formula)
    return cache[release]


@lru_cache(maxsize=1)
def _fsdp_rows() -> frozenset[str]:
    """``file#n`` references (1-based data rows) of the published rows run with Megatron-FSDP (FSDP column set:
    ``1`` in older tables, the FSDP degree -- e.g. ``64`` -- in 26.02+)."""
    with open(PUBLISHED_CSV, newline="") as f:
        return frozenset(
            f"{PUBLISHED_CSV.name}#{n}"
            for n, row in enumerate(csv.DictReader(f), start=1)
            if (row.get("fsdp") or "0").strip() not in ("", "0")
        )


#: TimeConfig fields a recipe's composed config sets for its calibration rows (its knobs, not its sizes).
RECIPE_KNOBS = (
    "sequence_parallel", "recompute_granularity", "recompute_method", "recompute_num_layers", "recompute_modules",
    "tp_comm_overlap", "cp_comm_type", "moe_token_dispatcher_type", "moe_flex_dispatcher_backend",
    "overlap_moe_expert_parallel_comm", "moe_shared_expert_overlap", "overlap_grad_reduce", "overlap_param_gather",
    "bucket_size", "use_distributed_optimizer", "grad_reduce_in_fp32", "fp8_param_gather", "use_megatron_fsdp",
    "fp8_dot_product_attention", "fp8_output_proj", "moe_expert_rank_capacity_factor",
)  # fmt: skip


#: knobs a row may borrow from a recipe of the same model and precision on another GPU (not the dispatcher, the
#: sequence parallelism or the DDP flags, which follow the GPU and the sizes).
SHARED_KNOBS = (
    "recompute_granularity", "recompute_method", "recompute_num_layers", "recompute_modules", "tp_comm_overlap",
    "overlap_moe_expert_parallel_comm", "moe_shared_expert_overlap", "fp8_dot_product_attention", "fp8_output_proj",
)  # fmt: skip


def _knobs_of(
    model: str, system: str, precision: str, release: str, optimizer: str, sizes: frozenset[tuple[Any, ...]]
) -> tuple[bool, dict[str, Any]] | None:
    """(own, knobs): whether they are the group's own recipe's, and the knobs of a group's rows at a release: its
    own recipe's at the release; else its own recipe's at the nearest release (later on a tie) where that recipe
    has the sizes of one of the group's rows at this release (``sizes``, tuples of :data:`SIZES`: the same tuned
    configuration); else its own recipe's at the nearest release whatever its sizes (the record of the group's
    settings closest in time: an older release's row is not given 26.08's settings when bridgebench ships the
    recipe at a release in between; the row keeps its own sequence parallelism and FSDP use); else the shared knobs
    of a sibling recipe (same model and precision, another GPU) at the release (own = False); else None. All rows of
    a group at one release get the same knobs (a release's rows differ only in the sizes the table states)."""
    name = f"{model}_{system}_{precision}"
    own = recipe_knobs(name, release, optimizer)
    if own is not None:
        return True, {k: v for k, v in own if k in RECIPE_KNOBS}
    x = release_index(release)
    same = []
    for rel in recipe_releases(name):
        knobs = dict(recipe_knobs(name, rel, optimizer) or ())
        if knobs and tuple(knobs[k] for k in SIZES) in sizes:
            same.append((abs(release_index(rel) - x), -release_index(rel), knobs))
    if same:
        return True, {k: v for k, v in min(same, key=lambda t: t[:2])[2].items() if k in RECIPE_KNOBS}
    near = [(abs(release_index(rel) - x), -release_index(rel), rel) for rel in recipe_releases(name)]
    if near:
        knobs = dict(recipe_knobs(name, min(near)[2], optimizer) or ())
        keep = ("sequence_parallel", "use_megatron_fsdp")
        return True, {k: v for k, v in knobs.items() if k in RECIPE_KNOBS and k not in keep}
    for folder in sorted(RECIPES_DIR.glob(f"{model}_*_{precision}")):
        if folder.is_dir() and folder.name != f"{model}_{system}_{precision}":
            sib = recipe_knobs(folder.name, release, optimizer)
            if sib is not None:
                return False, {k: v for k, v in sib if k in SHARED_KNOBS}
    return None


@lru_cache(maxsize=256)
def recipe_knobs(recipe: str, release: str, optimizer: str) -> tuple[tuple[str, object], ...] | None:
    """The knobs (:data:`RECIPE_KNOBS`) of ``recipe`` at ``release`` as the sweep composes it, or None when
    bridgebench ships no such recipe / release."""
    try:
        if release not in recipe_releases(recipe):
            return None
    except (ConfigError, OSError):
        return None
    from bridgebench import sweep as engine

    base = engine.base_of([f"recipe={recipe}", f"release='{release}'", f"optimizer={optimizer}"])
    cfg = engine.time_config(engine.effective(base, {}), base.gpu, base.spec)
    return tuple((k, getattr(cfg, k)) for k in RECIPE_KNOBS + SIZES)


#: the sizes that make two rows the same tuned configuration.
SIZES = ("num_gpus", "tp", "pp", "vp", "cp", "ep", "etp_", "mbs", "gbs")


def published_rows(records: Iterable[RunRecord] | None = None) -> list[Row]:
    """Calibration rows from published records (see the module docstring); rows of models without a
    ``configs/model`` entry or without a TFLOP/s figure are left out. Knobs: :func:`_with_knobs`."""
    specs: dict[str, ModelSpec] = {}
    gpus: dict[str, GpuFacts] = {}
    formulas: dict[str, str] = {}
    fsdp = _fsdp_rows()
    cells = fsdp_cells()
    pending: list[tuple[tuple[str, str, str, str, str], Row, dict[str, Any], dict[str, Any], bool]] = []
    for printed in records if records is not None else load_published():
        # the sizes a release's launcher ran where the table prints others (published_settings.yaml)
        r = dataclasses.replace(printed, **printed_replacement(printed)) if printed.model else printed
        if not r.model or not r.model_tflops_per_gpu or not r.system:
            continue
        if r.model not in specs:
            specs[r.model] = model_spec(compose([f"model={r.model}"]))
        base = specs[r.model]
        mtp = 0 if "w/o MTP" in r.note else base.mtp_num_layers
        spec = base.replace(seq_length=r.seq_length, mtp_num_layers=mtp) if (
            r.seq_length != base.seq_length or mtp != base.mtp_num_layers
        ) else base  # fmt: skip
        if r.system not in gpus:
            gpus[r.system] = GpuFacts.from_mapping(load_gpu(r.system))
        pp, tp, ep = r.pp or 1, r.tp or 1, r.ep or 1
        vp = r.vp if (r.vp and r.vp > 1 and pp > 1) else None
        etp = r.etp
        if etp is None and r.num_gpus % (tp * ep * pp):
            etp = 1  # an empty ETP cell where ETP = TP cannot fit the expert grid: the recipes' ETP 1
        if r.num_gpus % ((etp or tp) * ep * pp) or r.num_gpus % (tp * pp * (r.cp or 1)):
            continue  # a published row whose sizes do not fit its GPU count (DeepSeekV3 25.09 GB200 PP8 x EP64 on 256)
        muon = r.optimizer == "muon"
        dispatcher, backend = DISPATCHER_BY_GPU.get(r.system, ("alltoall", None))
        cfg = TimeConfig.from_flat(
            gpu=gpus[r.system],
            peak_key=peak_key(r.precision) if r.precision else "fp8",
            num_gpus=r.num_gpus,
            mbs=r.mbs or 1,
            gbs=r.gbs,
            tp=tp,
            pp=pp,
            vp=vp,
            cp=r.cp or 1,
            ep=ep,
            etp=etp,
            pipeline_model_parallel_layout=recipe_layout(spec, pp, vp),
            optimizer="dist_muon" if muon else "adam",
            flops_formula=_formula(r.release, formulas),
            release=r.release,
            sequence_parallel=tp > 1,
            tp_comm_overlap=True,
            moe_token_dispatcher_type=dispatcher,
            moe_flex_dispatcher_backend=backend,
            use_distributed_optimizer=not muon,
            overlap_param_gather=not muon,
            use_megatron_fsdp=r.provenance.get("reference") in fsdp,
        )
        precision = r.precision or precision_of(r)
        if not r.precision:
            cfg = dataclasses.replace(cfg, peak_key=peak_key(precision))
        key = (r.model, r.system, precision, r.release, "muon" if muon else "adamw")
        row = Row(spec=spec, cfg=cfg, tflops=float(r.model_tflops_per_gpu), release=r.release, model=r.model_label,
                  system=r.system, precision=precision)  # fmt: skip
        drop = bool(r.provenance.get("moe_token_drop"))
        pending.append((key, row, _unprinted(r, cells), _release_knobs(r, cells), drop))
    return _with_knobs(pending)


def recipe_layout(spec: ModelSpec, pp: int, vp: int | None) -> str | None:
    """The pipeline split a published row ran, as a layout string (:func:`bridgebench.model.layout.split_layout`):
    :func:`bridgebench.model.layout.auto_split`, the split ``plan`` and the sweep give ``auto`` -- an even split,
    else the embedding and loss counted as layers (Megatron-Bridge 0.6.2's Llama 3.1 405B and Qwen3 MoE base recipes:
    ``account_for_embedding/loss_in_pipeline_split``), else a balanced layout (its Kimi K2 rule; DeepSeek V3 with
    MTP). Stop 36: the calibration read a balanced layout for every uneven split, so Llama 3.1 405B on PP 8 x VP 4
    was priced with 20 layers on its first rank where its recipe builds 15 or 16 on each (docs/sweeps.md)."""
    split = auto_split(spec.num_layers, pp, vp, spec.mtp_layers)
    return split_layout(spec.num_layers, pp, vp, spec.mtp_layers, split)


def _with_knobs(
    pending: list[tuple[tuple[str, str, str, str, str], Row, dict[str, Any], dict[str, Any], bool]],
) -> list[Row]:
    """Rows with their knobs: their group's recipe's at the release (:func:`_knobs_of`), else the settings the row
    does not print (:func:`_unprinted`); over either, the knobs its release's launcher ran where those differ
    (:func:`_release_knobs`); the token-drop settings of a token-drop row; and no EP overlap where a row
    printed at PP > 1 without VP cannot have run its recipe's (Megatron-Core refuses it there: rule
    ``ep_overlap_needs_vp``, ``docs/rules.md``; 7 rows)."""
    sizes: dict[tuple[str, str, str, str, str], set[tuple[Any, ...]]] = {}
    for key, row, *_ in pending:
        sizes.setdefault(key, set()).add(tuple(getattr(row.cfg, k) for k in SIZES))
    knobs = {key: _knobs_of(*key, frozenset(v)) for key, v in sizes.items()}
    out = []
    for key, row, unprinted, launcher, token_drop in pending:
        own, values = knobs[key] or (False, None)
        if values:
            row = dataclasses.replace(row, cfg=row.cfg.with_dims(**values))
        if unprinted and not own:
            cfg = row.cfg.with_dims(**unprinted)
            if (cfg.pp, cfg.vp) != (row.cfg.pp, row.cfg.vp):
                layout = recipe_layout(row.spec, cfg.pp, cfg.vp)
                cfg = dataclasses.replace(cfg, pipeline_model_parallel_layout=layout)
            row = dataclasses.replace(row, cfg=cfg)
        if launcher:
            row = dataclasses.replace(row, cfg=row.cfg.with_dims(**launcher))
        if token_drop:
            row = dataclasses.replace(row, cfg=row.cfg.with_dims(**TOKEN_DROP))
        out.append(dataclasses.replace(row, cfg=without_refused_ep_overlap(row.cfg)[0]))
    return out


#: what a published token-drop MoE run (25.09's '(tokendrop)' rows, ``provenance["moe_token_drop"]``) ran:
#: Megatron-Bridge ``training/utils/moe_token_drop.py::apply_moe_token_drop`` defaults (capacity factor 1.0, inputs
#: padded to capacity) on the ``alltoall`` dispatcher (the 25.09 launcher turns DeepEP off with token drop:
#: ``scripts/performance`` "Using token drop, disabling DeepEP"), whatever a later recipe's dispatcher.
TOKEN_DROP = {
    "moe_expert_capacity_factor": 1.0,
    "moe_pad_expert_input_to_capacity": True,
    "moe_token_dispatcher_type": "alltoall",
    "moe_flex_dispatcher_backend": None,
}


#: settings a published point takes from its 0.6.2 perf-recipe match (``published_points``) -> TimeConfig field.
UNPRINTED = {
    "model.recompute_granularity": "recompute_granularity",
    "model.recompute_method": "recompute_method",
    "model.recompute_num_layers": "recompute_num_layers",
    "model.recompute_modules": "recompute_modules",
    "model.moe_token_dispatcher_type": "moe_token_dispatcher_type",
    "model.moe_flex_dispatcher_backend": "moe_flex_dispatcher_backend",
    "ddp.use_megatron_fsdp": "use_megatron_fsdp",
    "mixed_precision.grad_reduce_in_fp32": "grad_reduce_in_fp32",
    "mixed_precision.fp8_param_gather": "fp8_param_gather",
    "train.micro_batch_size": "mbs",
    # printed sizes (unchanged) or, where a release's own launcher preset replaces them (published_settings.yaml,
    # ``replaces_printed``), the preset's
    "model.tensor_model_parallel_size": "tp",
    "model.pipeline_model_parallel_size": "pp",
    "model.virtual_pipeline_model_parallel_size": "vp",
    "model.context_parallel_size": "cp",
    "model.expert_model_parallel_size": "ep",
    # an empty ETP cell: the perf-recipe match's ETP where its TP and EP are the row's (as the memory check takes
    # it), not ETP = TP -- DeepSeek V3 on 1024 H100 (TP 2, EP 64) runs ETP 1, one expert group in 64 GPUs, not 128
    "model.expert_tensor_parallel_size": "etp",
}
#: communication knobs read from the same perf-recipe match (``mbridge_perf.json``; an unset ``comm_overlap`` is
#: Megatron-Bridge's default: no overlap) -> TimeConfig field.
PERF_COMM = {
    "comm_overlap.tp_comm_overlap": "tp_comm_overlap",
    "comm_overlap.overlap_moe_expert_parallel_comm": "overlap_moe_expert_parallel_comm",
    "model.moe_shared_expert_overlap": "moe_shared_expert_overlap",
    "mixed_precision.fp8_dot_product_attention": "fp8_dot_product_attention",
    "model.fp8_output_proj": "fp8_output_proj",
}
_FLAGS = ("use_megatron_fsdp", "grad_reduce_in_fp32", "fp8_param_gather", *PERF_COMM.values())
#: knobs a ``published_settings.yaml`` entry may set -> TimeConfig field (its sizes: ``printed_replacement``)
ENTRY_KNOBS = {
    **{k: f for k, f in UNPRINTED.items() if k not in PRINTED_KEYS},
    **PERF_COMM,
    "model.moe_expert_rank_capacity_factor": "moe_expert_rank_capacity_factor",
}


#: ``published_settings.yaml`` keys the time model does not price, and why (the memory points apply them)
ENTRY_UNPRICED = {
    "model.cpu_offloading": "activation offloading: a memory term; its copies overlap compute (not a time term)",
    "model.cpu_offloading_num_layers": "activation offloading: a memory term (not a time term)",
    "model.moe_paged_stash": "a memory layout of the HybridEP token budget; the budget itself is priced "
    "(moe_expert_rank_capacity_factor)",
}


def entry_knobs(entry: dict[str, Any]) -> dict[str, Any]:
    """TimeConfig fields of one ``published_settings.yaml`` entry's knobs (its sizes: ``printed_replacement``).

    Raises:
        SettingsError: a settings key the time model neither prices (:data:`ENTRY_KNOBS`), reads as a printed size,
            nor declares unpriced (:data:`ENTRY_UNPRICED`) -- rule ``published_settings``; never dropped silently.
    """
    unknown = sorted(set(entry["settings"]) - set(ENTRY_KNOBS) - set(PRINTED_KEYS) - set(ENTRY_UNPRICED))
    if unknown:
        raise SettingsError(
            f"rule published_settings: the entry for {entry['model']} {entry['gpu']} {entry['releases']} sets "
            f"{', '.join(unknown)}, which the time model neither prices nor declares unpriced "
            "(time_calibration.ENTRY_KNOBS / ENTRY_UNPRICED)"
        )
    return {ENTRY_KNOBS[k]: v for k, v in entry["settings"].items() if k in ENTRY_KNOBS}


def _as_flags(out: dict[str, Any]) -> None:
    """The :data:`_FLAGS` among ``out``'s TimeConfig fields as booleans (YAML and recipes may give 0 / 1), in place."""
    for f in set(_FLAGS) & set(out):
        out[f] = bool(out[f])


def _release_knobs(r: RunRecord, cells: dict[str, str]) -> dict[str, Any]:
    """TimeConfig fields of the knobs the row's release's launcher ran where the recipe it is read from says
    otherwise (``published_settings.yaml``, traced per release: dispatcher, EP overlap, recompute modules, the
    HybridEP token budget). Applied over the group's own recipe knobs too: a nearest recipe of another release is
    not the run's record where the release's launcher is."""
    cell = cells.get(str(r.provenance.get("reference")), "")
    out: dict[str, Any] = {}
    for entry in release_entries(r, precision_of(r), None if cell == "" else int(cell) > 0):
        if not entry.get("cannot_run_as_printed"):
            out.update(entry_knobs(entry))
    _as_flags(out)
    if "recompute_modules" in out:
        out["recompute_modules"] = tuple(out["recompute_modules"] or ())
    return out


def _unprinted(r: RunRecord, cells: dict[str, str]) -> dict[str, Any]:
    """TimeConfig fields of the settings the published row ``r`` does not print, from the point the memory check
    builds for it (:func:`bridgebench.validation.published_points.record_point`, its 0.6.2 perf-recipe match and the
    release's own settings) -- empty when the row has no perf-recipe match (only the base recipe)."""
    cell = cells.get(str(r.provenance.get("reference")), "")
    _, delta, _ = record_point(r, cell)
    if "model.recompute_granularity" not in delta:
        return {}  # the release's own bridgebench recipe, or no 0.6.2 perf recipe of this model / GPU / precision
    out = {f: delta[k] for k, f in UNPRINTED.items() if k in delta}
    match = perf_match(r, precision_of(r), None if cell == "" else int(cell) > 0)
    out.update({f: match.values[k] for k, f in PERF_COMM.items() if k in match.values})
    out.update({f: delta[k] for k, f in PERF_COMM.items() if k in delta})  # the release's own settings
    mods = tuple(out.get("recompute_modules") or ())
    if out.get("recompute_granularity") == "selective" and not mods:
        mods = ("core_attn",)  # Megatron-Core TransformerConfig.recompute_modules default
    out["recompute_modules"] = mods
    _as_flags(out)
    if out.get("moe_flex_dispatcher_backend") and not out.get("moe_token_dispatcher_type"):
        out["moe_token_dispatcher_type"] = "flex"
    pp, vp = out.get("pp") or 1, out.get("vp")
    out["vp"] = vp if (vp and vp > 1 and pp > 1) else None
    return out


def muon_constants(rows: list[Row]) -> tuple[float, float, Any]:
    """(``kappa``, ``ns_efficiency``, the :class:`bridgebench.validation.muon_fit.MuonFit`): Muon's constants fitted on
    the blog's Table 1 pairs at a calibration of ``rows`` with the first-principles constants (the GEMM rates do not
    enter the Muon delta: :mod:`bridgebench.validation.muon_fit`)."""
    from bridgebench.validation.muon_fit import fit_muon

    m = fit_muon(calibrate(rows, measured_rates=measured_gemm_rates()))
    return m.kappa, m.ns_efficiency, m


def fit(rows: list[Row] | None = None, *, releases: Iterable[str] | None = None) -> Calibration:
    """Fit the time calibration on the published rows (of ``releases`` only, when given), with Muon's constants
    fitted on the blog's pairs (:func:`muon_constants`); no bands (see
    :func:`bridgebench.model.steptime.fit.calibrate_with_bands`)."""
    rows = rows if rows is not None else published_rows()
    kappa, ns_eff, _ = muon_constants(rows)
    if releases is not None:
        keep = set(releases)
        rows = [r for r in rows if r.release in keep]
    return calibrate(rows, kappa=kappa, ns_efficiency=ns_eff, measured_rates=measured_gemm_rates())


@dataclass(frozen=True, kw_only=True)
class CalibrationReport:
    """What ``bridgebench calibrate`` fits and prints: the calibration with its bands, and its fit statistics
    (relative errors of model TFLOP/s/GPU; 0.05 = 5 %).

    ``median_abs_error`` and ``geometric_rms`` are the in-sample fit over all ``rows``; ``held_out_mape`` is over the
    ``held_out_rows`` predicted by a fit without their release
    (:func:`bridgebench.model.steptime.fit.calibrate_with_bands`).
    """

    calibration: Calibration
    rows: int
    releases: tuple[str, ...]
    median_abs_error: float
    geometric_rms: float
    held_out_mape: float
    held_out_rows: int
    muon: MuonFit | None = None

    @property
    def source(self) -> str:
        """The provenance line written into ``configs/calibration/<name>.yaml`` (``source``)."""
        return (
            f"bridgebench calibrate --write: {self.rows} published rows of releases {', '.join(self.releases)} "
            f"(results/reference/published_pretrain_throughput.csv); fit error: median |error| "
            f"{self.median_abs_error:.1%}, geometric RMS {self.geometric_rms:.1%}; held-out (leave one release out) "
            f"MAPE {self.held_out_mape:.1%} over {self.held_out_rows} rows"
        )


def fit_report(rows: list[Row] | None = None, progress: Callable[[str], None] | None = None) -> CalibrationReport:
    """Fit the time model on the published rows (default: :func:`published_rows`) with Muon's constants fitted on
    the blog's pairs (:func:`muon_constants`) and the conformal bands by distance
    (:func:`bridgebench.model.steptime.fit.calibrate_with_bands`: about 140 held-out fits, 3-8 minutes here), and
    score it with :mod:`bridgebench.validation.metrics`; ``progress`` gets one line per held-out fit."""
    rows = rows if rows is not None else published_rows()
    if progress:
        progress("fitting Muon's ns_efficiency and kappa on the blog's Table 1 pairs")
    kappa, ns_eff, muon = muon_constants(rows)
    cal, held = calibrate_with_bands(
        rows, progress=progress, kappa=kappa, ns_efficiency=ns_eff, measured_rates=measured_gemm_rates()
    )
    errors = [predict_time(r.spec, r.cfg, cal).tflops_per_gpu / r.tflops - 1 for r in rows]
    out_errors = [metrics.rel_error(p, r.tflops) for r, p in zip(rows, held) if p]
    return CalibrationReport(
        calibration=cal,
        rows=len(rows),
        releases=tuple(sorted({r.release for r in rows}, key=lambda x: [int(p) for p in x.split(".")])),
        median_abs_error=metrics.median_abs(errors),
        geometric_rms=metrics.geometric_rms(errors),
        held_out_mape=metrics.mape(out_errors),
        held_out_rows=len(out_errors),
        muon=muon,
    )
