"""Normalized run records: one row per measured (or published) benchmark run.

Everything bridgebench compares -- NVIDIA's published tables, the blog's Table 1, the user's own runs -- becomes a
:class:`RunRecord` with the same fields, so tables and plots never care where a number came from; ``source`` and
``provenance`` say that. Reference data ships under ``results/reference/`` (copied from the project's
``shared/reference``; each file's origin is in ``results/reference/SOURCES.md`` and in each row's ``source``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from bridgebench.config.catalog import CatalogError, precision_names
from bridgebench.config.catalog import release as release_facts
from bridgebench.errors import BridgebenchError
from bridgebench.paths import config_files, load_paths

REFERENCE_DIR = load_paths().reference  # configs/paths: reference (shipped data)
PUBLISHED_CSV = REFERENCE_DIR / "published_pretrain_throughput.csv"
BLOG_CSV = REFERENCE_DIR / "blog_table1.csv"


class RecordError(BridgebenchError):
    """A record or a reference file breaks a rule; the message names the field or row."""


@dataclass(kw_only=True)
class RunRecord:
    """One benchmark run, normalized.

    Units: ``step_time_s`` seconds per optimizer step; ``tokens_per_sec_per_gpu`` tokens/s/GPU; TFLOP/s are 1e12
    FLOP/s per GPU. ``gbs`` / ``mbs`` in sequences, ``seq_length`` in tokens. ``model`` is a ``configs/model`` name
    (None when bridgebench has no config for the published model; ``model_label`` keeps the raw name).
    """

    release: str
    model: str | None
    model_label: str
    system: str | None  # configs/gpu name, e.g. gb300
    num_gpus: int
    precision: str | None
    optimizer: str
    gbs: int
    mbs: int | None
    seq_length: int
    tp: int | None = None
    pp: int | None = None
    cp: int | None = None
    vp: int | None = None
    ep: int | None = None
    etp: int | None = None
    step_time_s: float | None = None
    tokens_per_sec_per_gpu: float | None = None
    model_tflops_per_gpu: float | None = None
    newton_schulz_tflops_per_gpu: float | None = None
    source: str = ""
    note: str = ""
    provenance: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("num_gpus", "gbs", "seq_length"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise RecordError(
                    f"record {self.model_label}/{self.release}: {name} must be a positive integer, got {value!r}"
                )
        if self.step_time_s is None and self.tokens_per_sec_per_gpu is None:
            raise RecordError(f"record {self.model_label}/{self.release}: needs step_time_s or tokens_per_sec_per_gpu")
        for name in ("step_time_s", "tokens_per_sec_per_gpu"):
            value = getattr(self, name)
            if value is not None and not (value > 0 and math.isfinite(value)):
                raise RecordError(f"record {self.model_label}/{self.release}: {name} must be positive, got {value!r}")

    @property
    def tokens_per_step(self) -> int:
        return self.gbs * self.seq_length

    def resolved_step_time_s(self) -> float:
        """Step time in s; from tokens/s/GPU when not measured directly:
        ``gbs * seq_length / (tokens_per_sec_per_gpu * num_gpus)``."""
        if self.step_time_s is not None:
            return self.step_time_s
        return self.tokens_per_step / (self.tokens_per_sec_per_gpu * self.num_gpus)

    def resolved_tokens_per_sec_per_gpu(self) -> float:
        if self.tokens_per_sec_per_gpu is not None:
            return self.tokens_per_sec_per_gpu
        return self.tokens_per_step / (self.step_time_s * self.num_gpus)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _published_names(group: str, key: str) -> dict[str, str]:
    """Published label -> ``configs/<group>`` name, read from each YAML's ``key`` (``published_name`` of a model,
    ``published_system`` of a GPU: ``DGX-GB300`` -> ``gb300``)."""
    out = {}
    for path in config_files(group).values():
        data = yaml.safe_load(path.read_text())
        if data.get(key):
            out[data[key]] = data["name"]
    return out


def _precision(spelling: str) -> str | None:
    """A published precision label (``FP8-MX``, ``FP8``) as a ``configs/precision`` name (aliases declared there)."""
    return precision_names().get(spelling, spelling.lower()) if spelling else None


def _int(value: Any) -> int | None:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value == "":
        return None
    return int(float(value))


def _inferred_precision(release: str, footnote: str) -> tuple[str | None, str | None]:
    """(precision, why) of a published row that states none: the release's ``published_precision`` rule
    (``configs/release/<release>.yaml``; 25.09) by the half of an ``x (y)`` cell the row is -- (None, None) when the
    release declares no rule."""
    try:
        rule = release_facts(release).get("published_precision") or {}
    except CatalogError:
        return None, None
    half = "in_parentheses" if "values in parentheses" in footnote else "outside_parentheses"
    if half not in rule:
        return None, None
    return str(rule[half]), str(rule.get("note", "inferred"))


def _token_drop(footnote: str) -> bool | None:
    """True for a MoE run published as token-drop (25.09 '(tokendrop)'), False for token-dropless, None when the
    footnote says neither (dense models)."""
    text = footnote.lower()
    if "token-drop run" in text or "(tokendrop)" in text:
        return True
    if "dropless" in text:
        return False
    return None


#: Rows :func:`load_published` leaves out, by reason (filled per file read; :func:`skipped_published`).
_SKIPPED: dict[str, list[dict[str, Any]]] = {}


def skipped_published(path: Path = PUBLISHED_CSV) -> list[dict[str, Any]]:
    """The rows of ``path`` that :func:`load_published` leaves out: ``{reference, release, model_label, model, system,
    num_gpus, precision, reason}`` each (so a comparison can count them and say why)."""
    key = str(Path(path).resolve())
    if key not in _SKIPPED:
        load_published(path, infer_precision=True)
    return list(_SKIPPED[key])


#: the columns ``published_pretrain_throughput.csv`` must have (:func:`load_published`)
PUBLISHED_COLUMNS = frozenset(
    ("release model system num_gpus precision gbs mbs seq_len tp pp cp vp ep etp tokens_per_sec_per_gpu "
     "model_tflops_per_gpu footnote source").split()
)  # fmt: skip


def load_published(path: Path = PUBLISHED_CSV, *, infer_precision: bool = False) -> list[RunRecord]:
    """NVIDIA's published pretraining throughput rows (Megatron-Bridge ``docs/performance-summary*.md``) as records.

    Rows without tokens/s are left out (one 25.09 DeepSeek V3 row publishes TFLOP/s only; :func:`skipped_published`
    lists them with the reason). Kimi K2 rows are Muon runs (their footnote says so); all others AdamW. A row that
    states no precision (the 25.09 table has no such column) keeps ``precision=None`` unless ``infer_precision``:
    then it gets the one its release's ``published_precision`` rule infers, said in
    ``provenance["precision_inferred"]`` (``bridgebench compare`` does; the time-model calibration does not).
    ``provenance["moe_token_drop"]``: True for a token-drop MoE run, False for token-dropless, None when not stated
    (dense).

    Raises:
        RecordError: the file lacks a required column.
    """
    df = pd.read_csv(path, dtype=str).fillna("")
    missing = PUBLISHED_COLUMNS - set(df.columns)
    if missing:
        raise RecordError(f"{path}: missing column(s) {sorted(missing)}")
    models, systems = _published_names("model", "published_name"), _published_names("gpu", "published_system")
    records, skipped = [], []
    for n, row in enumerate(df.itertuples(index=False), start=1):  # n: data row, 1-based, header excluded
        stated = _precision(row.precision)
        guess, why = _inferred_precision(row.release, row.footnote) if stated is None else (None, None)
        if not row.tokens_per_sec_per_gpu:
            skipped.append(
                {
                    "reference": f"{Path(path).name}#{n}",
                    "release": row.release,
                    "model_label": row.model,
                    "model": models.get(row.model),
                    "system": systems.get(row.system),
                    "num_gpus": int(row.num_gpus),
                    "precision": stated or guess,
                    "reason": "no tokens/s published (TFLOP/s only)",
                    "optimizer": "muon" if "muon optimizer" in row.footnote.lower() else "adamw",
                }
            )
            continue
        precision, inferred = (guess, why) if stated is None and infer_precision else (stated, None)
        muon = "muon optimizer" in row.footnote.lower()
        provenance = {
            "container_image": f"nvcr.io/nvidia/nemo:{row.release}",
            "published": True,
            "reference": f"{Path(path).name}#{n}",
            "moe_token_drop": _token_drop(row.footnote),
        }
        if inferred:
            provenance["precision_inferred"] = inferred
        records.append(
            RunRecord(
                release=row.release,
                model=models.get(row.model),
                model_label=row.model,
                system=systems.get(row.system),
                num_gpus=int(row.num_gpus),
                precision=precision,
                optimizer="muon" if muon else "adamw",
                gbs=int(row.gbs),
                mbs=_int(row.mbs),
                seq_length=int(row.seq_len),
                tp=_int(row.tp),
                pp=_int(row.pp),
                cp=_int(row.cp),
                vp=_int(row.vp),
                ep=_int(row.ep),
                etp=_int(row.etp),
                tokens_per_sec_per_gpu=float(row.tokens_per_sec_per_gpu),
                model_tflops_per_gpu=float(row.model_tflops_per_gpu) if row.model_tflops_per_gpu else None,
                source=f"NVIDIA Megatron-Bridge {row.source}",
                note=row.footnote,
                provenance=provenance,
            )
        )
    _SKIPPED[str(Path(path).resolve())] = skipped
    return records


def load_blog_table1(path: Path = BLOG_CSV) -> pd.DataFrame:
    """The blog's Table 1 (TFLOP/s/GPU, Muon split into model + NS) with bridgebench model names.

    Columns: ``model`` (configs/model name), ``optimizer`` (adamw|muon), ``num_gpus``, ``release``,
    ``published_total_tflops_per_gpu``, ``published_model_tflops_per_gpu``, ``published_newton_schulz_tflops_per_gpu``,
    ``source``.

    Raises:
        RecordError: a model the configs do not know.
    """
    df = pd.read_csv(path, dtype={"release": str})
    by_display = {}
    for p in config_files("model").values():
        data = yaml.safe_load(p.read_text())
        by_display[data["display_name"]] = data["name"]
    unknown = sorted(set(df["model"]) - set(by_display))
    if unknown:
        raise RecordError(f"{path}: model(s) {unknown} have no configs/model entry (display_name)")
    return pd.DataFrame(
        {
            "model": df["model"].map(by_display),
            "optimizer": df["optimizer"].str.lower(),
            "num_gpus": df["num_gpus"].astype(int),
            "release": df["release"].astype(str),
            "published_total_tflops_per_gpu": df["tflops_per_gpu"].astype(float),
            "published_model_tflops_per_gpu": df["model_tflops_per_gpu"].astype(float),
            "published_newton_schulz_tflops_per_gpu": df["newton_schulz_tflops_per_gpu"].astype(float),
            "source": df["source"],
        }
    )
