"""The last step of a sweep's time stage: rank the points and say how far to trust the ranking.

- ``rank``: by ``score`` (predicted model TFLOP/s/GPU; optimizer-step points: minus the Muon step time), equal
  scores by less memory first, over the *distinct* predictions only: points the model cannot tell apart on any
  term -- every ``t_<term>_s`` and the score equal to 9 significant digits, e.g. a CP=1 / CP=2 pair whose terms are
  identical, or recompute variants whose time is the same -- are collapsed into the first of them, the one with the
  least memory (status ``indistinct``, ``collapsed_into`` its point id; the kept point counts them in ``twins``).
- ``tie``: a ranked point whose score lies within the prediction band of the best (``band_pct``, the model's
  cross-validated error): ``score >= best x (1 - band_pct / 100)``. Ties are not an order the model can vouch for.
- ``published``: the point is NVIDIA's own configuration: its base is Megatron-Bridge's perf recipe of the release
  with that optimizer, and every swept key has the base's value.
- ``ep_span`` / ``ep_leaves_nvlink``: the expert group (ETP x EP consecutive ranks, Megatron-Core's default order
  ``tp-cp-ep-dp-pp``) and whether some EP group spans more than one NVLink domain as the scheduler places the job
  (:mod:`bridgebench.model.placement`: 256 GB300 are four 64-GPU segments), so part of its all-to-all runs over the
  scale-out network.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from bridgebench.config.compose import variant_provenance
from bridgebench.model import placement as pl
from bridgebench.sweep.bases import Base
from bridgebench.sweep.keys import KEYS


def _signature(row: dict[str, Any]) -> tuple:
    """What the time model predicts for a point: every term and the score, to 9 significant digits."""
    keys = sorted(k for k in row if k.startswith("t_") and k.endswith("_s") and row[k] is not None)
    values = [row[k] for k in keys] + [row.get("score") or 0.0]
    return tuple(keys), tuple(float(f"{float(x):.9g}") for x in values)


def _is_published(base: Base, delta: dict[str, Any]) -> bool:
    """The base is Megatron-Bridge's own perf recipe of its release with this optimizer
    (:func:`bridgebench.config.compose.variant_provenance`) and the point equals it on every swept key (ETP unset =
    TP; ``auto`` keys compared as derived)."""
    if not base.flat.get(KEYS["recipe"]):
        return False
    if "nvidia" not in base._env_cache:
        base._env_cache["nvidia"] = variant_provenance(base.cfg)[0] == "nvidia"
    if not base._env_cache["nvidia"]:
        return False
    flat = base.flat
    for key, value in delta.items():
        own = flat.get(key)
        if key == KEYS["etp"]:
            tp = delta.get(KEYS["tp"], flat.get(KEYS["tp"]))
            value, own = value or tp, own or flat.get(KEYS["tp"])
        if isinstance(value, (list, tuple)) or isinstance(own, (list, tuple)):
            value, own = list(value or []), list(own or [])
        if value != own:
            return False
    return True


def _ep_crosses(row: dict[str, Any], base: Base) -> bool:
    """Some EP group of the point spans more than one NVLink domain as the scheduler places the job
    (``ep_domains`` of the time stage, else :func:`bridgebench.model.placement.place` on the row's sizes)."""
    if row.get("ep_domains") is not None:
        return bool(row["ep_domains"] > 1)
    g = base.gpu
    if row.get("num_gpus") is None:  # a row without its sizes: the group's span against the GPU's domain
        return bool(row["ep_span"] > g.nvlink_domain)
    try:
        n = int(row["num_gpus"])
        domain = pl.domain_gpus(n, g.gpus_per_node, g.nvlink_domain, g.segment_policy)
        sizes = {k: int(row.get(k) or 1) for k in ("tp", "cp", "pp", "ep")}
        placed = pl.place(n, **sizes, etp=int(row.get("etp") or sizes["tp"]), domain=domain)
    except (pl.PlacementError, TypeError, ValueError):
        return False
    return placed.group("ep").crosses


def rank_and_annotate(rows: list[dict[str, Any]], bases: Sequence[Base]) -> list[dict[str, Any]]:
    """Rank the ``ranked`` rows and add ``rank``, ``twins``, ``collapsed_into``, ``tie``, ``published``,
    ``ep_span`` and ``ep_leaves_nvlink`` (see the module docstring). In place; returns ``rows``."""
    for row in rows:
        row["rank"] = None
        row["tie"] = False
        row["twins"] = 0
        row["collapsed_into"] = None
        base = bases[row["base"]]
        span = (row.get("etp") or row.get("tp") or 1) * (row.get("ep") or 1)
        row["ep_span"] = span
        row["ep_leaves_nvlink"] = _ep_crosses(row, base)
        row["published"] = _is_published(base, json.loads(row["delta"])) if row["status"] != "duplicate" else False
    ranked = sorted((r for r in rows if r["status"] == "ranked"), key=lambda r: (-r["score"], r["mem_total_gb"]))
    kept: dict[tuple, dict[str, Any]] = {}
    n = 0
    for row in ranked:
        sig = _signature(row)
        first = kept.get(sig)
        if first is not None:
            first["twins"] += 1
            row.update(
                status="indistinct",
                collapsed_into=first["point_id"],
                reason=f"the model predicts the same on every term as point {first['point_id']} (rank {first['rank']})",
            )
            continue
        n += 1
        row["rank"] = n
        kept[sig] = row
    best = next((r for r in ranked if r["rank"] == 1), None)
    if best is not None:
        for row in ranked:
            if row["rank"] is None:
                continue
            band = (row.get("band_pct") or 0.0) / 100.0
            if best["score"] > 0:
                row["tie"] = row["score"] >= best["score"] * (1.0 - band)
            else:  # optimizer-step points: score = -step time
                row["tie"] = -row["score"] <= -best["score"] * (1.0 + band)
    return rows


def published_place(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Where the recipe's own configuration landed: ``{"point_id", "status", "rank", "of", "tie", "reason",
    "collapsed_into"}`` (``rank`` of its distinct twin when it was collapsed), or ``None`` when the space does not
    hold it."""
    mine = next((r for r in rows if r.get("published")), None)
    if mine is None:
        return None
    of = sum(1 for r in rows if r.get("rank") is not None)
    rank, tie = mine.get("rank"), mine.get("tie")
    if mine.get("collapsed_into"):
        twin = next(r for r in rows if r["point_id"] == mine["collapsed_into"] and r.get("rank") is not None)
        rank, tie = twin["rank"], twin["tie"]
    return {
        "point_id": mine["point_id"],
        "status": mine["status"],
        "rank": rank,
        "of": of,
        "tie": bool(tie),
        "reason": mine.get("reason", ""),
        "collapsed_into": mine.get("collapsed_into"),
    }
