"""The memory model's entry: :func:`estimate_memory`, every term of every pipeline rank, the busiest one kept.

Sources: as listed in :mod:`bridgebench.model.memory`; each term's own function names its source.
"""

from __future__ import annotations

import dataclasses
import math

from bridgebench.model.memory.activations import ActivationSettings, rank_activations
from bridgebench.model.memory.config import (
    LOGITS_BYTES_FUSED,
    LOGITS_BYTES_UNFUSED,
    PRECISION_SAVED_INPUT,
    PRECISION_WEIGHT_EXTRA,
    MemoryBreakdown,
    MemoryConfig,
    adam_state_bytes,
    check_config,
)
from bridgebench.model.memory.frameworks import LOGITS_BYTES_TORCHTITAN, fsdp2_weights_grads, zero3_weights_grads
from bridgebench.model.memory.pipeline import Chunk, rank_chunks
from bridgebench.model.memory.state import StageState, megatron_weights_grads, stage_state
from bridgebench.model.memory.tables import model_tables
from bridgebench.model.spec import ModelSpec


def estimate_memory(spec: ModelSpec, cfg: MemoryConfig) -> MemoryBreakdown:
    """Peak memory per GPU on the busiest rank (max over pipeline ranks), in bytes.

    weights and grads: :func:`~bridgebench.model.memory.state.megatron_weights_grads` (2 B/param bf16 [MLM] + the
    quantized copies of GEMM weights [TE]; 4 B/param gradients with ``grad_reduce_in_fp32``, else 2 B; Megatron-FSDP
    [FSDP]: sharded terms divided by the shard group, plus the gathered units); optimizer:
    :func:`~bridgebench.model.memory.state.optimizer_bytes` (x (1 - ``optimizer_offload_fraction``) with
    ``optimizer_cpu_offload``); activations: :func:`~bridgebench.model.memory.activations.rank_activations`
    (per-module bytes per token x local tokens ``s b / CP`` x in-flight microbatches; recompute and offloading);
    logits (loss stage, one microbatch): ``s b V_pad / t`` x 6 B (4 B with fused CE) per output head (1 + MTP
    layers) + the output-layer input [ISK; MLM uses 4 B (h + V)]; other: ``cfg.other_bytes`` + Muon's Newton-Schulz
    workspace (:func:`_ns_workspace`). ``framework`` ``torchtitan`` / ``deepspeed``:
    :mod:`bridgebench.model.memory.frameworks` (FSDP2, op-level selective checkpointing and the upcast loss [TT];
    ZeRO-3's per-tensor gathering [DS]; see :class:`MemoryConfig`).

    Args:
        spec: the model.
        cfg: the point.

    Returns:
        The busiest rank's :class:`MemoryBreakdown` (bytes), with every rank's total in ``per_stage``.

    Raises:
        MemoryModelError: non-positive or non-dividing sizes, unknown optimizer, precision, recompute, FSDP or
            offload setting (:func:`~bridgebench.model.memory.config.check_config`).
        bridgebench.model.layout.LayoutError: a bad pipeline layout.
    """
    check_config(spec, cfg)
    tp = cfg.tp
    tid = id(model_tables(spec))
    tokens = (cfg.seq_length or spec.seq_length) * cfg.mbs / cfg.cp
    sp = cfg.sequence_parallel and tp > 1
    h = spec.hidden_size
    ranks = rank_chunks(spec, cfg)
    vpad = spec.padded_vocab_size(tp)
    if cfg.framework == "torchtitan":
        lb = LOGITS_BYTES_TORCHTITAN
    else:
        lb = LOGITS_BYTES_FUSED if cfg.cross_entropy_loss_fusion else LOGITS_BYTES_UNFUSED
    acts = _activation_settings(cfg, tid, tokens, sp, h, vp=len(ranks[0]) if len(ranks[0]) > 1 else None)
    best: MemoryBreakdown | None = None
    totals = []
    for r, chunks in enumerate(ranks):
        has_loss = any(ch[2] for ch in chunks)
        weights, grads, opt, st = _rank_state(spec, cfg, tid, chunks)
        act = rank_activations(acts, r, chunks)
        logits = 0.0
        if has_loss:
            logits = tokens * vpad / tp * lb * (1 + spec.mtp_layers) + 2.0 * h * tokens / (tp if sp else 1)
        other = cfg.other_bytes + _ns_workspace(cfg, st)
        total = weights + grads + opt + act + logits + other
        totals.append(total)
        if best is None or total > best.total:
            best = MemoryBreakdown(
                weights=weights, grads=grads, optimizer_state=opt, activations=act, logits=logits, other=other, stage=r
            )
    assert best is not None  # rank_chunks gives at least one rank
    return dataclasses.replace(best, per_stage=tuple(totals))


