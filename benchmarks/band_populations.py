"""Why the shipped bands are too wide on the ablation rows, and what calibrating them there would cost: two
populations of held-out errors, side by side. Prints figures; changes nothing.

- **Published**: every published row held out by release, configuration, group, model on GPU, model and GPU
  (:func:`bridgebench.model.steptime.fit.held_out_experiments`, the host constants fixed at the shipped ones as the
  bands' folds do); each absolute log error filed under its distance.
- **Ablations**: every shared ablation row (``../shared/reference/ablations``; none is calibrated) predicted by the
  shipped calibration, its distance from it (``TimeBreakdown.novelty``); an unmeasured model on an unmeasured GPU is
  its own bin here.

For each ablation row the 68 % (and 50 / 90 %) half-width of its distance is formed four ways, the row's own set
always left out (cross-conformal over sets: a row is never inside the quantile it is scored against):
1. *shipped*: the published errors only (what ships: ``configs/calibration/default.yaml`` ``conformal``, with its
   spread for a release beyond the calibrated ones where the row's release is; the other ways leave that out);
2. *pooled*: the published errors and the other sets' ablation errors of that distance;
3. *pooled, monotone*: as 2, but the joint distance (an unmeasured model on an unmeasured GPU) never narrower than
   either of its parts, as the shipped bands require (widths never shrink as the distance grows): the ablation sets
   alone fill the joint bin, and their A100 rows are predicted better than NVIDIA's models left out one at a time;
4. *ablations only* for the uncalibrated distances (published for the others);
5. *pooled, one weight per model*: as 3, but for the uncalibrated distances each model (a published model, or a set's
   model) weighs the same however many rows it has -- the exchangeable unit of "a model never measured" is a model,
   not a row (Dunn, Wasserman & Ramdas 2022, "Distribution-free prediction sets for two-layer hierarchical models",
   JASA 118(544), the pooled-CDF method: each group's empirical CDF weighted 1/K, the level inflated to
   ``c (K + 1) / K``); NVIDIA's six models then no longer outweigh the sets' models by their row counts.
First it prints the published uncalibrated half-widths split by model family and GPU generation (can a point's
kind tell the populations apart?). Then the published rows of leave-one-model-out are scored against way 4's
uncalibrated-model half-width: what calibrating on the ablation studies would do to NVIDIA's own models left out.
Quantiles: the split-conformal ``ceil((n + 1) c)``-th smallest absolute error, computed by crepes as the shipped
bands are (:func:`bridgebench.model.steptime.bands._conformal_q`; Vovk et al. 2005).

    PYTHONPATH=src .venv/bin/python benchmarks/band_populations.py   (about 3-4 min on 2 cores)
"""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from bridgebench.config import calibration  # noqa: E402
from bridgebench.config.catalog import load_gpu  # noqa: E402
from bridgebench.model.steptime.bands import BEYOND, LEVELS  # noqa: E402
from bridgebench.model.steptime.bands import _conformal_q as quantile  # noqa: E402
from bridgebench.model.steptime.config import GpuFacts  # noqa: E402
from bridgebench.model.steptime.fit import calibrate, held_out_experiments  # noqa: E402
from bridgebench.model.steptime.predict import predict_time  # noqa: E402
from bridgebench.validation.ablation_time import gpu_of, point_of, predicted_metric, spec_of  # noqa: E402
from bridgebench.validation.ablations import read_set, set_files  # noqa: E402
from bridgebench.validation.time_calibration import published_rows  # noqa: E402

BOTH = "uncalibrated model and GPU"
UNCALIBRATED = ("uncalibrated model", "uncalibrated GPU", BOTH)


def _by_kind(rows, held) -> None:
    """The published uncalibrated-distance 68 % half-widths split by model family (dense / MoE) and GPU generation
    (Hopper: H100 / H200; Blackwell: the rest): whether a point's kind, not only its distance, could tell the two
    populations apart (the ablation sets' unmeasured models are mostly dense, on Hopper or Ampere)."""
    from bridgebench.model.steptime.config import family

    cells: dict[tuple[str, str], list[float]] = {}
    for h in held:
        if h.tier in ("uncalibrated model", "uncalibrated GPU"):
            r = rows[h.row]
            gen = "Hopper" if r.cfg.gpu.name in ("h100", "h200") else "Blackwell"
            for kind in (family(r.spec), gen):
                cells.setdefault((h.tier, kind), []).append(abs(h.log_error))
    for (tier, kind), errs in sorted(cells.items()):
        q = 100 * math.expm1(quantile(errs, 68))
        print(f"  published {tier}, {kind:9s}: {len(errs):3d} rows, 68 % half-width +-{q:.1f} %")


def per_model_quantile(errors: list[tuple[float, str]], level: int) -> float:
    """The ``level`` % quantile of absolute log errors with each model's rows weighing ``1 / (K n_k)`` (``K`` models,
    ``n_k`` rows of model ``k``) at the inflated level ``c (K + 1) / K`` (Dunn et al. 2022, pooled CDFs); ``inf``
    when that level reaches 1. ``errors``: (|log error|, model)."""
    import numpy as np

    counts: dict[str, int] = {}
    for _, m in errors:
        counts[m] = counts.get(m, 0) + 1
    k = len(counts)
    target = level / 100 * (k + 1) / k
    if not errors or target >= 1:
        return math.inf
    ordered = sorted(errors)
    cum = np.cumsum([1 / (k * counts[m]) for _, m in ordered])
    return float(ordered[int(np.searchsorted(cum, target - 1e-12))][0])


