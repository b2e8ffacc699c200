"""The pipeline side of the memory model: which layers (virtual chunks, embedding, loss) each pipeline rank holds, as
Megatron-Core assigns them, and how many microbatches' activations of each chunk are alive at a rank's peak.

Sources: [K22] Sec. 4.2.3, [ISK] ``estimate_013.py`` and [MLM] as listed in :mod:`bridgebench.model.memory`; the
split itself is :func:`bridgebench.model.layout.stage_layers` (megatron-core 0.19.2).
"""

from __future__ import annotations

from bridgebench.model import layout as layout_mod
from bridgebench.model.memory.config import MemoryConfig
from bridgebench.model.spec import ModelSpec

Chunk = layout_mod.Chunk  # (layer indices, holds the embedding, holds the loss)


def stage_chunks(
    num_layers: int,
    mtp: int,
    pp: int,
    vp: int | None,
    layout: str | None,
    first_stage_layers: int | None = None,
    last_stage_layers: int | None = None,
    account_for_embedding: bool = False,
    account_for_loss: bool = False,
) -> tuple[tuple[Chunk, ...], ...]:
    """Per pipeline rank, its virtual chunks in schedule order, each ``(layer indices, has_embedding, has_loss)``,
    as Megatron-Core assigns them: :func:`bridgebench.model.layout.stage_layers` (layout string, uneven first / last
    stage, ``account_for_embedding/loss_in_pipeline_split``, even split).

    Raises:
        bridgebench.model.layout.LayoutError: a layout outside Megatron-Core's grammar.
    """
    return layout_mod.stage_layers(
        num_layers, pp, vp, layout, mtp, first_stage_layers, last_stage_layers, account_for_embedding, account_for_loss
    )


def rank_chunks(spec: ModelSpec, cfg: MemoryConfig) -> tuple[tuple[Chunk, ...], ...]:
    """:func:`stage_chunks` of a point: per pipeline rank its chunks under ``cfg``'s pipeline settings.

    Raises:
        bridgebench.model.layout.LayoutError: a layout outside Megatron-Core's grammar.
    """
    return stage_chunks(
        spec.num_layers,
        spec.mtp_layers,
        cfg.pp,
        cfg.vp,
        cfg.pipeline_model_parallel_layout,
        cfg.num_layers_in_first_pipeline_stage,
        cfg.num_layers_in_last_pipeline_stage,
        cfg.account_for_embedding_in_pipeline_split,
        cfg.account_for_loss_in_pipeline_split,
    )


def inflight_microbatches(pp: int, rank: int, chunk: int, vp: int | None, m: int) -> int:
    """Microbatches whose activations of virtual chunk ``chunk`` are alive at rank ``rank``'s peak.

    1F1B (PipeDream-flush): ``min(m, p - r)`` [K22 Sec. 4.2.3; ISK]. Interleaved (``v`` chunks): chunk 0
    ``p + max(2(p - r) - 1 - p, 0)``, middle chunks ``p``, last chunk ``min(2(p - r) + 1, p)`` [ISK
    ``estimate_013.py``], capped by ``m``; summed over rank 0's chunks this is Megatron's interleaving penalty
    ``p v (1 + (p - 1)/(p v))`` [MLM].
    """
    if pp == 1:
        return 1
    if not vp or vp == 1:
        return min(m, pp - rank)
    if chunk == 0:
        n = pp + max(2 * (pp - rank) - 1 - pp, 0)
    elif chunk == vp - 1:
        n = min(2 * (pp - rank) + 1, pp)
    else:
        n = pp
    return min(n, m)
