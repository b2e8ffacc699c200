"""The optimizer step on the busiest GPU: AdamW, or Muon with Megatron-Core's layer-wise deal, its TP mode and the
all-gather of the updated params.

- **AdamW** (distributed optimizer): memory-bound, :data:`ADAM_BYTES_PER_PARAM` per locally owned param at HBM
  bandwidth (owned: ``dense / (DP x CP) + experts / EDP``; all local params without the distributed optimizer).
- **Muon** (``dist_muon`` = layer-wise distributed optimizer, megatron-core 0.19.2
  ``optimizer/layer_wise_optimizer.py``; ``muon`` = every rank updates every param):

  - Newton-Schulz FLOPs of the matrices the GPU owns at ``ns_efficiency x`` the BF16 peak
    (``muon_fp32_matmul_prec=medium`` runs the NS GEMMs in BF16), plus ``kappa`` seconds per matrix
    (emerging-optimizers 0.3.0 ``OrthogonalizedOptimizer.step`` loops over params: ~35 small kernels each; research
    notes ``sweeps_and_compare.md`` Sec. 1.8). Both are first-principles values: no GPU was lent to measure them.
  - the deal of whole params to DP ranks (:func:`_deal`): Megatron-Core 0.19.2's ping-pong by numel, or the
    cost-balanced packing of Megatron-LM PR #6379 (largest ``max(M,N) min(M,N)^2`` first to the least-loaded rank;
    merged 2026-08-12, not in 0.19.2: a what-if);
  - the TP mode (emerging-optimizers 0.3.0 ``orthogonalized_optimizers/muon_utils.py::newton_schulz_tp``):
    ``blockwise`` -- NS of each rank's shard, no communication; ``duplicated`` -- the FP32 shards are all-gathered
    over TP and NS runs on the full matrix on every TP rank; ``distributed`` -- each NS iteration all-reduces the
    ``u x u`` FP32 Gram matrix over TP (``u`` the unsharded dimension);
  - SYRK for the symmetric products (``3 m^2 n + m^3`` instead of ``4 m^2 n + 2 m^3`` per step, Megatron-LM PR #6381)
    needs emerging-optimizers >= 0.4, which is not installed here: a **hypothetical** what-if;
  - the element-wise update (:data:`MUON_ELEMENTWISE_BYTES` per owned param at HBM bandwidth);
  - ``dist_muon`` only: the all-gather of the updated BF16 params over the DP x CP group (dense) and the expert-DP
    group (experts) -- ``torch.distributed.all_gather`` with uneven sizes, not overlapped unless the recipe sets
    ``overlap_param_gather`` (26.02 Muon recipes: off); priced as the data-parallel ring collectives
    (:func:`bridgebench.model.steptime.dp_comm.dense_ring`, hierarchical across NVLink domains).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from bridgebench.model.newton_schulz import (
    MuonMatrix,
    NSPolicy,
    Parallelism,
    muon_matrices,
    per_tp_rank_flops,
    pp_stage_of_layer,
    shard_of,
)
from bridgebench.model.spec import ModelSpec
from bridgebench.model.steptime import collectives, registry
from bridgebench.model.steptime.config import TimeConfig, TimeModelError
from bridgebench.model.steptime.dp_comm import dense_ring, expert_ring

#: fused AdamW step: read fp32 master, m, v, grad (16 B), write master, m, v (12 B), write the bf16 param (2 B), and
#: the distributed optimizer's copy of the grad shard into the fp32 buffer (4 B) -> 34 B per owned param.
ADAM_BYTES_PER_PARAM = 34.0
#: Muon element-wise work per owned param outside Newton-Schulz: momentum update, scaling, master update, bf16 cast
#: (read/write fp32 grad, momentum and master).
MUON_ELEMENTWISE_BYTES = 30.0


@dataclass(frozen=True)
class _Param:
    """One Muon param per TP rank: NS FLOPs, numel, pieces (QKV split), FP32 bytes a ``duplicated`` all-gather
    collects, Gram elements a ``distributed`` all-reduce sums per NS iteration, TP-sharded pieces."""

    flops: int
    numel: int
    pieces: int
    gathered: float
    gram: float
    sharded: int


@lru_cache(maxsize=64)
def _first_expert_matrices(sid: int, split_qkv: bool) -> tuple[MuonMatrix, ...]:
    """The model's Muon matrices without routed experts 1..E-1 (they repeat expert 0's shapes)."""
    return tuple(
        m
        for m in muon_matrices(registry.get(sid), split_qkv=split_qkv)
        if not m.is_expert or m.name.endswith(".weight0")
    )


@lru_cache(maxsize=512)
def _layer_params(
    sid: int, split_qkv: bool, tp: int, etp: int, steps: int, kernel: str, tp_mode: str
) -> dict[str, Any]:
    """Per layer: (dense params, one routed expert's params), each a tuple of :class:`_Param` in matrix order."""
    policy = NSPolicy(num_ns_steps=steps, kernel=kernel, tp_mode=tp_mode, split_qkv=split_qkv)
    per_layer: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}
    for m in _first_expert_matrices(sid, split_qkv):
        dense, expert = per_layer.setdefault(m.layer, ({}, {}))
        if m.is_expert:
            key, t, target = m.param.rsplit("weight", 1)[0], etp, expert
        else:
            key, t, target = m.param, tp, dense
        r, c = shard_of(m, t)
        sharded = t > 1 and m.tp_partition_dim is not None
        unsharded = (c if m.tp_partition_dim == 0 else r) if sharded else 0
        f, n, k, g, gr, s = target.get(key, (0, 0, 0, 0.0, 0.0, 0))
        target[key] = (
            f + per_tp_rank_flops(m, t, policy),
            n + r * c,
            k + 1,
            g + (4.0 * m.rows * m.cols if sharded and tp_mode == "duplicated" else 0.0),
            gr + (float(unsharded) ** 2 if sharded and tp_mode == "distributed" else 0.0),
            s + (1 if sharded else 0),
        )
    return {
        layer: (tuple(_Param(*v) for v in d.values()), tuple(_Param(*v) for v in e.values()))
        for layer, (d, e) in per_layer.items()
    }


