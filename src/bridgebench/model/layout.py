"""Pipeline layouts (``pipeline_model_parallel_layout``): the string grammar of Megatron-Core, unrolled per stage.

Pure Python; used by the validity rules (``bridgebench.config.rules``) and by the Newton-Schulz busiest-GPU model.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
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
def parse_layout_stages(layout: str) -> tuple[tuple[str, ...] | None, str]:
    """``(stages, "")`` of a layout string unrolled as :func:`parse_layout` does, or ``(None, error message)`` for a
    string outside the grammar or longer than :data:`LAYOUT_MAX_CHARS` unrolled; cached, never raises (the validity
    rules report the message)."""
    s = layout.replace(",", "")  # purely cosmetic commas, as in Megatron-Core
    budget = [len(s)]

    def unroll(match: re.Match[str]) -> str:
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
    stages, error = parse_layout_stages(layout)
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


#: one virtual pipeline stage of a pipeline rank: (decoder / MTP layer indices, holds the embedding, holds the loss)
Chunk = tuple[tuple[int, ...], bool, bool]


@lru_cache(maxsize=8192)
def stage_layers(
    num_layers: int,
    pp: int,
    vp: int | None = None,
    layout: str | None = None,
    mtp: int = 0,
    first_stage_layers: int | None = None,
    last_stage_layers: int | None = None,
    account_for_embedding: bool = False,
    account_for_loss: bool = False,
) -> tuple[tuple[Chunk, ...], ...]:
    """Which decoder layers each pipeline rank builds, per virtual stage, as Megatron-Core 0.19.2 assigns them.

    Returns one tuple per pipeline rank of its virtual chunks in schedule order, each ``(layer indices, has
    embedding, has loss)``; decoder layers are ``0 .. num_layers - 1``, MTP layers ``num_layers ..``.

    - A ``pipeline_model_parallel_layout``: its i-th stage lives on rank ``i % PP``, virtual stage ``i // PP``
      (``pipeline_parallel_layer_layout.py``); ``t`` layers numbered in order, ``m`` after them; a layout without
      ``m`` puts the MTP layers with the loss.
    - ``num_layers_in_first/last_pipeline_stage``: the first (last) rank takes that many, the middle ranks split the
      rest evenly; each rank's layers split evenly over its VP chunks (``transformer_block.py::
      get_num_layers_to_build``).
    - ``account_for_embedding/loss_in_pipeline_split``: the embedding (loss) counts as one layer, ``(num_layers +
      extra) / PP`` per rank, ``/ VP`` per chunk; the first chunk of rank 0 (last chunk of the last rank) builds one
      decoder layer fewer (same function).
    - Otherwise an even split, ``num_layers / (PP x VP)`` per chunk.
    Layer indices follow Megatron-Core's offsets (``transformer_layer.py::get_transformer_layer_offset``): virtual
    stage-major, then pipeline rank. The embedding is on rank 0's first chunk, the loss and MTP layers on the last
    rank's last chunk.

    Megatron-Core asserts the splits divide; here a split that does not divide hands the remainder to the earliest
    stages (the validity rules in ``bridgebench.config.rules`` report it), so the function is total.

    Raises:
        LayoutError: a layout outside the grammar, or non-positive sizes.
    """
    if num_layers < 1 or pp < 1 or (vp is not None and vp < 1) or mtp < 0:
        raise LayoutError(f"stage_layers needs positive sizes, got layers={num_layers} pp={pp} vp={vp} mtp={mtp}")
    chunks = vp if (vp and pp > 1) else 1
    if layout:
        return _layout_stages(layout, num_layers, pp, mtp)
    if pp > 1 and (first_stage_layers is not None or last_stage_layers is not None):
        counts = _uneven_counts(num_layers, pp, chunks, first_stage_layers, last_stage_layers)
    else:
        counts = _even_counts(num_layers, pp, chunks, account_for_embedding, account_for_loss)
    ranks: list[list[Chunk]] = [[] for _ in range(pp)]
    start = 0
    for c in range(chunks):
        for r in range(pp):
            n = max(counts[r][c], 0)
            layers = tuple(range(start, min(start + n, num_layers)))
            start += n
            last = r == pp - 1 and c == chunks - 1
            if last:
                layers += tuple(range(num_layers, num_layers + mtp))
            ranks[r].append((layers, r == 0 and c == 0, last))
    return tuple(tuple(r) for r in ranks)


def _layout_stages(layout: str, num_layers: int, pp: int, mtp: int) -> tuple[tuple[Chunk, ...], ...]:
    """:func:`stage_layers` for a ``pipeline_model_parallel_layout``: stage ``i`` on rank ``i % PP``; ``t`` layers
    numbered in order, ``m`` after them; a layout without ``m`` puts the MTP layers with the loss."""
    ranks: list[list[Chunk]] = [[] for _ in range(pp)]
    t_i, m_i = 0, num_layers
    for i, stage in enumerate(parse_layout(layout)):
        layers = []
        for ch in stage:
            if ch == "t":
                layers.append(t_i)
                t_i += 1
            elif ch == "m":
                layers.append(m_i)
                m_i += 1
        ranks[i % pp].append((tuple(layers), "E" in stage, "L" in stage))
    if mtp and m_i == num_layers:
        for r in ranks:
            for j, (ls, emb, loss) in enumerate(r):
                if loss:
                    r[j] = (ls + tuple(range(num_layers, num_layers + mtp)), emb, loss)
    return tuple(tuple(r) for r in ranks)


def _spread(total: int, n: int) -> list[int]:
    """``total`` (clamped at 0) over ``n`` parts as evenly as possible, the remainder to the earliest parts."""
    base, extra = divmod(max(total, 0), n)
    return [base + (1 if i < extra else 0) for i in range(n)]


def _uneven_counts(
    num_layers: int, pp: int, chunks: int, first_stage_layers: int | None, last_stage_layers: int | None
) -> list[list[int]]:
    """Decoder layers per ``[rank][chunk]`` with ``num_layers_in_first/last_pipeline_stage``: the first (last) rank
    takes that many, the middle ranks split the rest evenly; each rank's layers split evenly over its chunks."""
    middle_ranks = pp - (first_stage_layers is not None) - (last_stage_layers is not None)
    middle = num_layers - (first_stage_layers or 0) - (last_stage_layers or 0)
    per_rank = _spread(middle, middle_ranks) if middle_ranks > 0 else []
    totals = []
    for r in range(pp):
        if r == 0 and first_stage_layers is not None:
            totals.append(first_stage_layers)
        elif r == pp - 1 and last_stage_layers is not None:
            totals.append(last_stage_layers)
        else:
            totals.append(per_rank.pop(0) if per_rank else 0)
    return [_spread(totals[r], chunks) for r in range(pp)]


