"""Fast validity rules for one benchmark point, checked before anything is built or submitted.

Sweeps call :func:`check` on thousands of points, so this package is pure Python (stdlib only: no torch, megatron,
Hydra or OmegaConf import) and does no Hydra compose: a composed config is read once into a flat :class:`Point`
(:meth:`Point.from_config`), or a sweep builds :class:`Point` objects directly from numbers. :func:`check` returns all
violations (empty list = valid); :func:`validate` raises :class:`RuleError` listing them. Each rule is one
:class:`Rule` in :data:`RULES` (id, upstream source, one-line summary); the longer explanation of each is in
``docs/rules.md``. Versions: parallelism rules follow megatron-core 0.19.2 / megatron-bridge 0.6.2 (paths relative to
``site-packages/megatron/``); the Muon rules reproduce the Megatron-Bridge v0.3.1 perf recipe (NeMo 26.02).

==============  ======================================================================================================
module          what it holds
==============  ======================================================================================================
``table``       :class:`Rule` and :data:`RULES`, the one rules table (id, source, summary); :data:`NON_POINT_RULES`
``point``       :class:`Point` (what the rules read), :class:`Violation`, :class:`RuleError`
``check``       :func:`check` (parallel sizes, batch, optimizer and precision rules; calls the others),
                :func:`validate`, :func:`check_config`
``sizes``       ``positive_int`` on the slow path (non-int or non-positive sizes, named)
``pipeline``    layout strings and the layer split over PP x VP
``system``      GPU x precision x system (compute capability, NVLink env vars)
``upstream``    upstream start-up assertions (HybridEP, MoE + TP needs SP, DeepEP's fallback, enum values) with
                the file and tag each came from; the layout a non-dividing split gets suggested
==============  ======================================================================================================
"""

from __future__ import annotations

from bridgebench.config.rules.check import check, check_config, validate
from bridgebench.config.rules.point import Point, RuleError, Violation, config_dims, env_value
from bridgebench.config.rules.table import NON_POINT_RULES, RULES, Rule
from bridgebench.model.layout import LAYOUT_MAX_CHARS, parse_layout

__all__ = [
    "LAYOUT_MAX_CHARS",
    "NON_POINT_RULES",
    "RULES",
    "Point",
    "Rule",
    "RuleError",
    "Violation",
    "check",
    "check_config",
    "config_dims",
    "env_value",
    "parse_layout",
    "validate",
]
