"""The model state of the memory model: the parameter tensors on one GPU of a pipeline rank, how the optimizer state
is dealt over the data-parallel group (distributed optimizer, Muon, layer-wise distributed Muon), and the weights and
gradients Megatron-Core (with or without Megatron-FSDP) holds.

Sources: [MLM], [MB], [MC], [FSDP], [PAO] and [TE] as listed in :mod:`bridgebench.model.memory`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable

from bridgebench.model.memory.config import MemoryConfig, check_config
from bridgebench.model.memory.pipeline import rank_chunks
from bridgebench.model.memory.tables import model_tables, tables_of
from bridgebench.model.spec import ModelSpec

Run = tuple[int, bool, int]  # (numel per tensor, is a Muon matrix, how many such tensors in a row)


@lru_cache(maxsize=65536)
def stage_params(
    tables_id: int, layers: tuple[int, ...], tp: int, etp: int, ep: int, has_emb: bool, has_loss: bool
) -> tuple[tuple[Run, ...], tuple[Run, ...]]:
    """Parameter tensors on one GPU of one pipeline rank, ``(dense, routed experts)``, in Megatron-Core's parameter
    order as runs ``(numel, is_muon, count)`` (one layer's local experts are one run per expert tensor: identical
    tensors in a row deal like one block, see :func:`ping_pong_runs`).

    Column/row-parallel tensors are divided by TP (replicated ones are not: router, norms, MLA down-projections);
    ``E / EP`` local routed experts per MoE layer, each divided by ETP; an MTP layer adds ``eh_proj`` ``(h, 2h)``
    and two norms. Word embedding ``V_pad h / t`` on the embedding stage (plus learned positions,
    ``extra["max_position_embeddings"]``), output layer on the loss stage (a tied embedding is held there too when
    it is not on the same stage) [MLM; MB].
    """
    tables = tables_of(tables_id)
    spec = tables.spec
    dense: list[Run] = []
    experts: list[Run] = []
    local_experts = spec.local_experts(ep)
    for li in layers:
        kind = tables.layer_kinds[li]
        for p in tables.params[kind]:
            dense.append((p.numel // tp if p.tp_sharded else p.numel, p.muon, 1))
        if li >= spec.num_layers:
            dense.append((2 * spec.hidden_size * spec.hidden_size // tp, True, 1))
            dense.append((2 * tables.norm_params, False, 1))
        if kind == 1 and local_experts:
            for p in tables.expert_params:
                experts.append((p.numel // etp if p.tp_sharded else p.numel, p.muon, local_experts))
    vpad = spec.padded_vocab_size(tp)
    if has_emb:
        dense.append((vpad * spec.hidden_size // tp, False, 1))
        positions = spec.extra.get("max_position_embeddings")
        if positions:
            dense.append((positions * spec.hidden_size, False, 1))
    if has_loss:
        dense.append((spec.hidden_size, False, tables.norm_params // spec.hidden_size))  # final norm
        if not (spec.share_embeddings_and_output_weights and has_emb):
            dense.append((vpad * spec.hidden_size // tp, False, 1))
    return tuple(dense), tuple(experts)


def ping_pong_runs(runs: Iterable[tuple[int, float, int]], group: int) -> list[float]:
    """Bytes per rank when runs of identical params ``(numel, bytes per element, count)`` are sorted by numel
    (ascending, stable) and dealt ``0, 1, .., G-1, G-1, .., 0, 0, ..`` one param at a time [MC
    ``_shard_params_ping_pong``]. A run of ``c`` params gives every rank ``2`` per full period of ``2G`` positions,
    plus the leftover positions one by one, so the cost is ``O(G)`` per run, not ``O(c)``."""
    loads = [0.0] * group
    period = 2 * group
    pos = 0
    for n, b, count in sorted(runs, key=lambda x: x[0]):
        size = n * b
        full, rest = divmod(count, period)
        if full:
            for r in range(group):
                loads[r] += 2 * full * size
        for j in range(rest):
            k = (pos + j) % period
            loads[k if k < group else period - 1 - k] += size
        pos = (pos + count) % period
    return loads


def ping_pong_loads(items: Iterable[tuple[int, float]], group: int) -> list[float]:
    """Bytes per rank of one group when whole params (``(numel, bytes per element)``) are sorted by numel
    (ascending, stable) and dealt ``0, 1, .., G-1, G-1, .., 0, 0, ..`` [MC ``_shard_params_ping_pong``]."""
    return ping_pong_runs(((n, b, 1) for n, b in items), group)


def lpt_loads(items: Iterable[tuple[int, float]], group: int) -> list[float]:
    """Bytes per rank when whole matrices are assigned largest first to the least-loaded rank (longest processing
    time first), the balanced param-layout path [MC]."""
    loads = [0.0] * group
    for n, b in sorted(items, key=lambda x: -x[0]):
        j = min(range(group), key=loads.__getitem__)
        loads[j] += n * b
    return loads


def state_bytes(muon: bool, adam_bytes: float = 12.0) -> float:
    """Optimizer-state bytes per parameter: a Muon matrix 8 (fp32 master + one momentum) [MC], else ``adam_bytes``."""
    return 8.0 if muon else adam_bytes


def optimizer_bytes(
    dense: tuple[Run, ...],
    experts: tuple[Run, ...],
    optimizer: str,
    distopt: bool,
    dense_group: int,
    expert_group: int,
    adam_bytes: float = 12.0,
) -> float:
    """Optimizer-state bytes of the busiest rank of one pipeline stage.

    ``adam``: ``adam_bytes`` per param (12: fp32 master and two fp32 moments; precision-aware optimizer [PAO]: the
    main-weight and moment dtypes), ``/ G`` with the distributed optimizer or Megatron-FSDP (``G`` = DP x CP for
    dense params, expert-DP for routed experts) [MLM; MB; FSDP]. ``muon``: Muon matrices 8 B (fp32 master + one
    momentum), Adam-side params ``adam_bytes``, on every rank. ``dist_muon`` legacy: the same bytes, each whole param
    on one rank of its group (ping-pong by numel); param-layout (``distopt``): Adam-side ``adam_bytes / G``, Muon
    matrices whole, balanced [MC].
    """
    n_dense = sum(n * c for n, _, c in dense)
    n_experts = sum(n * c for n, _, c in experts)
    a = adam_bytes
    if optimizer == "adam":
        if not distopt:
            return a * (n_dense + n_experts)
        return a * n_dense / dense_group + a * n_experts / expert_group
    if optimizer == "muon":
        return sum(n * c * state_bytes(m, a) for n, m, c in dense) + sum(
            n * c * state_bytes(m, a) for n, m, c in experts
        )
    if not distopt:
        return max(ping_pong_runs(((n, state_bytes(m, a), c) for n, m, c in dense), dense_group)) + max(
            ping_pong_runs(((n, state_bytes(m, a), c) for n, m, c in experts), expert_group)
        )
    adam_side = a * sum(n * c for n, m, c in dense if not m) / dense_group
    adam_side += a * sum(n * c for n, m, c in experts if not m) / expert_group
    return (
        adam_side
        + max(lpt_loads(((n, 8.0) for n, m, c in dense if m for _ in range(c)), dense_group))
        + max(lpt_loads(((n, 8.0) for n, m, c in experts if m for _ in range(c)), expert_group))
    )


@dataclass(frozen=True, kw_only=True)
class StageState:
    """What one pipeline rank's GPU holds, by :func:`stage_state` (params are element counts, bytes are bytes)."""

    n_dense: int  # params on this GPU outside the routed experts
    n_experts: int  # routed-expert params on this GPU
    n_gemm: int  # GEMM-weight params (quantized copies under FP8 / MXFP8)
    optimizer: float  # optimizer-state bytes
    biggest_matrix: int  # largest Muon matrix (numel): Newton-Schulz workspace
    biggest_unit: tuple[int, int]  # (params, GEMM params) of the largest FSDP unit: one layer, embedding or output
    biggest_tensor: int = 0  # largest parameter tensor (numel): DeepSpeed ZeRO-3's gather unit [DS]
    biggest_layer: int = 0  # params of the largest decoder / MTP layer: an FSDP2 block [TT]

    @property
    def n_all(self) -> int:
        return self.n_dense + self.n_experts