def _even_counts(
    num_layers: int, pp: int, chunks: int, account_for_embedding: bool, account_for_loss: bool
) -> list[list[int]]:
    """Decoder layers per ``[rank][chunk]`` in an even split; ``account_for_*`` count the embedding (loss) as one
    layer taken from rank 0's first chunk (the last rank's last chunk)."""
    counts = [[0] * chunks for _ in range(pp)]
    extra = int(account_for_embedding) + int(account_for_loss) if pp > 1 else 0
    flat = _spread(num_layers + extra, pp * chunks)  # in (chunk, rank) order: the earliest stages first
    for c in range(chunks):
        for r in range(pp):
            counts[r][c] = flat[c * pp + r]
    if pp > 1 and account_for_embedding:
        counts[0][0] -= 1
    if pp > 1 and account_for_loss:
        counts[pp - 1][chunks - 1] -= 1
    return counts


def split_divides(
    num_layers: int,
    pp: int,
    vp: int | None = None,
    first_stage_layers: int | None = None,
    last_stage_layers: int | None = None,
    account_for_embedding: bool = False,
    account_for_loss: bool = False,
) -> bool:
    """Whether Megatron-Core 0.19.2 accepts this split without a layout string (the asserts of
    ``transformer_block.py::get_num_layers_to_build`` and ``TransformerConfig.__post_init__``): uneven first/last
    stages leave a middle that divides over the middle ranks and each rank's layers divide by VP; ``account_for_*``
    make ``num_layers + extra`` divide by ``PP`` (and by ``VP`` per rank) with a layer left on the first / last
    chunk; otherwise ``num_layers`` divides by ``PP x VP``. The two kinds of uneven split exclude each other."""
    chunks = vp if (vp and pp > 1) else 1
    uneven = first_stage_layers is not None or last_stage_layers is not None
    account = account_for_embedding or account_for_loss
    if pp == 1:
        return not uneven
    if uneven:
        if account:
            return False
        middle_ranks = pp - (first_stage_layers is not None) - (last_stage_layers is not None)
        middle = num_layers - (first_stage_layers or 0) - (last_stage_layers or 0)
        if middle_ranks < 0 or middle < 0 or bool(middle) != bool(middle_ranks):
            return False
        if middle_ranks and (middle % middle_ranks or (middle // middle_ranks) % chunks):
            return False
        return all(n is None or n % chunks == 0 for n in (first_stage_layers, last_stage_layers))
    total = num_layers + int(account_for_embedding) + int(account_for_loss)
    if total % pp or (total // pp) % chunks:
        return False
    per_chunk = total // (pp * chunks)
    return per_chunk >= (2 if account_for_embedding and account_for_loss and pp * chunks == 1 else 1)


@dataclass(frozen=True, kw_only=True)
class PipelineSplit:
    """How Megatron-Core splits the decoder layers over the pipeline stages (``TransformerConfig`` 0.19.2): a
    ``pipeline_model_parallel_layout`` string (``layout``), or the layer counts of the first / last stage
    (``num_layers_in_first/last_pipeline_stage``) and whether the embedding and the loss count as layers
    (``account_for_embedding/loss_in_pipeline_split``); all unset: an even split."""

    layout: str | None = None
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    account_for_embedding: bool = False
    account_for_loss: bool = False


def auto_split(
    num_layers: int, pp: int, vp: int | None = None, mtp: int = 0, own: PipelineSplit = PipelineSplit()
) -> PipelineSplit:
    """The split a sweep's ``pipeline_model_parallel_layout: auto`` gives a point whose base config has the split
    ``own``.

    In order, the first that Megatron-Core accepts (:func:`split_divides`): the base config's own split (the
    recipe's layout string when it has ``PP x VP`` stages holding every layer, its
    ``num_layers_in_first/last_pipeline_stage`` or ``account_for_*``: Qwen3 235B's 94 layers on PP 4 as
    24 per rank, embedding and loss counted); an even split; the embedding and the loss counted as layers (what
    Megatron-Bridge's Llama and Qwen3 base recipes set: Llama 3.1 405B on PP 8 x VP 4 gets 15 layers on the first
    rank); then a layout string, :func:`balanced_layout` (Megatron-Bridge's Kimi K2 rule). A model with MTP layers
    always takes a layout string when the split is uneven (Megatron-Core places MTP only through a layout or on the
    last stage, which ``account_for_loss`` does not count).

    Raises:
        LayoutError: non-positive sizes.
    """
    if num_layers < 1 or pp < 1 or (vp is not None and vp < 1):
        raise LayoutError(f"auto_split needs positive sizes, got layers={num_layers} pp={pp} vp={vp}")
    layout = own.layout
    if layout and layout != "auto":
        stages = parse_layout(layout)
        text = "".join(stages)
        chunks = vp if (vp and pp > 1) else 1
        if len(stages) == pp * chunks and text.count("t") == num_layers and text.count("m") in (0, mtp):
            return PipelineSplit(layout=layout)
    counts = (own.first_stage_layers, own.last_stage_layers, own.account_for_embedding, own.account_for_loss)
    if counts[0] is not None or counts[1] is not None or counts[2] or counts[3]:
        if split_divides(num_layers, pp, vp, *counts):
            return dataclasses.replace(own, layout=None)
    if split_divides(num_layers, pp, vp):
        return PipelineSplit()
    if not mtp and split_divides(num_layers, pp, vp, None, None, True, True):
        return PipelineSplit(account_for_embedding=True, account_for_loss=True)
    return PipelineSplit(layout=balanced_layout(num_layers, pp, vp, mtp))


def split_layout(num_layers: int, pp: int, vp: int | None, mtp: int, split: PipelineSplit) -> str | None:
    """``split`` written as the ``pipeline_model_parallel_layout`` string that builds the same layers on the same
    ranks (:func:`stage_layers`), for a consumer that reads only a layout string (the time model's
    :class:`bridgebench.model.steptime.config.TimeConfig`): the layout itself when ``split`` has one; None for an
    even split (``num_layers`` divides by ``PP x VP``, nothing counted) or one stage; otherwise the stages of the
    uneven first / last stage or of the embedding and loss counted as layers, in layout order (stage ``i`` =
    virtual stage ``i // PP`` of rank ``i % PP``), e.g. Llama 3.1 405B's 126 layers on PP 8 x VP 4 with
    ``account_for_embedding/loss_in_pipeline_split`` (Megatron-Bridge 0.6.2 ``recipes/llama/h100/llama3.py``):
    ``Et*3|t*4|...|t*4|t*3L``, 15 or 16 layers a rank.

    Raises:
        LayoutError: a layout outside the grammar, or non-positive sizes.
    """
    if split.layout:
        return split.layout
    uneven = split.first_stage_layers is not None or split.last_stage_layers is not None
    counted = split.account_for_embedding or split.account_for_loss
    if pp == 1 or not (uneven or counted):
        return None
    ranks = stage_layers(num_layers, pp, vp, None, mtp, split.first_stage_layers, split.last_stage_layers,
                         split.account_for_embedding, split.account_for_loss)  # fmt: skip
    parts = []
    for c in range(len(ranks[0])):
        for r in range(pp):
            layers, emb, loss = ranks[r][c]
            n_t = sum(1 for i in layers if i < num_layers)
            body = "t" if n_t == 1 else (f"t*{n_t}" if n_t else "")
            parts.append(("E" if emb else "") + body + ("m" * (len(layers) - n_t) + "L" if loss else ""))
    return "|".join(parts)