def main() -> None:
    t0 = time.time()
    cal = calibration.load().time
    ablation = []  # (set, distance, |log error|, model)
    beyond: set[int] = set()  # ablation rows at a release beyond the calibrated ones (the shipped band adds BEYOND)
    gpus: dict[str, GpuFacts] = {}
    for path in set_files():
        for r in read_set(path):
            name, _ = gpu_of(r["gpu"])
            gpus.setdefault(name, GpuFacts.from_mapping(load_gpu(name)))
            spec = spec_of(r)
            cfg, _ = point_of(r, gpus[name])
            tiers = predict_time(spec, cfg, cal).novelty
            if BEYOND in tiers:
                beyond.add(len(ablation))
                tiers = tuple(t for t in tiers if t != BEYOND)
            tier = BOTH if len(tiers) > 1 else tiers[0]
            err = abs(math.log(predicted_metric(r, spec, cfg, cal) / float(r["measured_value"])))
            ablation.append((path.stem, tier, err, str(r["model"])))
    print(f"ablation rows: {len(ablation)}; computing the published held-out errors ...", flush=True)
    rows = published_rows()
    fixed = dict(c_grid=(cal.c_layer,), host_grid=(cal.host_moe,), expert_grid=(cal.host_moe_expert,),
                 kappa=cal.kappa, ns_efficiency=cal.ns_efficiency, measured_rates=cal.measured_rates)  # fmt: skip
    held, _ = held_out_experiments(rows, lambda rs: calibrate(rs, **fixed))
    published: dict[str, list[float]] = {}
    published_models: dict[str, list[str]] = {}
    lomo: list[float] = []
    for h in held:
        published.setdefault(h.tier, []).append(abs(h.log_error))
        published_models.setdefault(h.tier, []).append(rows[h.row].model)
        if h.tier == "uncalibrated model" and h.fold.startswith("model="):
            lomo.append(abs(h.log_error))
    _by_kind(rows, held)
    published[BOTH], published_models[BOTH] = (
        [],
        [],
    )  # no published row is both: the shipped bands combine the two (ConformalBands.half_width)
    print(f"published held-out errors: {len(held)} ({time.time() - t0:.0f} s); load average {os.getloadavg()[0]:.1f}")

    def width(way: str, tier: str, own_set: str, level: int, past: bool = False) -> float:
        others = [e for s, t, e, _ in ablation if t == tier and s != own_set]
        if way == "shipped":  # the bands configs/calibration/default.yaml ships
            tiers = ("uncalibrated model", "uncalibrated GPU") if tier == BOTH else (tier,)
            return math.log1p(cal.conformal.half_width((*tiers, BEYOND) if past else tiers, level))
        if way == "pooled":
            return quantile(published[tier] + others, level)
        if way == "pooled, monotone":  # the joint distance never narrower than either of its two parts
            if tier != BOTH:
                return width("pooled", tier, own_set, level)
            parts = (width("pooled", t, own_set, level) for t in (BOTH, "uncalibrated model", "uncalibrated GPU"))
            return max(parts)
        if way == "pooled, one weight per model":
            if tier not in UNCALIBRATED:
                return width("pooled", tier, own_set, level)
            sets = [(e, f"{s}/{m}") for s, t, e, m in ablation if t == tier and s != own_set]
            pub = list(zip(published[tier], published_models[tier]))
            own = per_model_quantile(pub + sets, level)
            if tier == BOTH:  # never narrower than either part (the sets alone fill the joint bin)
                return max(own, *(width(way, t, own_set, level) for t in ("uncalibrated model", "uncalibrated GPU")))
            return own
        return quantile(others if tier in UNCALIBRATED else published[tier], level)

    tiers = sorted({t for _, t, _, _ in ablation})
    ways = ("shipped", "pooled", "pooled, monotone", "ablations only", "pooled, one weight per model")
    for way in ways:
        line = []
        for lv in LEVELS:
            inside = [e <= width(way, t, s, lv, i in beyond) for i, (s, t, e, _) in enumerate(ablation)]
            line.append(f"{sum(inside) / len(inside):.0%} in the {lv} % band")
        print(f"{way:16s} ablation coverage (own set left out): " + ", ".join(line))
        for t in tiers:
            cells = []
            for lv in LEVELS:
                sub = [(s, e, i in beyond) for i, (s, tt, e, _) in enumerate(ablation) if tt == t]
                cells.append(f"{sum(e <= width(way, t, s, lv, b) for s, e, b in sub) / len(sub):.0%}")
            n = sum(tt == t for _, tt, _, _ in ablation)
            print(f"    {t:28s} {n:3d} rows: " + " / ".join(cells))
        if way == "pooled, one weight per model":  # NVIDIA's models left out, each against the others and the sets
            cov = []
            for lv in LEVELS:
                inside = 0
                held_out = list(zip(published["uncalibrated model"], published_models["uncalibrated model"]))
                sets = [(x, f"{s}/{mm}") for s, t, x, mm in ablation if t == "uncalibrated model"]
                for e, m in held_out:
                    inside += e <= per_model_quantile([(x, y) for x, y in held_out if y != m] + sets, lv)
                cov.append(f"{inside / len(published['uncalibrated model']):.0%}")
            print(f"    published rows held out by model, their own model left out: {' / '.join(cov)}")
    print("published rows of leave-one-model-out against the ablations-only uncalibrated-model band:")
    for lv in LEVELS:
        q = quantile([e for _, t, e, _ in ablation if t == "uncalibrated model"], lv)
        cov = sum(e <= q for e in lomo) / len(lomo)
        print(f"  {lv} %: +-{100 * math.expm1(q):.1f} %, covers {cov:.0%} of {len(lomo)} published rows "
              f"(the shipped +-{100 * cal.conformal.half_width(('uncalibrated model',), lv):.1f} % covers "
              f"{sum(e <= quantile(published['uncalibrated model'], lv) for e in lomo) / len(lomo):.0%})")  # fmt: skip
    print(f"{time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