@lru_cache(maxsize=65536)
def stage_state(
    tables_id: int,
    layers: tuple[int, ...],
    tp: int,
    etp: int,
    ep: int,
    has_emb: bool,
    has_loss: bool,
    optimizer: str,
    distopt: bool,
    dense_group: int,
    expert_group: int,
    adam_bytes: float = 12.0,
) -> StageState:
    """Parameter counts, optimizer bytes, largest Muon matrix and largest FSDP unit of one pipeline stage."""
    dense, experts = stage_params(tables_id, layers, tp, etp, ep, has_emb, has_loss)
    n_gemm = sum(n * c for n, mu, c in dense if mu) + sum(n * c for n, mu, c in experts if mu)
    opt = optimizer_bytes(dense, experts, optimizer, distopt, dense_group, expert_group, adam_bytes)
    big = max((n for n, mu, _ in dense + experts if mu), default=0)
    unit = (0, 0)
    for li in layers:  # one FSDP unit per decoder / MTP layer [FSDP]
        d, e = stage_params(tables_id, (li,), tp, etp, ep, False, False)
        n = sum(x * c for x, _, c in d + e)
        if n > unit[0]:
            unit = (n, sum(x * c for x, mu, c in d + e if mu))
    layer = unit[0]
    vpad_h = tables_of(tables_id).spec.padded_vocab_size(tp) * tables_of(tables_id).spec.hidden_size // tp
    if (has_emb or has_loss) and vpad_h > unit[0]:  # the embedding / output layer are units of the root module
        unit = (vpad_h, vpad_h)
    tensor = max((n for n, _, _ in dense + experts), default=0)
    return StageState(
        n_dense=sum(n * c for n, _, c in dense),
        n_experts=sum(n * c for n, _, c in experts),
        n_gemm=n_gemm,
        optimizer=opt,
        biggest_matrix=big,
        biggest_unit=unit,
        biggest_tensor=tensor,
        biggest_layer=layer,
    )


