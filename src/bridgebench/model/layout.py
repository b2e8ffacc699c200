"""Pipeline layouts (``pipeline_model_parallel_layout``): the string grammar of Megatron-Core, unrolled per stage.

Pure Python; used by the validity rules (``bridgebench.config.rules``) and by the Newton-Schulz busiest-GPU model.
"""

from __future__ import annotations

import re
from functools import lru_cache

from bridgebench.errors import BridgebenchError

#: Same regexes, same order as Megatron-Core 0.19.2 PipelineParallelLayerLayout.parse_str_to_list.
_UNROLL_PATTERNS = (re.compile(r"\(([^)]+)\)\*(\d+)"), re.compile(r"(.)\*(\d+)"))
_LAYOUT_CHARS = frozenset("ELtm")
#: bridgebench refuses layouts that unroll past this many characters (Megatron-Core would build the string).
LAYOUT_MAX_CHARS = 100_000


class LayoutError(BridgebenchError):
    """A pipeline layout string outside Megatron-Core's grammar."""


class _TooLong(Exception):
    pass


@lru_cache(maxsize=4096)
def _parse_layout_cached(layout: str) -> tuple[tuple[str, ...] | None, str]:
    s = layout.replace(",", "")  # purely cosmetic commas, as in Megatron-Core
    budget = [len(s)]

    def unroll(match: re.Match) -> str:
        body, times = match.group(1), int(match.group(2))
        budget[0] += len(body) * times
        if budget[0] > LAYOUT_MAX_CHARS:
            raise _TooLong
        return body * times

    try:
        for pattern in _UNROLL_PATTERNS:
            s = pattern.sub(unroll, s)
    except _TooLong:
        return None, f"layout {layout!r} unrolls to more than {LAYOUT_MAX_CHARS} characters"
    stages = tuple(s.split("|"))
    for stage in stages:
        for ch in stage:
            if ch not in _LAYOUT_CHARS:
                return None, (
                    f"invalid layer character {ch!r} in stage {stage!r} of layout {layout!r} (unrolled "
                    f"{s!r}); known: E (embedding), L (loss), t (decoder layer), m (MTP layer), | (stage "
                    f"boundary), X*N and (...)*N repeats"
                )
    return stages, ""


def parse_layout(layout: str) -> list[str]:
    """Unroll a ``pipeline_model_parallel_layout`` string into one string per stage (in layout order).

    Same grammar as Megatron-Core's ``PipelineParallelLayerLayout.parse_str_to_list``: commas are ignored,
    ``(...)*N`` then ``X*N`` are unrolled, ``|`` separates stages, and a stage holds ``E``/``L``/``t``/``m``.
    ``"Et*2|(t*2|)*2tL"`` -> ``["Ett", "tt", "tt", "tL"]``.

    Raises:
        LayoutError: a character outside the grammar (or an absurdly long unrolled layout).
    """
    stages, error = _parse_layout_cached(layout)
    if stages is None:
        raise LayoutError(error)
    return list(stages)


#: decoder-layer slots the loss stage's output layer and cross entropy are worth when balancing a layout:
#: Megatron-Bridge 0.6.2 ``recipes/kimi/h100/kimi_k2.py::_get_kimi_k2_pipeline_layout`` fills 64 slots with Kimi
#: K2's 61 layers (the last stage gets 3 layers fewer, e.g. PP4 VP4: ``Et*4|(t*4|)*14tL``).
LOSS_LAYER_SLOTS = 3


def balanced_layout(num_layers: int, pp: int, vp: int | None = None, mtp: int = 0) -> str | None:
    """A ``pipeline_model_parallel_layout`` for ``PP x VP`` stages when the decoder layers do not split evenly.

    ``None`` when they do (Megatron-Core's even split needs no layout) or there is one stage. Otherwise the layers
    fill ``num_layers + LOSS_LAYER_SLOTS`` slots in stage order, ``ceil(slots / stages)`` per stage, the loss stage
    taking :data:`LOSS_LAYER_SLOTS` fewer (the rule of Megatron-Bridge's Kimi K2 layouts, which this reproduces for
    every (PP, VP) it lists); the embedding goes first, the MTP layers and the loss last.

    Raises:
        LayoutError: non-positive sizes.
    """
    stages = pp * (vp or 1)
    if num_layers < 1 or pp < 1 or (vp is not None and vp < 1) or mtp < 0:
        raise LayoutError(f"balanced_layout needs positive sizes, got layers={num_layers} pp={pp} vp={vp} mtp={mtp}")
    if stages == 1 or num_layers % stages == 0:
        return None
    per = -(-(num_layers + LOSS_LAYER_SLOTS) // stages)
    counts, left = [], num_layers
    for _ in range(stages - 1):
        n = min(per, left)
        counts.append(n)
        left -= n
    counts.append(left)
    parts = []
    for i, n in enumerate(counts):
        body = "t" if n == 1 else (f"t*{n}" if n else "")
        parts.append(("E" if i == 0 else "") + body + ("m" * mtp + "L" if i == stages - 1 else ""))
    return "|".join(parts)
