"""Optimizer-step benchmark records aggregated per configuration, with their spread and the repeats to distrust.

One optimizer-step record is one SLURM repeat (``submit --repeats N``; each reports the median of its own timed
calls). :func:`aggregate` groups the records by (config hash, model, device, matrix family) and, per metric
(``muon_step_s``, ``adamw_step_s``, ``ratio`` = Muon / AdamW step time per repeat, ``ns_time_s``,
``ns_flops_per_s``), gives the count, median, quartiles and IQR (``numpy.percentile``, linear interpolation =
``scipy.stats.iqr``'s default), min, max and the distribution-free 95 % confidence interval of the median
(``scipy.stats.quantile_test(...).confidence_interval``: binomial order statistics; it needs n >= 6, else None).

Repeats set aside or flagged:

* **contended**: the payload saw other processes use at least :data:`CONTENDED_OTHER_SHARE` of the node's CPU
  capacity during its timing window (``optstep.load.other_share``, :mod:`~.payloads.cpu_contention`); left out of
  the aggregate and listed with their share -- unless every repeat of the group is contended: then the aggregate is
  over them and the group is flagged ``CONTENDED`` (``basis`` says which). Records without a load figure (older
  payloads) are kept but flagged ``load unknown``.
* **outlier**: a repeat whose ratio or Muon step time lies more than 3.5 robust z-scores from the group's median
  (modified z-score ``|x - median| / MAD``, MAD scaled to a normal sigma by ``scipy.stats.median_abs_deviation(...,
  scale="normal")``; threshold 3.5 from Iglewicz & Hoaglin, "How to Detect and Handle Outliers", 1993); kept (the
  statistics are medians) but flagged.
* **ns > step**: the group's median Newton-Schulz time exceeds its median Muon step time, which contains it: the
  timings disagree (contention between the two measurements); flagged on the group.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bridgebench.results.outcomes import usable

#: ``optstep.load.other_share`` at or above which a repeat counts as contended: 10 % of the node's CPU capacity (on
#: the 2-CPU local node, a fifth of a CPU busy with other work for the whole timing window).
CONTENDED_OTHER_SHARE = 0.10
METRICS = ("muon_step_s", "adamw_step_s", "ratio", "ns_time_s", "ns_flops_per_s")
OUTLIER_Z = 3.5
FAMILY_ORDER = ("attention", "mlp_dense", "router", "expert", "shared_expert", "total")


@dataclass(kw_only=True)
class Repeat:
    """One record's figures for one family, with why it is set aside or flagged (empty = clean)."""

    record_id: str
    config_hash: str | None
    model: str | None
    device: str | None
    family: str
    values: dict[str, float | None]
    other_share: float | None
    flags: list[str] = field(default_factory=list)

    @property
    def contended(self) -> bool:
        return any(f.startswith("contended") for f in self.flags)


def summarize(values: list[float]) -> dict[str, Any]:
    """n, median, q1, q3, iqr, min, max and the 95 % CI of the median (None when n < 6) of ``values``."""
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if x.size == 0:
        return {"n": 0, "median": None, "q1": None, "q3": None, "iqr": None, "min": None, "max": None, "ci95": None}
    from scipy import stats

    q1, med, q3 = np.percentile(x, [25, 50, 75])
    ci = None
    if x.size >= 6:
        interval = stats.quantile_test(x, q=med, p=0.5).confidence_interval(confidence_level=0.95)
        if math.isfinite(interval.low) and math.isfinite(interval.high):
            ci = [float(interval.low), float(interval.high)]
    return {
        "n": int(x.size),
        "median": float(med),
        "q1": float(q1),
        "q3": float(q3),
        "iqr": float(q3 - q1),
        "min": float(x.min()),
        "max": float(x.max()),
        "ci95": ci,
    }


