"""The per-iteration series of an optimizer-step record (light: no numpy, pandas or scipy, so ``collect`` stays fast).

A store record's ``series`` is ``{"iteration": [...], "step_time_s": [...] (s), "tflops_per_gpu": [... or None]}``;
for the optimizer-step payload (:mod:`bridgebench.payloads.optstep`) the iterations are its timed repeats.
"""

from __future__ import annotations

from typing import Any, Mapping

from bridgebench.model.optimizer import family


def optstep_series(payload: Mapping[str, Any], optimizer: str) -> dict[str, Any] | None:
    """``record["series"]`` of an optimizer-step payload: the per-repeat total step times of the run's optimizer
    (``total.muon_step_times_s`` for Muon, ``total.adamw_step_times_s`` otherwise), or None when the payload kept only
    medians (payloads written before the per-repeat lists existed).

    Shape: ``{"iteration": [1, ..., repeats], "step_time_s": [...] (s), "tflops_per_gpu": None}`` -- an optimizer
    step has no model FLOPs.
    """
    total = payload.get("total") or {}
    key = "muon_step_times_s" if family(optimizer) == "muon" else "adamw_step_times_s"
    times = total.get(key)
    if not times:
        return None
    return {
        "iteration": list(range(1, len(times) + 1)),
        "step_time_s": [float(t) for t in times],
        "tflops_per_gpu": None,
    }
