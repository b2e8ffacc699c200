"""The sweep engine: a search space enumerated on plain values, checked by the fast rules, deduplicated, scored by
the memory model and ranked by the time model -- no Hydra compose and no ConfigContainer per point -- in one
pipeline that flows one way (:mod:`bridgebench.sweep.pipeline`).

Modules, in the order a point goes through them: :mod:`~bridgebench.sweep.space` (the search space),
:mod:`~bridgebench.sweep.bases` (one composed config per group combination, a point's values),
:mod:`~bridgebench.sweep.points` (stages 1-2: enumerate, rules), :mod:`~bridgebench.sweep.scoring`
(stages 3-4: memory, time), :mod:`~bridgebench.sweep.trust` (ranking, ties, indistinct points, the recipe's
own configuration, expert groups beyond NVLink), :mod:`~bridgebench.sweep.pipeline` (the stages in order,
``predict``); :mod:`~bridgebench.sweep.keys` names the config key behind every column.
"""

from bridgebench.sweep.bases import Base, base_of, compose_bases, effective, format_value, point_overrides
from bridgebench.sweep.keys import AUTO, KEYS, POSITIVE, RULE_ENV
from bridgebench.sweep.pipeline import (
    STAGES,
    Progress,
    Quiet,
    StageStore,
    predict,
    prepare,
    run_pipeline,
    summarize,
)
from bridgebench.sweep.points import candidates, check_rules, enumerate_points, rule_point
from bridgebench.sweep.scoring import (
    OPTSTEP_BYTES_PER_ELEMENT,
    grad_reduce_in_fp32,
    memory_config,
    ns_policy,
    score_memory,
    score_time,
    time_config,
)
from bridgebench.sweep.space import SWEEP_DIR, Axis, Space, SweepError, parse_space, space_names
from bridgebench.sweep.trust import published_place, rank_and_annotate

__all__ = [
    "AUTO",
    "KEYS",
    "OPTSTEP_BYTES_PER_ELEMENT",
    "POSITIVE",
    "RULE_ENV",
    "STAGES",
    "SWEEP_DIR",
    "Axis",
    "Base",
    "Progress",
    "Quiet",
    "Space",
    "StageStore",
    "SweepError",
    "rule_point",
    "base_of",
    "candidates",
    "check_rules",
    "compose_bases",
    "effective",
    "enumerate_points",
    "format_value",
    "grad_reduce_in_fp32",
    "memory_config",
    "ns_policy",
    "parse_space",
    "point_overrides",
    "predict",
    "prepare",
    "published_place",
    "rank_and_annotate",
    "run_pipeline",
    "score_memory",
    "score_time",
    "space_names",
    "summarize",
    "time_config",
]
