"""Check the FLOPs model against every published row: FLOPs/token x tokens/s/GPU vs published model TFLOP/s/GPU.

For each row of ``results/reference/published_pretrain_throughput.csv`` whose model has a ``configs/model`` entry,
the predicted TFLOP/s/GPU is ``model_flops_per_token(model @ seq_len, TP, formula of the release) *
tokens_per_sec_per_gpu / 1e12``. The rounding bound of a row is what the published figures' own rounding allows:
``0.5 / TFLOP/s`` (TFLOP/s published as an integer) plus ``0.5 / tokens/s`` -- or, for releases that derive tokens/s
from a whole number of sequences per second (26.04.01, 26.06.01, 26.08; shared/reference README),
``0.5 / (sequences/s)`` with ``sequences/s = tokens/s/GPU * GPUs / seq_len``.

A row can miss its rounding bound only if the published figures are inconsistent with *any* constant FLOPs/token:
:func:`check_published` therefore also intersects, per (model, seq_len, padded vocab, MTP, formula) group, the
interval of FLOPs/token each row's rounding allows; an empty intersection proves the published rows of that group
disagree with one another, whatever the formula.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import pandas as pd

from bridgebench.config.catalog import release as catalog_release
from bridgebench.config.catalog import releases
from bridgebench.config.compose import compose, model_spec
from bridgebench.model.flops import model_flops_per_token
from bridgebench.model.spec import ModelSpec
from bridgebench.results.records import RunRecord, load_published

#: Releases whose tokens/s/GPU is a whole number of sequences/s for the job (``configs/release`` published_rounding).
ROUNDED_TOKEN_RELEASES = {
    name
    for name, facts in releases().items()
    if facts["published_rounding"]["tokens_per_sec_per_gpu"] == "whole_sequences_per_job"
}


@dataclass(frozen=True, kw_only=True)
class CheckSummary:
    rows: int
    within_rounding: int
    max_abs_error: float
    median_abs_error: float
    rows_outside_in_inconsistent_groups: int
    rows_outside: int


def _release_formula(release: str) -> str:
    """The FLOPs formula version of a release (``configs/release/<release>.yaml``, read without composing a run)."""
    return str(catalog_release(release)["flops_formula"])


def _model(name: str, cache: dict[str, ModelSpec]) -> ModelSpec:
    if name not in cache:
        cache[name] = model_spec(compose([f"model={name}"]))
    return cache[name]


def check_published(records: list[RunRecord] | None = None) -> tuple[pd.DataFrame, CheckSummary]:
    """Predict model TFLOP/s/GPU for every published row of a known model; return per-row results and a summary.

    Row columns: release, model, system, precision, num_gpus, tp, seq_length, mtp_num_layers, formula,
    flops_per_token, tokens_per_sec_per_gpu, published_tflops, predicted_tflops, rel_error, rounding_bound,
    within_rounding, group_consistent.
    """
    records = [r for r in (records or load_published()) if r.model and r.model_tflops_per_gpu]
    models: dict[str, ModelSpec] = {}
    formulas: dict[str, str] = {}
    rows = []
    for r in records:
        assert r.model is not None and r.model_tflops_per_gpu is not None  # kept above
        assert r.tokens_per_sec_per_gpu is not None, r.provenance  # every table row with TFLOP/s prints tokens/s
        base = _model(r.model, models)
        mtp = 0 if "w/o MTP" in r.note else base.mtp_num_layers
        spec = base.replace(seq_length=r.seq_length, mtp_num_layers=mtp)
        if r.release not in formulas:
            formulas[r.release] = _release_formula(r.release)
        formula = formulas[r.release]
        tp = r.tp or 1
        fpt = float(model_flops_per_token(spec, tensor_model_parallel_size=tp, formula=formula))
        tok, tf = r.tokens_per_sec_per_gpu, r.model_tflops_per_gpu
        pred = fpt * tok / 1e12
        if r.release in ROUNDED_TOKEN_RELEASES:
            tok_rel = 0.5 / (tok * r.num_gpus / r.seq_length)
        else:
            tok_rel = 0.5 / tok
        bound = 0.5 / tf + tok_rel
        rows.append(
            {
                "release": r.release,
                "model": r.model,
                "system": r.system,
                "precision": r.precision,
                "num_gpus": r.num_gpus,
                "tp": tp,
                "seq_length": r.seq_length,
                "mtp_num_layers": mtp,
                "padded_vocab": spec.padded_vocab_size(tp),
                "formula": formula,
                "flops_per_token": fpt,
                "tokens_per_sec_per_gpu": tok,
                "published_tflops": tf,
                "predicted_tflops": pred,
                "rel_error": pred / tf - 1,
                "rounding_bound": bound,
                "within_rounding": abs(pred / tf - 1) <= bound,
                # FLOPs/token interval this row's rounding allows
                "fpt_lo": (tf - 0.5) * 1e12 / (tok * (1 + tok_rel)),
                "fpt_hi": (tf + 0.5) * 1e12 / (tok * (1 - tok_rel)),
            }
        )
    df = pd.DataFrame(rows)
    keys = ["model", "seq_length", "padded_vocab", "mtp_num_layers", "formula"]
    lo = df.groupby(keys)["fpt_lo"].transform("max")
    hi = df.groupby(keys)["fpt_hi"].transform("min")
    df["group_consistent"] = lo <= hi
    df = df.drop(columns=["fpt_lo", "fpt_hi"])
    errors = df["rel_error"].abs()
    outside = df[~df["within_rounding"]]
    summary = CheckSummary(
        rows=len(df),
        within_rounding=int(df["within_rounding"].sum()),
        max_abs_error=float(errors.max()),
        median_abs_error=float(statistics.median(errors)),
        rows_outside_in_inconsistent_groups=int((~outside["group_consistent"]).sum()),
        rows_outside=len(outside),
    )
    return df, summary
