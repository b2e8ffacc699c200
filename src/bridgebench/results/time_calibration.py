"""NVIDIA's published perf-table rows as calibration rows of the time model, and the fit behind
``configs/calibration/<name>.yaml`` (``bridgebench calibrate``).

Each row of ``results/reference/published_pretrain_throughput.csv`` whose model has a ``configs/model`` entry becomes
a :class:`bridgebench.model.timing.Row`: the model at the row's sequence length (DeepSeek V3 "w/o MTP" rows without
MTP), the row's GPU facts (``configs/gpu``), parallel sizes and batch, the precision's peak key (25.09 rows name no
precision: their footnote pairs differ in FP8 quantization granularity, so they are FP8), the release's FLOPs formula
(``configs/release``), Kimi K2 rows as layer-wise Muon (``dist_muon``, their footnote says Muon), the others AdamW.
A pipeline split that Megatron-Core cannot do evenly gets :func:`bridgebench.model.layout.balanced_layout` (Kimi
K2's 61 layers: the layouts of Megatron-Bridge's Kimi K2 recipe). FSDP rows are modelled as plain data parallelism.
An empty ETP cell is ETP = TP unless that cannot fit the expert grid (then 1, the MoE recipes' value); a row whose
sizes cannot fit its GPU count at all (DeepSeekV3 25.09 GB200: PP8 x EP64 on 256 GPUs) is left out.
"""

from __future__ import annotations

from typing import Iterable

from bridgebench.config.catalog import load_gpu, peak_key
from bridgebench.config.compose import compose, model_spec
from bridgebench.model.layout import balanced_layout
from bridgebench.model.timing import Calibration, GpuFacts, Row, TimeConfig, calibrate
from bridgebench.results.records import RunRecord, load_published


def release_index(release: str) -> float:
    """Position of a NeMo release for the trend term, in steps of two months (NeMo's release cadence):
    ``(12 YY + MM) / 2`` for ``YY.MM``, a ``.01`` patch release half a step later. Only differences matter."""
    parts = release.split(".")
    base = (int(parts[0]) * 12 + int(parts[1])) / 2.0
    return base + (0.5 if len(parts) > 2 else 0.0)


def _formula(release: str, cache: dict) -> str:
    if release not in cache:
        cache[release] = str(compose([f"release='{release}'"]).release.flops_formula)
    return cache[release]


def published_rows(records: Iterable[RunRecord] | None = None) -> list[Row]:
    """Calibration rows from published records (see the module docstring); rows of models without a
    ``configs/model`` entry or without a TFLOP/s figure are left out."""
    specs: dict = {}
    gpus: dict = {}
    formulas: dict = {}
    out = []
    for r in records if records is not None else load_published():
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
        cfg = TimeConfig(
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
            pipeline_model_parallel_layout=balanced_layout(spec.num_layers, pp, vp, spec.mtp_layers),
            optimizer="dist_muon" if r.optimizer == "muon" else "adam",
            flops_formula=_formula(r.release, formulas),
            release_index=release_index(r.release),
        )
        out.append(Row(spec, cfg, float(r.model_tflops_per_gpu), r.release, r.model_label, r.system, r.precision or ""))
    return out


def fit(rows: list[Row] | None = None, *, releases: Iterable[str] | None = None, trend: bool = False) -> Calibration:
    """Fit the time calibration on the published rows (of ``releases`` only, when given)."""
    rows = rows if rows is not None else published_rows()
    if releases is not None:
        keep = set(releases)
        rows = [r for r in rows if r.release in keep]
    return calibrate(rows, trend=trend)