def megatron_weights_grads(
    st: StageState, sharded: float, fsdp: str, extra_w: float, grad_b: float, double_buffer: bool
) -> tuple[float, float]:
    """Weight and gradient bytes of one GPU of a pipeline rank under Megatron-Core, ``(weights, grads)``.

    Weights 2 B/param (bf16) [MLM] plus ``extra_w`` per GEMM weight for quantized copies [TE]; gradients ``grad_b``
    per param (4 with ``grad_reduce_in_fp32``) [MLM]. Megatron-FSDP [FSDP] (``fsdp`` a sharding strategy):
    ``sharded`` is the params per GPU after sharding over the DP x CP / expert-DP groups; ``optim_grads_params``
    holds two all-gathered copies of the largest unit (current and prefetched, with their quantized copies),
    ``optim_grads`` / ``optim_grads_params`` one unsharded gradient of it (two with ``fsdp_double_buffer``).
    """
    unit, unit_gemm = st.biggest_unit
    if fsdp == "optim_grads_params":
        weights = 2.0 * sharded + 2 * (2.0 * unit + extra_w * unit_gemm)
    else:
        weights = 2.0 * st.n_all + extra_w * st.n_gemm
    if fsdp in ("optim_grads", "optim_grads_params"):
        grads = grad_b * sharded + (2 if double_buffer else 1) * grad_b * unit
    else:
        grads = grad_b * st.n_all
    return weights, grads


def dist_muon_state_by_rank(spec: ModelSpec, cfg: MemoryConfig, stage: int = 0) -> list[float]:
    """Optimizer-state bytes of each DP x CP rank of one pipeline stage under legacy ``dist_muon`` (expert-DP rank
    ``i % EDP``'s expert state added), to compare with a measurement taken on one particular rank (Megatron-LM logs
    memory from the last rank) [MC]."""
    check_config(spec, cfg)
    tables = model_tables(spec)
    chunks = rank_chunks(spec, cfg)[stage]
    layers = tuple(li for ch in chunks for li in ch[0])
    dense, experts = stage_params(
        id(tables), layers, cfg.tp, cfg.etp_, cfg.ep, any(c[1] for c in chunks), any(c[2] for c in chunks)
    )
    loads = ping_pong_runs(((n, state_bytes(mu), c) for n, mu, c in dense), cfg.dims.dp_cp)
    expert_loads = ping_pong_runs(((n, state_bytes(mu), c) for n, mu, c in experts), cfg.edp)
    return [x + expert_loads[i % len(expert_loads)] for i, x in enumerate(loads)]


def parameter_counts(spec: ModelSpec, cfg: MemoryConfig) -> list[tuple[int, int]]:
    """Per pipeline rank: ``(dense params, routed-expert params)`` on one GPU of that rank (elements), the counts
    behind ``weights`` / ``grads`` (for comparing with Megatron-Bridge's ``parameter_count_per_gpu``)."""
    check_config(spec, cfg)
    tables = model_tables(spec)
    out = []
    for chunks in rank_chunks(spec, cfg):
        layers = tuple(li for ch in chunks for li in ch[0])
        dense, experts = stage_params(
            id(tables), layers, cfg.tp, cfg.etp_, cfg.ep, any(c[1] for c in chunks), any(c[2] for c in chunks)
        )
        out.append((sum(n * c for n, _, c in dense), sum(n * c for n, _, c in experts)))
    return out
