"""What ``bridgebench compare`` compares: a :class:`Selection` parsed from ``key=value`` tokens (releases, models, GPUs,
precisions, sizes, run filters), and whether a published row or a store record matches it."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from bridgebench.config.catalog import options, precision_names, releases
from bridgebench.model.optimizer import family
from bridgebench.results.compare_stats import CompareError
from bridgebench.results.records import PUBLISHED_CSV, RunRecord

SOURCES = ("auto", "published", "runs", "both")
#: Record fields two sides must share unless the selection names them (else the comparison is not like-for-like).
SIDE_KEY_FIELDS = ("kind", "model", "gpu", "device", "precision", "num_gpus", "global_batch_size", "seq_length")
#: ``--metric`` choices: (kind, description). Optimizer-step metrics read the payload's ``total`` (and families).
METRICS: dict[str, tuple[str, str]] = {
    "step_time": ("time", "seconds per step (optimizer-step records: one step of the record's optimizer)"),
    "tflops": ("throughput", "model TFLOP/s per GPU as logged per iteration"),
    "tokens": ("throughput", "tokens/s per GPU = global_batch_size x seq_length / (step time x num_gpus)"),
    "muon_step": ("time", "optimizer-step records: seconds of one Muon step"),
    "adamw_step": ("time", "optimizer-step records: seconds of one AdamW step"),
    "ns_time": ("time", "optimizer-step records: seconds of Newton-Schulz alone"),
}
OPTSTEP_LISTS = {"muon_step": "muon_step_times_s", "adamw_step": "adamw_step_times_s", "ns_time": "ns_times_s"}
#: Aliases of selection keys on store records (left: what users type, Hydra / Megatron-Bridge names; right: field).
RUN_KEY_ALIASES = {
    "system": "gpu",
    "gpus": "num_gpus",
    "train.global_batch_size": "global_batch_size",
    "gbs": "global_batch_size",
    "model.seq_length": "seq_length",
    "seq_len": "seq_length",
    "config_hash": "provenance.config_hash",
    "hash": "provenance.config_hash",
    "release": "provenance.release",
    "experiment_id": "provenance.experiment_id",
    "run_id": "provenance.run_id",
}


def normalize(text: Any) -> str:
    return re.sub(r"[^a-z0-9]+", "_", str(text).lower()).strip("_")


@dataclass(frozen=True, kw_only=True)
class Selection:
    """``key=value`` filters (values: comma-separated alternatives; ``release=A..B`` a range, inclusive).

    ``model``, ``gpu`` (``system``), ``precision``, ``num_gpus`` (``gpus``), ``optimizer`` and ``release`` are checked
    against the shipped catalogue; on store records any other key is a field path (``optstep.layers``,
    ``provenance.node_list``; ``job.X`` means ``optstep.X``; aliases in :data:`RUN_KEY_ALIASES`).
    """

    items: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(k for k, _ in self.items)

    def get(self, key: str) -> tuple[str, ...] | None:
        return dict(self.items).get(key)

    def __add__(self, other: Selection) -> Selection:
        merged = dict(self.items)
        merged.update(other.items)
        return Selection(items=tuple(merged.items()))

    def text(self) -> str:
        return " ".join(f"{k}={','.join(v)}" for k, v in self.items) or "(everything)"


def _expand_releases(values: Sequence[str]) -> tuple[str, ...]:
    known = list(releases())
    out: list[str] = []
    for v in values:
        lo, sep, hi = v.partition("..")
        ends = [lo, hi] if sep else [v]
        for e in ends:
            if e and e not in known:
                raise CompareError(f"release {e!r} does not exist; known releases: {known}")
        if sep:
            a = known.index(lo) if lo else 0
            b = known.index(hi) if hi else len(known) - 1
            if a > b:
                raise CompareError(f"release range {v!r} is empty (from {lo} to {hi}); known releases: {known}")
            out += known[a : b + 1]
        else:
            out.append(v)
    return tuple(dict.fromkeys(out))


def parse_selection(tokens: Iterable[str] | str | None) -> Selection:
    """Parse ``key=value`` tokens (a string is split on whitespace) into a :class:`Selection`.

    Values are checked where the catalogue knows them: a model must be a ``configs/model`` name or a published model
    label, a GPU a ``configs/gpu`` name or published system, a precision a ``configs/precision`` spelling, an optimizer
    Muon or AdamW, ``num_gpus`` a positive integer, a release a ``configs/release`` name.

    Raises:
        CompareError: a token without ``=``, an empty value, or a value the catalogue does not know (listing the
            known ones).
    """
    if tokens is None:
        return Selection()
    if isinstance(tokens, str):
        tokens = tokens.split()
    items: dict[str, tuple[str, ...]] = {}
    for tok in tokens:
        key, sep, raw = str(tok).partition("=")
        key = key.strip().lstrip("+")
        values = tuple(v.strip().strip("'\"") for v in raw.split(",") if v.strip())
        if not sep or not key or not values:
            raise CompareError(f"selection {tok!r}: expected key=value (e.g. model=kimi_k2 gpu=gb300 release=26.04)")
        key = {"system": "gpu", "gpus": "num_gpus"}.get(key, key)
        if key == "model":
            known = set(options("model")) | {normalize(x) for x in _published_labels("model")}
            bad = [v for v in values if v not in known and normalize(v) not in known]
            if bad:
                raise CompareError(
                    f"unknown model {bad[0]!r}; configs/model: {options('model')}; published labels: "
                    f"{sorted(_published_labels('model'))}"
                )
        elif key == "gpu":
            values = tuple(normalize(v).removeprefix("dgx_") for v in values)
            bad = [v for v in values if v not in options("gpu")]
            if bad:
                raise CompareError(f"unknown gpu {bad[0]!r}; known: {options('gpu')}")
        elif key == "precision":
            names = precision_names()
            bad = [v for v in values if v not in names and v.lower() not in names]
            if bad:
                raise CompareError(f"unknown precision {bad[0]!r}; known: {options('precision')}")
            values = tuple(names.get(v) or names[v.lower()] for v in values)
        elif key == "optimizer":
            values = tuple(family(v) for v in values)
            bad = [v for v in values if v not in ("adamw", "muon")]
            if bad:
                raise CompareError(f"unknown optimizer {bad[0]!r}; compare knows adamw (adam) and muon (dist_muon)")
        elif key == "num_gpus":
            if not all(v.isdigit() and int(v) > 0 for v in values):
                raise CompareError(f"num_gpus must be positive integers, got {','.join(values)}")
        elif key == "release":
            values = _expand_releases(values)
        items[key] = values
    return Selection(items=tuple(items.items()))


@functools.cache
def _published_labels(column: str) -> frozenset[str]:
    df = pd.read_csv(PUBLISHED_CSV, dtype=str, usecols=[column])
    return frozenset(df[column].dropna())


def published_matches(r: RunRecord, sel: Selection) -> bool:
    for key, values in sel.items:
        if key == "model":
            ok = any(normalize(v) in (normalize(r.model or ""), normalize(r.model_label)) for v in values)
        elif key == "gpu":
            ok = r.system in values
        elif key == "precision":
            ok = r.precision in values
        elif key == "num_gpus":
            ok = str(r.num_gpus) in values
        elif key == "optimizer":
            ok = r.optimizer in values
        elif key == "release":
            ok = r.release in values
        else:
            raise CompareError(
                f"selection key {key!r} does not apply to published rows; they have model, gpu, "
                "precision, num_gpus, optimizer, release"
            )
        if not ok:
            return False
    return True
