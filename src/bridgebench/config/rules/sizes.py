"""Rule ``positive_int`` and ``layout_syntax``'s type half, on the slow path: every size of a :class:`Point` that is
not a positive integer (``mtp_num_layers`` a non-negative one), named; or a copy with plain ints when all are integral
(numpy ints, say), which :func:`bridgebench.config.rules.check.check` then checks as usual."""

from __future__ import annotations

import numbers
from typing import Any

from bridgebench.config.rules.point import Point, Violation

_REQUIRED_POSITIVE = (
    "num_gpus",
    "num_layers",
    "num_attention_heads",
    "seq_length",
    "gbs",
    "mbs",
    "gpus_per_node",
    "tp",
    "pp",
    "cp",
    "ep",
)
_OPTIONAL_POSITIVE = (
    "vp",
    "etp",
    "num_query_groups",
    "num_moe_experts",
    "num_layers_in_first_pipeline_stage",
    "num_layers_in_last_pipeline_stage",
)


def _is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def size_violations(p: Point) -> tuple[list[Violation], Point | None]:
    """Slow path: name every bad size; or, when all are integral (e.g. numpy ints), a copy with plain ints."""
    out = []
    fixed: dict[str, Any] = {}
    for name in _REQUIRED_POSITIVE:
        v = getattr(p, name)
        if not _is_int(v) or v < 1:
            out.append(Violation("positive_int", f"{name} must be a positive integer, got {v!r}"))
        else:
            fixed[name] = int(v)
    for name in _OPTIONAL_POSITIVE:
        v = getattr(p, name)
        if v is not None and (not _is_int(v) or v < 1):
            out.append(Violation("positive_int", f"{name} must be a positive integer or None, got {v!r}"))
        elif v is not None:
            fixed[name] = int(v)
    v = p.mtp_num_layers
    if v is not None and (not _is_int(v) or v < 0):
        out.append(Violation("positive_int", f"mtp_num_layers must be a non-negative integer or None, got {v!r}"))
    elif v is not None:
        fixed["mtp_num_layers"] = int(v)
    layout = p.pipeline_model_parallel_layout
    if layout is not None and not isinstance(layout, str):
        out.append(
            Violation(
                "layout_syntax", f"pipeline_model_parallel_layout must be a string or None, got {type(layout).__name__}"
            )
        )
    return out, (None if out else p.with_dims(**fixed))
