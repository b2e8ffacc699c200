"""The step-time model's public entry: a re-export of :mod:`bridgebench.model.steptime` (the model, split by
concern: one module per term). Callers import from here; see the package docstring for where each term lives."""

from __future__ import annotations

from bridgebench.model.steptime.calibration import Calibration
from bridgebench.model.steptime.config import (
    CP_COMM_TYPES,
    DISPATCHERS,
    MUON_ASSIGNMENTS,
    PRECISION_CLASS,
    GpuFacts,
    TimeConfig,
    TimeModelError,
    family,
    group_key,
)
from bridgebench.model.steptime.fit import (
    C_LAYER_GRID,
    Row,
    bands_from,
    calibrate,
    calibrate_with_bands,
    cross_validate,
    fit_levels,
    implied_level,
)
from bridgebench.model.steptime.muon import KERNELS, TP_MODES, MuonCost, MuonVariant, adam_counterpart, muon_cost
from bridgebench.model.steptime.optimizer import (
    ADAM_BYTES_PER_PARAM,
    MUON_ELEMENTWISE_BYTES,
    MuonRankLoads,
    OptimizerStep,
    muon_rank_loads,
)
from bridgebench.model.steptime.predict import TERMS, TimeBreakdown, evaluate, layer_time, predict_time
from bridgebench.model.steptime.recompute import recompute_flops
from bridgebench.model.steptime.release import GroupLevel, LevelTable, release_index

__all__ = [
    "ADAM_BYTES_PER_PARAM",
    "CP_COMM_TYPES",
    "C_LAYER_GRID",
    "Calibration",
    "DISPATCHERS",
    "GpuFacts",
    "GroupLevel",
    "KERNELS",
    "LevelTable",
    "MUON_ASSIGNMENTS",
    "MUON_ELEMENTWISE_BYTES",
    "MuonCost",
    "MuonRankLoads",
    "MuonVariant",
    "OptimizerStep",
    "PRECISION_CLASS",
    "Row",
    "TERMS",
    "TP_MODES",
    "TimeBreakdown",
    "TimeConfig",
    "TimeModelError",
    "adam_counterpart",
    "bands_from",
    "calibrate",
    "calibrate_with_bands",
    "cross_validate",
    "evaluate",
    "family",
    "fit_levels",
    "group_key",
    "implied_level",
    "layer_time",
    "muon_cost",
    "muon_rank_loads",
    "predict_time",
    "recompute_flops",
    "release_index",
]
