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
