"""NVIDIA's published pretraining runs as sweep points: does bridgebench's pipeline let each one through?

Every row of ``results/reference/published_pretrain_throughput.csv`` whose model has a ``configs/model`` entry ran,
so the memory model and the validity rules must keep it (a "false prune" is one they remove). Each row becomes a point
of the sweep pipeline (:func:`bridgebench.sweep.run_pipeline`, the same code ``sweep`` and ``predict`` run):

- base: the bridgebench recipe of (model, GPU, precision) at the row's release when one exists (Megatron-Bridge's own
  perf recipe of that release, field by field), else ``model=`` ``gpu=`` ``precision=`` at the release (25.09 rows
  name no precision: FP8, as their footnotes pair two FP8 quantization granularities);
- the row's printed sizes (GPUs, GBS, MBS, sequence length, TP, PP, VP, CP, EP, ETP, FSDP) as the point's values;
- a release's own settings where its launcher presets differ from 0.6.2's recipes (``published_settings.yaml``,
  each entry read from the release's tag). An entry may replace printed sizes only where the printed configuration
  cannot run and the release's launcher has one preset for the row (``replaces_printed``: the row's
  ``printed_replaced`` names what changed); an entry with ``cannot_run_as_printed`` changes nothing and gives the
  checked reason a refused row keeps;
- what the tables do not print -- recompute, Megatron-FSDP's sharding and double buffer, activation offloading,
  the optimizer's dtypes, FP8 parameter gather, gradient precision, loss fusion, sequence parallelism -- from the
  installed Megatron-Bridge 0.6.2 perf recipe of the same (model, GPU, precision) that matches the row best (same
  FSDP use, then the most equal sizes; ``src/bridgebench/config/mbridge_perf.json``, ``bridgebench recipes fields``):
  26.08's settings on an older release's sizes, the closest record there is. Its pipeline layout is taken when its
  PP and VP are the row's; otherwise ``auto`` (the recipe's own split where it fits, else Megatron-Core's).

:func:`published_points` returns one row per published row with the pipeline's columns (memory per GPU, fits,
``pruned_by``, predicted step time, TFLOP/s/GPU, band) and where each setting came from; ``bridgebench check-published
--models`` and ``benchmarks/validate_memory_published.py`` print it.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import pandas as pd
import yaml

from bridgebench import sweep as engine
from bridgebench.config import calibration as calib_mod
from bridgebench.config import catalog, schema
from bridgebench.config.compose import recipe_releases
from bridgebench.config.schema import mbridge_perf
from bridgebench.results.records import PUBLISHED_CSV, RunRecord, load_published

#: the perf-recipe fields a published point takes (what the tables do not print)
SETTINGS = (
    *schema.RECOMPUTE_FIELDS,
    *schema.ACTIVATION_FIELDS,
    "model.moe_token_dispatcher_type",
    "model.moe_flex_dispatcher_backend",
    *schema.FSDP_FIELDS,
    "ddp.grad_reduce_in_fp32",
    "mixed_precision.grad_reduce_in_fp32",
    "mixed_precision.fp8_param_gather",
    *schema.OPTIMIZER_STATE_FIELDS,
    "env_vars.PYTORCH_CUDA_ALLOC_CONF",
)
#: rules that say the published sizes themselves cannot multiply out (a transcription problem of the table, not a
#: configuration the pipeline refuses)
INCONSISTENT = ("world_size", "expert_grid")
_SIZES = ("tp", "pp", "cp", "ep", "vp")


@dataclass(frozen=True, kw_only=True)
class PerfMatch:
    function: str | None
    source: str
    values: dict[str, Any]


SETTINGS_FILE = Path(__file__).resolve().parent / "published_settings.yaml"


#: keys of a ``published_settings.yaml`` entry: required, then optional
ENTRY_REQUIRED = ("releases", "model", "gpu", "precision", "settings", "source")
ENTRY_OPTIONAL = ("fsdp", "replaces_printed", "cannot_run_as_printed")


class SettingsError(ValueError):
    """A ``published_settings.yaml`` entry bridgebench cannot apply as written (rule ``published_settings``)."""


def check_entries(entries: list[dict[str, Any]], where: str = "published_settings.yaml") -> list[dict[str, Any]]:
    """Check release-settings entries before anything reads them; returns ``entries`` unchanged.

    Every entry has the keys of :data:`ENTRY_REQUIRED` (and no others but :data:`ENTRY_OPTIONAL`), and every key of
    its ``settings`` is ``<section>.<field>`` of a Megatron-Bridge section of the installed release
    (``config/mbridge_fields.json``, read from the ConfigContainer dataclasses) or the ``num_gpus`` size.

    Raises:
        SettingsError: a missing or unknown entry key, or a settings key that is no Megatron-Bridge field (rule
            ``published_settings``, with the closest known names). A misspelled key would otherwise be dropped by
            the time rows (they read only the knobs they price) while the memory points refuse it.
    """
    import difflib

    sections = schema.mbridge_fields()["sections"]
    for n, entry in enumerate(entries, start=1):
        head = f"{where} entry {n} ({entry.get('model')} {entry.get('gpu')} {entry.get('releases')})"
        missing = [k for k in ENTRY_REQUIRED if k not in entry]
        if missing:
            raise SettingsError(f"rule published_settings: {head} lacks {', '.join(missing)}")
        for key in entry:
            if key not in (*ENTRY_REQUIRED, *ENTRY_OPTIONAL):
                close = difflib.get_close_matches(key, [*ENTRY_REQUIRED, *ENTRY_OPTIONAL], n=1)
                hint = f"; did you mean {close[0]}?" if close else ""
                raise SettingsError(f"rule published_settings: {head} has no key {key!r}{hint}")
        for key in entry["settings"] or {}:
            section, _, field = key.partition(".")
            if key == "num_gpus" or field in sections.get(section, {}):
                continue
            known = [f"{s}.{f}" for s, fields in sections.items() for f in fields]
            close = difflib.get_close_matches(key, known, n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise SettingsError(
                f"rule published_settings: {head} sets {key!r}, which is not a field of a Megatron-Bridge section{hint}"
            )
    return entries


@functools.cache
def release_settings() -> list[dict[str, Any]]:
    """``published_settings.yaml``: per-release settings of published runs that 0.6.2's perf recipes do not give
    (each entry: ``releases``, ``model``, ``gpu``, ``precision``, optional ``fsdp``, ``settings``, ``source``).

    Raises:
        SettingsError: an entry :func:`check_entries` refuses.
    """
    entries: list[dict[str, Any]] = yaml.safe_load(SETTINGS_FILE.read_text())
    return check_entries(entries)


def release_entries(r: RunRecord, precision: str, fsdp: bool | None) -> list[dict[str, Any]]:
    """The ``published_settings.yaml`` entries of a record: same release, model, GPU, precision (and FSDP use where
    the entry names it)."""
    return [
        e for e in release_settings()
        if r.release in e["releases"] and (e["model"], e["gpu"], e["precision"]) == (r.model, r.system, precision)
        and e.get("fsdp", fsdp) == fsdp
    ]  # fmt: skip


#: marker in a point's values: the printed sizes a ``replaces_printed`` entry changed (removed before the pipeline)
_REPLACED = "_printed_replaced"
#: printed sizes of a published row -> ``RunRecord`` fields (FSDP use, printed too, is no record field)
_RECORD_FIELDS = {
    "num_gpus": "num_gpus", "train.global_batch_size": "gbs", "train.micro_batch_size": "mbs",
    "model.seq_length": "seq_length", "model.tensor_model_parallel_size": "tp",
    "model.pipeline_model_parallel_size": "pp", "model.virtual_pipeline_model_parallel_size": "vp",
    "model.context_parallel_size": "cp", "model.expert_model_parallel_size": "ep",
    "model.expert_tensor_parallel_size": "etp",
}  # fmt: skip
#: printed sizes of a published row (an entry that changes one must say ``replaces_printed``)
PRINTED_KEYS = (*_RECORD_FIELDS, "ddp.use_megatron_fsdp")


def precision_of(r: RunRecord) -> str:
    """The record's precision; 25.09 names none: its rows are FP8 -- the ``(y)`` half of an ``x (y)`` pair is the
    block-scaled one (MXFP8 on Blackwell; the H100 blockwise recipe has no configs/precision option, so FP8-CS,
    the same bytes), the other half per-tensor current scaling."""
    if r.precision:
        return r.precision
    if "values in parentheses" in r.note and r.system in ("gb200", "b200", "gb300", "b300"):
        return "mxfp8"
    return "fp8_cs"


def fsdp_cells() -> dict[str, str]:
    """``reference`` (``file#row``) -> the row's ``fsdp`` cell (``RunRecord`` does not carry it)."""
    df = pd.read_csv(PUBLISHED_CSV, dtype=str).fillna("")
    return {f"{PUBLISHED_CSV.name}#{n}": str(v) for n, v in enumerate(df["fsdp"], start=1)}


def perf_match(r: RunRecord, precision: str, fsdp: bool | None) -> PerfMatch:
    """The installed perf recipe of the record's (model, GPU, precision) closest to the row: FSDP use first (when
    the table says), then equal sizes (TP, PP, CP, EP, VP 4 points each), GPU count (2), MBS (1), the plain variant
    (1)."""
    best, score = None, -1
    for name, rec in mbridge_perf()["recipes"].items():
        if (rec["model"], rec["gpu"], rec["precision"]) != (r.model, r.system, precision):
            continue
        v = rec["values"]
        if fsdp is not None and bool(v["ddp.use_megatron_fsdp"]) != fsdp:
            continue
        theirs = {
            "tp": v["model.tensor_model_parallel_size"],
            "pp": v["model.pipeline_model_parallel_size"],
            "cp": v["model.context_parallel_size"],
            "ep": v["model.expert_model_parallel_size"],
            "vp": v["model.virtual_pipeline_model_parallel_size"],
        }
        mine = {"tp": r.tp or 1, "pp": r.pp or 1, "cp": r.cp or 1, "ep": r.ep or 1, "vp": _vp(r)}
        s = 4 * sum(theirs[k] == mine[k] for k in _SIZES) + 2 * (rec["num_gpus"] == r.num_gpus)
        s += (v["train.micro_batch_size"] == (r.mbs or 1)) + (rec["variant"] is None)
        if s > score:
            best, score = (name, rec), s
    if best is None:
        return PerfMatch(
            function=None,
            source="no Megatron-Bridge 0.6.2 perf recipe for this model, GPU and precision: base recipe",
            values={},
        )
    name, rec = best
    return PerfMatch(
        function=name,
        source=f"megatron-bridge {mbridge_perf()['megatron_bridge']} {rec['source']}",
        values=rec["values"],
    )


def _vp(r: RunRecord) -> int | None:
    return r.vp if (r.vp and r.vp > 1 and (r.pp or 1) > 1) else None


def _launcher_sp(v: dict[str, Any], tp: int) -> bool:
    """``sequence_parallel`` as the launcher runs a matched recipe at TP ``tp``: its ``-tp`` sets it to TP > 1
    (Megatron-Bridge v0.3.1 ``scripts/performance/utils/overrides.py``); the recipe's own flag holds at its own TP."""
    own_tp = v.get("model.tensor_model_parallel_size")
    return tp > 1 and (bool(v.get("model.sequence_parallel", True)) if own_tp in (None, tp) else True)


def record_point(r: RunRecord, fsdp_cell: str) -> tuple[list[str], dict[str, Any], str]:
    """(base overrides, point values, where the unprinted settings came from) of one published record."""
    precision = precision_of(r)
    recipe = f"{r.model}_{r.system}_{precision}"
    release = f"release='{r.release}'"
    optimizer = ["optimizer=muon"] if r.optimizer == "muon" else []
    tp, pp, cp, ep, vp = r.tp or 1, r.pp or 1, r.cp or 1, r.ep or 1, _vp(r)
    delta: dict[str, Any] = {
        "num_gpus": r.num_gpus,
        "train.global_batch_size": r.gbs,
        "train.micro_batch_size": r.mbs or 1,
        "model.seq_length": r.seq_length,
        "model.tensor_model_parallel_size": tp,
        "model.pipeline_model_parallel_size": pp,
        "model.virtual_pipeline_model_parallel_size": vp,
        "model.context_parallel_size": cp,
        "model.expert_model_parallel_size": ep,
    }
    if "w/o MTP" in r.note:
        delta["model.mtp_num_layers"] = 0
    if r.release in recipe_releases(recipe):
        if r.etp:
            delta["model.expert_tensor_parallel_size"] = r.etp
        source = _apply_release_settings(r, precision, None, delta, f"recipes/{recipe}/{r.release}.yaml")
        return [f"recipe={recipe}", release, *optimizer], delta, source
    fsdp = None if fsdp_cell == "" else int(fsdp_cell) > 0
    match = perf_match(r, precision, fsdp)
    v = match.values
    for key in SETTINGS:
        if v.get(key) is not None or (key in v and not key.startswith("env_vars.")):
            delta[key] = v[key]
    if fsdp is not None:
        delta["ddp.use_megatron_fsdp"] = fsdp
        if fsdp:
            delta["ddp.data_parallel_sharding_strategy"] = "optim_grads_params"
    delta["model.sequence_parallel"] = _launcher_sp(v, tp)
    source = _apply_release_settings(r, precision, fsdp, delta, match.source)
    etp = r.etp
    if etp is None and v and (v["model.tensor_model_parallel_size"], v["model.expert_model_parallel_size"]) == (tp, ep):
        etp = v["model.expert_tensor_parallel_size"]
    if etp is None and r.num_gpus % (tp * ep * pp):
        etp = 1  # an empty ETP cell where ETP = TP cannot fit the expert grid: the MoE recipes' ETP 1
    if etp is not None:
        delta["model.expert_tensor_parallel_size"] = etp
    same_split = v and (v["model.pipeline_model_parallel_size"], v["model.virtual_pipeline_model_parallel_size"]) == (
        pp,
        vp,
    )
    if same_split and "model.mtp_num_layers" not in delta:
        for key in ("pipeline_model_parallel_layout", "num_layers_in_first_pipeline_stage",
                    "num_layers_in_last_pipeline_stage", "account_for_embedding_in_pipeline_split",
                    "account_for_loss_in_pipeline_split"):  # fmt: skip
            delta[f"model.{key}"] = v[f"model.{key}"]
    else:
        if v:
            delta["model.account_for_embedding_in_pipeline_split"] = v["model.account_for_embedding_in_pipeline_split"]
            delta["model.account_for_loss_in_pipeline_split"] = v["model.account_for_loss_in_pipeline_split"]
        delta["model.pipeline_model_parallel_layout"] = engine.AUTO
    # the release only names the software level and the FLOPs formula here: one compose per (model, GPU, precision)
    delta["release.name"] = r.release
    delta["accounting.flops_formula"] = catalog.release(r.release)["flops_formula"]
    base = [f"model={r.model}", f"gpu={r.system}", f"precision={precision}", *optimizer]
    return base, delta, source


def printed_replacement(r: RunRecord) -> dict[str, Any]:
    """The ``RunRecord`` fields (``tp``, ``pp``, ``vp``, ``ep``, ``mbs`` ...) that a ``replaces_printed`` entry of
    ``published_settings.yaml`` sets for the record: the sizes its release's launcher ran where the table prints
    others (empty for most rows). FSDP use is not a record field and stays with :func:`record_point`."""
    out: dict[str, Any] = {}
    for entry in release_entries(r, precision_of(r), None):
        if entry.get("replaces_printed") and not entry.get("cannot_run_as_printed"):
            out.update({_RECORD_FIELDS[k]: v for k, v in entry["settings"].items() if k in _RECORD_FIELDS})
    return out


def _apply_release_settings(r: RunRecord, precision: str, fsdp: bool | None, delta: dict[str, Any], source: str) -> str:
    """The release's own launcher settings (``published_settings.yaml``) applied to a point's values ``delta``;
    returns ``source`` with them named (and the printed sizes they replace, marked in ``delta``).

    Raises:
        ValueError: an entry changes printed sizes without ``replaces_printed: true``.
    """
    for entry in release_entries(r, precision, fsdp):
        if entry.get("cannot_run_as_printed"):
            continue
        settings = entry["settings"].items()
        replaced = [f"{k} {delta.get(k)} -> {v}" for k, v in settings if k in PRINTED_KEYS and delta.get(k) != v]
        if replaced and not entry.get("replaces_printed"):
            raise ValueError(
                f"published_settings.yaml entry for {r.release} {r.model} {r.system} {precision} changes printed "
                f"sizes ({', '.join(replaced)}) without replaces_printed: true"
            )
        delta.update(entry["settings"])
        source += f" + {r.release}'s own settings ({entry['source']})"
        if replaced:
            source += f" [printed configuration replaced: {', '.join(replaced)}]"
            delta[_REPLACED] = ", ".join(replaced)
    return source


#: point values that stand for the release group (set through ``release=`` in a point's overrides)
_RELEASE_KEYS = ("release.name", "accounting.flops_formula")


def _overrides(base: engine.Base, delta: dict[str, Any], release: str) -> list[str]:
    """The overrides that compose a published point (``bridgebench predict`` takes them)."""
    rest = {k: v for k, v in delta.items() if k not in _RELEASE_KEYS}
    ov = engine.point_overrides(base, rest)
    if "release.name" in delta:
        ov.insert(len(base.overrides), f"release='{release}'")
    return ov


def published_points(
    records: Iterable[RunRecord] | None = None, calib: calib_mod.ModelCalibration | None = None
) -> pd.DataFrame:
    """Every published row of a model bridgebench knows, through the sweep pipeline (see the module docstring).

    One row per published row: ``release``, ``model``, ``system``, ``precision``, ``num_gpus``, the sizes,
    ``published_tflops``, ``settings_source``, ``overrides`` (what composes the point: ``bridgebench predict`` takes
    them), the pipeline's columns (``status``, ``rule``, ``reason``, ``mem_*_gb``, ``mem_total_gb``, ``hbm_gb``,
    ``hbm_usable_gb``, ``step_time_s``, ``tflops_per_gpu``, ``band_pct``, ``t_<term>_s`` ...), ``fits`` (bool),
    ``pruned_by`` (``None``, or the rule id -- ``memory`` for the memory model) and ``inconsistent`` (the printed
    configuration cannot have run as printed: its sizes do not multiply out to the GPU count, or its weights,
    gradients and optimizer state alone exceed the GPU's memory, whatever the activations).

    Args:
        records: published records (default: the shipped table).
        calib: the calibration (default ``configs/calibration/default.yaml``); pass one fitted without a row's release
            to score that release held out.
    """
    calib = calib or calib_mod.load()
    records = [r for r in (records if records is not None else load_published()) if r.model and r.system]
    cells = fsdp_cells()
    bases: dict[tuple[str, ...], engine.Base] = {}
    pairs, meta = [], []
    notes = []
    for r in records:
        cell = cells.get(str(r.provenance.get("reference")), "")
        ov, delta, source = record_point(r, cell)
        entries = release_entries(r, precision_of(r), None if cell == "" else int(cell) > 0)
        replaced = delta.pop(_REPLACED, None)
        why = " ".join(e["cannot_run_as_printed"] for e in entries if e.get("cannot_run_as_printed"))
        notes.append((replaced, why))
        key = tuple(ov)
        if key not in bases:
            bases[key] = engine.base_of(ov)
            bases[key].index = len(bases) - 1
        pairs.append((bases[key], delta))
        meta.append((r, source, ov, delta))
    rows = engine.run_pipeline(list(bases.values()), calib, pairs=pairs, total=len(pairs))
    first = {r["point_id"]: r for r in rows if r["status"] != "duplicate"}
    rows = [  # a row printed twice (25.09's 'x (y)' pairs) is one point: it shares the first one's outcome
        {**first[r["point_id"]], "reason": r["reason"], "duplicate_of": r["point_id"]} if r["status"] == "duplicate"
        else r
        for r in rows
    ]  # fmt: skip
    out = []
    for row, (r, source, ov, delta), (replaced, why) in zip(rows, meta, notes):
        fits = row["status"] in ("ranked", "fits", "indistinct")
        rule = None if fits else row.get("rule")
        if why and not fits:
            row = {**row, "reason": f"{row.get('reason')}; {why}"}
        static = sum(row.get(k) or 0.0 for k in ("mem_weights_gb", "mem_grads_gb", "mem_optimizer_gb"))
        impossible = rule == "memory" and static * (1 + calib.fragmentation) > (row.get("hbm_gb") or float("inf"))
        out.append({
            "release": r.release, "model": r.model, "system": r.system, "precision": precision_of(r),
            "published_tflops": r.model_tflops_per_gpu, "published_mbs": r.mbs or 1, "published_tp": r.tp or 1,
            "published_pp": r.pp or 1, "published_vp": _vp(r), "printed_replaced": replaced,
            "settings_source": source,
            "overrides": " ".join(_overrides(bases[tuple(ov)], delta, r.release)),
            **{k: v for k, v in row.items() if k not in ("base", "base_choices", "delta", "model", "gpu", "release")},
            "fits": fits, "pruned_by": rule, "inconsistent": rule in INCONSISTENT or impossible,
        })  # fmt: skip
    return pd.DataFrame(out)


def summary(df: pd.DataFrame) -> dict[str, Any]:
    """Counts of a :func:`published_points` frame: rows, fitting, false prunes (by rule), inconsistent rows."""
    pruned = df[~df["fits"] & ~df["inconsistent"]]
    return {
        "rows": len(df),
        "fits": int(df["fits"].sum()),
        "false_prunes": len(pruned),
        "false_prunes_by_rule": json.loads(pruned["pruned_by"].value_counts().to_json()) if len(pruned) else {},
        "inconsistent": int(df["inconsistent"].sum()),
        "printed_replaced": int(df["printed_replaced"].notna().sum()),
    }