def repeats(records: list[dict[str, Any]]) -> list[Repeat]:
    """Every (record, family) of completed optimizer-step records, flagged ``contended`` / ``load unknown``."""
    out = []
    for r in records:
        step = r.get("optstep")
        if not step or not usable(r):  # outcome completed only (results/outcomes.py)
            continue
        load = step.get("load") or {}
        share = load.get("other_share")
        flags = []
        if share is None:
            flags.append("load unknown")
        elif share >= CONTENDED_OTHER_SHARE:
            flags.append(f"contended: other processes used {share:.0%} of the node's CPU")
        cfg_hash = (r.get("provenance") or {}).get("config_hash") or step.get("config_hash")
        for fam, v in {**step.get("families", {}), "total": step.get("total", {})}.items():
            out.append(
                Repeat(
                    record_id=r["record_id"],
                    config_hash=cfg_hash,
                    model=r.get("model") or step.get("model"),
                    device=r.get("device") or step.get("device"),
                    family=fam,
                    values={m: v.get(m) for m in METRICS} | {"matrices": v.get("matrices")},
                    other_share=share,
                    flags=flags[:],
                )
            )
    return out


def _flag_outliers(group: list[Repeat]) -> None:
    from scipy import stats

    clean = [r for r in group if not r.contended]
    for metric in ("ratio", "muon_step_s"):
        x = np.asarray([r.values[metric] for r in clean if r.values.get(metric) is not None], dtype=float)
        if x.size < 3:
            continue
        med = float(np.median(x))
        mad = float(stats.median_abs_deviation(x, scale="normal"))
        if mad <= 0:
            continue
        for r in clean:
            v = r.values.get(metric)
            if v is not None and abs(v - med) / mad > OUTLIER_Z:
                r.flags.append(f"outlier: {metric} {v:.4g} is {abs(v - med) / mad:.1f} robust z from {med:.4g}")


def aggregate(records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[Repeat]]:
    """(one row per config x model x device x family, every repeat); see the module docstring.

    Each row: ``config_hash``, ``model``, ``device``, ``family``, ``matrices``, ``n`` (repeats aggregated),
    ``n_contended`` (set aside), ``n_outliers``, ``flags`` (group-level), ``stats`` (metric -> :func:`summarize`),
    each metric's median under its own name (``ratio`` = median of per-repeat ratios) and ``repeats`` (each
    record's figures, other processes' CPU share and flags).
    """
    reps = repeats(records)
    groups: dict[tuple, list[Repeat]] = defaultdict(list)
    for r in reps:
        groups[(r.config_hash, r.model, r.device, r.family)].append(r)
    rows = []
    order = {f: i for i, f in enumerate(FAMILY_ORDER)}
    for key in sorted(groups, key=lambda k: (str(k[0]), str(k[1]), str(k[2]), order.get(k[3], 99), k[3])):
        group = groups[key]
        _flag_outliers(group)
        clean = [r for r in group if not r.contended]
        used = clean or group  # every repeat contended: show them, flagged, rather than nothing
        stats_ = {m: summarize([r.values[m] for r in used]) for m in METRICS}
        flags = []
        if not clean:
            shares = [r.other_share for r in group if r.other_share is not None]
            flags.append(
                f"CONTENDED: all {len(group)} repeat(s) ran while other processes used "
                f"{min(shares):.0%}-{max(shares):.0%} of the CPU; these figures are not trustworthy"
            )
        ns, step = stats_["ns_time_s"]["median"], stats_["muon_step_s"]["median"]
        if ns is not None and step is not None and ns > step:
            flags.append("ns > step: the NS time alone exceeds the whole Muon step (timings disturbed)")
        rows.append(
            {
                "config_hash": key[0],
                "model": key[1],
                "device": key[2],
                "family": key[3],
                "matrices": group[0].values.get("matrices"),
                "n": len(used),
                "n_contended": len(group) - len(clean),
                "basis": "uncontended repeats" if clean else "contended repeats (no clean one)",
                "n_outliers": sum(any(f.startswith("outlier") for f in r.flags) for r in group),
                "flags": flags,
                "stats": stats_,
                "statistic": "median over repeats (stats: q1, q3, IQR, 95% CI of the median from n >= 6)",
                **{m: stats_[m]["median"] for m in METRICS},
                "repeats": [
                    {"record_id": r.record_id, "other_share": r.other_share, "flags": r.flags, **r.values}
                    for r in group
                ],
            }
        )
    return rows, reps