_ZERO = (0, 0, 0.0, 0.0, 0)


def _deal(runs: list[tuple[_Param, int]], group: int, mode: str) -> list[tuple[int, int, float, float, int]]:
    """(NS FLOPs, matrices, gathered bytes, Gram elements, sharded pieces) per rank of one group, for runs of
    identical params ``(param, count)``.

    ``ping_pong``: Megatron-Core 0.19.2's order -- sorted by numel ascending (stable), dealt ``0..G-1, G-1..0`` one
    param at a time (``layer_wise_optimizer.py::_shard_params_ping_pong``), a run of ``c`` params as full periods of
    ``2G`` positions (two per rank) plus the leftover positions; ``cost_balanced``: largest NS cost first to the
    least-loaded rank (LPT; Megatron-LM PR #6379); ``replicated``: every rank does every param (plain ``muon``).
    """

    def add(acc: list[Any], p: _Param, times: int) -> None:
        acc[0] += times * p.flops
        acc[1] += times * p.pieces
        acc[2] += times * p.gathered
        acc[3] += times * p.gram
        acc[4] += times * p.sharded

    if mode == "replicated" or group == 1:
        whole = [0, 0, 0.0, 0.0, 0]
        for p, c in runs:
            add(whole, p, c)
        return [tuple(whole)] * group
    acc = [[0, 0, 0.0, 0.0, 0] for _ in range(group)]
    if mode == "ping_pong":
        period = 2 * group
        pos = 0
        for p, c in sorted(runs, key=lambda x: x[0].numel):
            full, rest = divmod(c, period)
            if full:
                for r in range(group):
                    add(acc[r], p, 2 * full)
            for j in range(rest):
                q = (pos + j) % period
                add(acc[q if q < group else period - 1 - q], p, 1)
            pos = (pos + c) % period
    else:
        for p, c in sorted(runs, key=lambda x: -x[0].flops):
            for _ in range(c):
                add(min(acc, key=lambda a: a[0]), p, 1)
    return [tuple(a) for a in acc]


