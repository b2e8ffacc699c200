"""``bridgebench compare``: published release histories and your own runs, with the statistics of
:mod:`bridgebench.results.compare_stats`, written as tables, plots and a provenance file.

Sources:

* **published** -- NVIDIA's per-release tables (``configs/paths`` ``reference``), one history per
  :class:`~bridgebench.results.compare_stats.ConfigKey` (model, GPU, precision, GPU count, optimizer) that matches the
  selection, every value an interval, every step marked (real change, within rounding, below threshold,
  not like-for-like with the changed fields), change points flagged.
* **runs** -- records of the results store (``configs/paths`` ``results``). Either two sides chosen by filters
  (``--a optimizer=adamw --b optimizer=muon``) compared with :func:`~bridgebench.results.compare_stats.compare_runs`
  (for optimizer-step records also per matrix family, FDR-controlled together), or, without sides, each config key's
  own release history (adjacent releases compared, FDR across all steps).
* **both** -- the published history with your runs of the same key beside it: per release your mean with a CI and
  its ratio to the published interval.

Per-iteration values of a record: ``record["series"]`` = ``{"iteration": [...], "step_time_s": [...],
"tflops_per_gpu": [... or null]}`` (written by ``bridgebench collect``); an optimizer-step record without one falls
back to the per-repeat times of its payload, a record with neither to its single run-level figure (then the run has
no within-run spread and the inner bootstrap level is skipped for it).

Everything a result used is listed in its provenance: reference rows (``<file>#<data row>``) with the file's sha256,
store record ids, parameters, seed and library versions. Same command, same store: same tables.

The package, one module per concern: :mod:`~bridgebench.results.compare.selection` (what is compared),
:mod:`~bridgebench.results.compare.histories` (published release histories),
:mod:`~bridgebench.results.compare.own_runs` (store records: values, sides, own histories),
:mod:`~bridgebench.results.compare.result` (:func:`run_compare`), :mod:`~bridgebench.results.compare.outputs` (files)
and :mod:`~bridgebench.results.compare.plots` (figures); the names callers use are importable from here.
"""

from __future__ import annotations

from bridgebench.results.compare.histories import (
    History,
    OwnRelease,
    left_out_rows,
    published_history,
    published_keys,
    same_flops_count,
    speedup_matrix,
)
from bridgebench.results.compare.outputs import output_dir, parquet_provenance, write_outputs
from bridgebench.results.compare.own_runs import (
    OwnHistory,
    Side,
    SidesResult,
    attach_own_runs,
    build_side,
    check_like_for_like,
    compare_sides,
    own_histories,
    record_values,
    run_matches,
    run_values,
)
from bridgebench.results.compare.result import CompareResult, run_compare, side_statistic
from bridgebench.results.compare.selection import (
    METRICS,
    RUN_KEY_ALIASES,
    SIDE_KEY_FIELDS,
    SOURCES,
    Selection,
    parse_selection,
)
from bridgebench.results.compare_stats import CompareError

__all__ = [
    "METRICS",
    "RUN_KEY_ALIASES",
    "SIDE_KEY_FIELDS",
    "SOURCES",
    "CompareError",
    "CompareResult",
    "History",
    "OwnHistory",
    "OwnRelease",
    "Selection",
    "Side",
    "SidesResult",
    "attach_own_runs",
    "build_side",
    "check_like_for_like",
    "compare_sides",
    "left_out_rows",
    "output_dir",
    "own_histories",
    "parquet_provenance",
    "parse_selection",
    "published_history",
    "published_keys",
    "record_values",
    "run_compare",
    "run_matches",
    "run_values",
    "same_flops_count",
    "side_statistic",
    "speedup_matrix",
    "write_outputs",
]