def _activation_settings(
    cfg: MemoryConfig, tid: int, tokens: float, sp: bool, h: int, *, vp: int | None
) -> ActivationSettings:
    """The point's activation settings (:class:`ActivationSettings`): sizes, recompute, offloading, precision of
    the saved GEMM inputs; ``tokens`` = local tokens per microbatch ``s b / CP``; ``vp`` = virtual chunks per rank."""
    recompute = cfg.recompute_granularity
    return ActivationSettings(
        tables_id=tid,
        tp=cfg.tp,
        etp=cfg.etp_,
        pp=cfg.pp,
        modules=tuple(sorted(cfg.recompute_modules or ())) if recompute == "selective" else (),
        vp=vp,
        sp=sp,
        microbatches=cfg.num_microbatches,
        block=recompute == "full" and cfg.recompute_method == "block",
        tokens=tokens,
        hidden=h,
        recompute=recompute,
        group_layers=max(1, cfg.recompute_num_layers or 1),
        offload=tuple(sorted(cfg.offload_modules)) if cfg.fine_grained_activation_offloading else (),
        layer_offload=cfg.cpu_offloading and cfg.cpu_offloading_activations,
        offload_layers=cfg.cpu_offloading_num_layers,
        imbalance=cfg.moe_imbalance,
        q=PRECISION_SAVED_INPUT[cfg.precision],
        dropout=cfg.hidden_dropout,
        op_sac=cfg.framework == "torchtitan" and recompute == "selective",
    )


def _rank_state(
    spec: ModelSpec, cfg: MemoryConfig, tid: int, chunks: tuple[Chunk, ...]
) -> tuple[float, float, float, StageState]:
    """Bytes of weights, gradients and optimizer state of the pipeline rank holding ``chunks`` (and its
    :class:`StageState`), by framework: Megatron (distributed optimizer, Megatron-FSDP), torchtitan FSDP2 or
    DeepSpeed ZeRO-3; the optimizer state scaled by what ``optimizer_cpu_offload`` leaves on the GPU."""
    tp, pp = cfg.tp, cfg.pp
    fsdp = cfg.data_parallel_sharding_strategy if cfg.use_megatron_fsdp else "no_shard"
    extra_w = PRECISION_WEIGHT_EXTRA[cfg.precision][1 if cfg.fp8_param_gather else 0]
    grad_b = 4.0 if cfg.grad_reduce_in_fp32 else 2.0
    adam_b = adam_state_bytes(cfg)
    dense_group, expert_group = cfg.dims.dp_cp, cfg.dims.edp
    distopt = cfg.use_distributed_optimizer or fsdp != "no_shard"
    titan = cfg.framework == "torchtitan"
    if titan:
        extra_w = 0.0  # torchao Float8 casts each GEMM's weight per call; no cached quantized copy
        if fsdp != "no_shard" and cfg.optimizer == "adam":
            adam_b = 8.0  # AdamW moments; the fp32 sharded parameter is its own master copy [TT]
    layers = tuple(li for ch in chunks for li in ch[0])
    has_emb = any(ch[1] for ch in chunks)
    has_loss = any(ch[2] for ch in chunks)
    st = stage_state(
        tid, layers, tp, cfg.etp_, cfg.ep, has_emb, has_loss, cfg.optimizer, distopt, dense_group, expert_group, adam_b
    )
    sharded = st.n_dense / dense_group + st.n_experts / expert_group
    if titan and fsdp == "optim_grads_params":
        vpad_h = spec.padded_vocab_size(tp) * spec.hidden_size // tp
        weights, grads = fsdp2_weights_grads(st, sharded, pp=pp, vpad_h=vpad_h, has_emb=has_emb, has_loss=has_loss)
    elif cfg.framework == "deepspeed" and fsdp == "optim_grads_params":
        weights, grads = zero3_weights_grads(st, sharded, cfg, extra_w, grad_b)
    else:
        weights, grads = megatron_weights_grads(st, sharded, fsdp, extra_w, grad_b, cfg.fsdp_double_buffer)
    opt = st.optimizer
    if cfg.optimizer_cpu_offload:
        opt *= 1.0 - cfg.optimizer_offload_fraction
    return weights, grads, opt, st


def _ns_workspace(cfg: MemoryConfig, st: StageState) -> float:
    """Muon's Newton-Schulz workspace for the largest owned matrix, ``2 (2 m n + 2 m^2)`` bytes bounded with ``m =
    sqrt(numel)`` (research notes ``sweeps_and_compare.md`` Sec. 1.6); 0 for AdamW."""
    if cfg.optimizer in ("muon", "dist_muon") and st.biggest_matrix:
        big = st.biggest_matrix
        side = math.isqrt(big)
        return 2.0 * (2 * big + 2 * side * side)
    return 0.0