@dataclass(frozen=True, kw_only=True)
class MuonRankLoads:
    """Per GPU (rank order within each pipeline stage, ``stage * N/PP + g``) for one Muon step under one assignment
    of whole params to ranks: NS FLOPs, Muon matrices (QKV pieces counted separately), FP32 bytes a ``duplicated``
    TP all-gather collects, Gram elements a ``distributed`` TP all-reduce sums per NS iteration, TP-sharded pieces."""

    ns_flops: tuple[int, ...]
    matrices: tuple[int, ...]
    assignment: str
    gathered: tuple[float, ...] = ()
    gram: tuple[float, ...] = ()
    sharded: tuple[int, ...] = ()

    def times(self, ns_rate: float, kappa: float) -> list[float]:
        """Seconds per GPU: ``ns_flops / ns_rate + kappa x matrices``."""
        return [f / ns_rate + kappa * k for f, k in zip(self.ns_flops, self.matrices)]


@lru_cache(maxsize=8192)
def _muon_rank_loads(sid: int, par: Parallelism, policy: NSPolicy, assignment: str) -> MuonRankLoads:
    spec = registry.get(sid)
    dp, edp = par.dp, par.expert_dp  # validates the grids
    stage_of = pp_stage_of_layer(spec, par)
    layers = _layer_params(sid, policy.split_qkv, par.tp, par.etp_, policy.num_ns_steps, policy.kernel, policy.tp_mode)
    local_experts = spec.local_experts(par.ep)
    mode = assignment if policy.layer_wise else "replicated"
    dense_items: list[list[Any]] = [[] for _ in range(par.pp)]
    expert_items: list[list[Any]] = [[] for _ in range(par.pp)]
    for layer, (dense, expert) in sorted(layers.items()):
        st = stage_of[layer]
        dense_items[st] += [(p, 1) for p in dense]
        if local_experts:
            expert_items[st] += [(p, local_experts) for p in expert]
    group = dp * par.cp
    per_stage = par.num_gpus // par.pp
    cols: list[list[Any]] = [[], [], [], [], []]
    for st in range(par.pp):
        d_loads = _deal(dense_items[st], group, mode)
        e_loads = _deal(expert_items[st], edp, mode) if expert_items[st] else [_ZERO] * edp
        for g in range(per_stage):
            d, e = d_loads[g // par.tp], e_loads[g // (par.etp_ * par.ep)]
            for i in range(5):
                cols[i].append(d[i] + e[i])
    return MuonRankLoads(
        ns_flops=tuple(cols[0]),
        matrices=tuple(cols[1]),
        assignment=assignment,
        gathered=tuple(cols[2]),
        gram=tuple(cols[3]),
        sharded=tuple(cols[4]),
    )


def muon_rank_loads(
    spec: ModelSpec, par: Parallelism, policy: NSPolicy = NSPolicy(), assignment: str = "ping_pong"
) -> MuonRankLoads:
    """NS FLOPs and matrices per GPU of one Muon step (see :class:`MuonRankLoads`, :func:`_deal`).

    Same counting as :func:`bridgebench.model.newton_schulz.ns_load` (its ``per_gpu_max`` and ``total`` equal
    ``max`` and ``sum`` of ``ns_flops`` here with ``ping_pong``, checked in tests), computed per layer so that a sweep
    can afford it.

    Raises:
        bridgebench.model.newton_schulz.NSError: parallel sizes that do not fit the world size or the matrices.
        TimeModelError: an unknown assignment.
    """
    if assignment not in ("ping_pong", "cost_balanced"):
        raise TimeModelError(f"assignment must be 'ping_pong' or 'cost_balanced', got {assignment!r}")
    return _muon_rank_loads(registry.handle(spec), par, policy, assignment)


@dataclass(frozen=True, kw_only=True)
class OptimizerStep:
    """Seconds of the optimizer step on the busiest GPU: ``total`` = ``ns + per_matrix + tp_mode + elementwise +
    allgather`` (Muon) or ``elementwise`` (AdamW); ``busiest_matrices`` / ``busiest_ns_flops`` of that GPU;
    ``allgather_bytes`` the BF16 params it gathers after the step (``dist_muon``)."""

    total: float
    ns: float = 0.0
    per_matrix: float = 0.0
    tp_mode: float = 0.0
    elementwise: float = 0.0
    allgather: float = 0.0
    allgather_bytes: float = 0.0
    busiest_matrices: int = 0
    busiest_ns_flops: float = 0.0


def policy_of(cfg: TimeConfig) -> NSPolicy:
    """The NS policy of a point with the layer-wise flag of its optimizer name."""
    p = cfg.ns_policy
    return NSPolicy(
        num_ns_steps=p.num_ns_steps,
        kernel=p.kernel,
        tp_mode=p.tp_mode,
        layer_wise=cfg.optimizer == "dist_muon",
        split_qkv=p.split_qkv,
    )


def optimizer_step(
    spec: ModelSpec,
    cfg: TimeConfig,
    per_stage: tuple[tuple[int, int], ...],
    kappa: float,
    ns_efficiency: float,
    fwd_window: float,
) -> OptimizerStep:
    """The optimizer step of one point (see the module docstring).

    Args:
        per_stage: (dense, routed-expert) local params of one GPU of each pipeline stage (elements).
        kappa: seconds per Muon matrix; ns_efficiency: NS GEMM fraction of the BF16 peak (calibration).
        fwd_window: one microbatch's forward seconds (hides the param all-gather under ``overlap_param_gather``).

    Raises:
        TimeModelError: an optimizer other than ``adam``, ``muon``, ``dist_muon``.
        bridgebench.model.newton_schulz.NSError: parallel sizes that do not fit (Muon).
    """
    group, egroup = cfg.dims.dp_cp, cfg.edp
    hbm = cfg.gpu.hbm_bandwidth
    if cfg.optimizer == "adam":
        if cfg.use_distributed_optimizer:
            owned = max(d / group + e / egroup for d, e in per_stage)
        else:
            owned = max(d + e for d, e in per_stage)
        t = ADAM_BYTES_PER_PARAM * owned / hbm
        return OptimizerStep(total=t, elementwise=t)
    if cfg.optimizer not in ("dist_muon", "muon"):
        raise TimeModelError(f"unknown optimizer {cfg.optimizer!r}; the time model knows adam, muon, dist_muon")
    loads = muon_rank_loads(spec, cfg.parallelism(), policy_of(cfg), cfg.muon_assignment)
    rate = cfg.gpu.peak("bf16") * ns_efficiency
    times = loads.times(rate, kappa)
    b = max(range(len(times)), key=times.__getitem__)
    ns_flops, nmat = float(loads.ns_flops[b]), loads.matrices[b]
    ns, per_matrix = ns_flops / rate, kappa * nmat
    tp_mode = 0.0
    if cfg.tp > 1 or cfg.etp_ > 1:
        bw = cfg.link_of("tp" if cfg.tp >= cfg.etp_ else "etp")
        a = collectives.alpha(bw, cfg.gpu.nvlink_bandwidth)
        t = max(cfg.tp, cfg.etp_)
        if cfg.ns_policy.tp_mode == "duplicated" and loads.gathered[b]:
            tp_mode = loads.sharded[b] * (t - 1) * a + (t - 1) / t * loads.gathered[b] / (
                bw * collectives.BUS_EFFICIENCY
            )
        elif cfg.ns_policy.tp_mode == "distributed" and loads.sharded[b]:
            steps = cfg.ns_policy.num_ns_steps
            tp_mode = steps * (
                loads.sharded[b] * 2 * (t - 1) * a
                + 2 * (t - 1) / t * 4.0 * loads.gram[b] / (bw * collectives.BUS_EFFICIENCY)
            )
    ag = ag_bytes = 0.0
    if cfg.optimizer == "dist_muon":
        elem = MUON_ELEMENTWISE_BYTES * max(d / group + e / egroup for d, e in per_stage) / hbm
        dense, expert = max(per_stage, key=lambda x: x[0] + x[1])
        ag = dense_ring(cfg, 2.0 * dense) + expert_ring(cfg, 2.0 * expert)
        ag_bytes = 2.0 * (dense * (group > 1) + expert * (egroup > 1))
        if cfg.overlap_param_gather:
            ag = max(0.0, ag - fwd_window)
    else:  # every rank updates every param, no gather
        elem = MUON_ELEMENTWISE_BYTES * max(d + e for d, e in per_stage) / hbm
    total = ns + per_matrix + tp_mode + elem + ag
    return OptimizerStep(
        total=total,
        ns=ns,
        per_matrix=per_matrix,
        tp_mode=tp_mode,
        elementwise=elem,
        allgather=ag,
        allgather_bytes=ag_bytes,
        busiest_matrices=nmat,
        busiest_ns_flops=ns_flops,
    )
