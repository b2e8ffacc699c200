"""Statistics for comparing throughput across releases: NVIDIA's published per-release tables and your own repeated
runs.

Pure functions over plain values and :class:`bridgebench.results.records.RunRecord` objects (no file or store I/O;
:mod:`bridgebench.results.compare` does that). Every result is a frozen dataclass carrying the parameters it was
computed with (``params``: thresholds, seed, bootstrap settings, library versions), so a verdict can be traced to how
it was reached and the same inputs give the same result.

Published tables (``results/reference/published_pretrain_throughput.csv``)
-------------------------------------------------------------------------
* A published number is an **interval**, not a point. How a release's table rounds is declared once, in
  ``configs/release/<release>.yaml`` (``published_rounding``, :func:`bridgebench.config.catalog.releases`):
  ``integer`` -> ``value +- 0.5``; ``whole_sequences_per_job`` (tokens/s/GPU in 26.04.01, 26.06.01, 26.08) ->
  ``(seq_s +- 0.5) * seq_length / num_gpus`` with ``seq_s = tokens/s/GPU * num_gpus / seq_length`` an integer.
  :func:`token_rounding_consistency` shows the evidence: that rule holds for every row of those releases, while the
  alternative reading of the research notes (8 significant bits, bf16) misses rows, and elsewhere neither holds.
* Adjacent releases of one :class:`ConfigKey` are compared on **model TFLOP/s/GPU when the FLOPs count is the same**
  in both releases (same ``flops_formula`` in ``configs/release``, or -- for a model bridgebench can count -- a
  formula change that leaves this model's FLOPs/token unchanged) and on **tokens/s/GPU otherwise** (e.g. GPT OSS at
  26.06, v1 -> v2); each step says which metric and why. The ratio interval is ``[lo_B / hi_A, hi_B / lo_A]``.
* A step is a **real change** when that interval lies entirely above ``1 + threshold`` or entirely below
  ``1 - threshold``: beyond the rounding of both values *and* larger than the threshold (default 1 %, an assumed
  run-to-run noise of a published figure: NVIDIA publishes no repeats or spread). ``=``: the interval contains 1;
  ``~``: beyond rounding but within the threshold.
* A step is **not like-for-like** (``†``) when TP, PP, VP, CP, EP, ETP, GBS, MBS or seq_length differ; the changed
  fields are listed. A field published in only one of the two releases is listed in ``unknown_fields``.
* Change points of a release series: ``ruptures`` PELT on the log of a chain-linked throughput index (comparable across
  a FLOPs-formula change), penalty from a stated noise level (:func:`detect_change_points`).

Own runs (each side: a list of runs, each run an array of per-iteration values)
-----------------------------------------------------------------------------
* Point estimate ``ratio = S(B) / S(A)``, ``S(side)`` = mean over the side's runs of each run's median (or mean):
  each run (SLURM job) weighs the same -- the job is the unit of replication (Kalibera & Jones, "Rigorous Benchmarking
  in Reasonable Time", ISMM 2013).
* CI: two-level bootstrap. Outer level: resample runs. Inner level: a block bootstrap of the run's iterations
  (``arch.bootstrap.StationaryBootstrap`` / ``MovingBlockBootstrap``; block length by ``optimal_block_length``,
  Politis & White 2004) keeps the autocorrelation of per-step times. With few runs a plain bootstrap under-covers, so
  by default the replicates are expanded by ``sqrt(n/(n-1))`` per side and by ``t_df / z`` on the log-ratio
  (Welch-Satterthwaite ``df``; Hesterberg 2015, "What teachers should know about the bootstrap", expanded percentile).
* Rank test: ``scipy.stats.mannwhitneyu`` on run-level statistics (valid) and on pooled iterations (reported only:
  per-step times are autocorrelated, not independent).
* Verdict for ``kind="time"`` (B/A > 1: B slower): ``slower`` if the CI lies above 1 and ``ratio - 1 > threshold``,
  ``faster`` if it lies below 1 and ``1 - ratio > threshold``, else ``no significant change``; for
  ``kind="throughput"`` the directions swap. ``insufficient`` when a side has fewer than ``min_runs`` runs, with the
  runs per side needed (:func:`repeats_needed`). ``no spread: cannot test`` when no value varies on either side
  (the bootstrap's standard error is 0): the ratio is reported, but no CI, no p-value (not p = 0) and no verdict --
  identical repeats say nothing about run-to-run noise (a cached result, a timer's resolution, a copied log).
* Many comparisons: :func:`apply_fdr` (``scipy.stats.false_discovery_control``, Benjamini-Hochberg).

The package: :mod:`~bridgebench.results.compare_stats.base` (shared constants and the error),
:mod:`~bridgebench.results.compare_stats.published` (published tables) and
:mod:`~bridgebench.results.compare_stats.runs` (own runs); every name is importable from here.
"""

from __future__ import annotations

from bridgebench.results.compare_stats.base import (
    LIBRARIES,
    LIKE_FOR_LIKE_FIELDS,
    NO_SPREAD,
    PUBLISHED_RECIPE_FACTS,
    RUN_VERDICTS,
    CompareError,
    library_versions,
)
from bridgebench.results.compare_stats.published import (
    ChangePoints,
    ConfigKey,
    FormulaEquivalence,
    Interval,
    SeriesPoint,
    StepComparison,
    chained_index,
    compare_adjacent,
    compare_step,
    detect_change_points,
    is_bf16,
    published_series,
    ratio_interval,
    record_key,
    rounding_interval,
    token_rounding_consistency,
)
from bridgebench.results.compare_stats.runs import (
    RunComparison,
    apply_fdr,
    compare_runs,
    repeats_needed,
    summarize_runs,
)

__all__ = [
    "ChangePoints",
    "CompareError",
    "ConfigKey",
    "FormulaEquivalence",
    "Interval",
    "LIBRARIES",
    "LIKE_FOR_LIKE_FIELDS",
    "NO_SPREAD",
    "PUBLISHED_RECIPE_FACTS",
    "RUN_VERDICTS",
    "RunComparison",
    "SeriesPoint",
    "StepComparison",
    "apply_fdr",
    "chained_index",
    "compare_adjacent",
    "compare_runs",
    "compare_step",
    "detect_change_points",
    "is_bf16",
    "library_versions",
    "published_series",
    "ratio_interval",
    "record_key",
    "repeats_needed",
    "rounding_interval",
    "summarize_runs",
    "token_rounding_consistency",
]
