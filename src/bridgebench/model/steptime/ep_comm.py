"""Expert-parallel token exchange of one MoE layer per microbatch: dispatch and combine, by dispatcher, over NVLink
when the expert group fits the NVLink domain and over the scale-out network when it does not -- never free.

Per GPU ``T_sp`` tokens (its sequence shard) are routed to ``topk`` experts each (balanced routing, as NVIDIA's perf
recipes force with ``moe_router_force_load_balancing``). The EP group is ``EP`` ranks at stride ``ETP``, a block of
``ETP x EP`` consecutive ranks (expert rank order etp-ep-edp-pp, megatron-core 0.19.2 ``parallel_state.py``), placed
on NVLink domains as the scheduler fills them (:mod:`bridgebench.model.placement`): with ``m_j`` of the ``EP`` ranks in
domain ``j``, a rank in domain ``o`` reaches ``(m_o - 1) / EP`` of the destinations over NVLink and the rest over the
network (an EP 64 group split 48 / 16 over two domains is not NVLink-only). BF16 tokens (``2 h`` bytes). One
exchange each way in the forward (dispatch, combine) and in the backward (the gradient of combine, then of
dispatch): 4 exchanges per layer per microbatch.

Bytes leaving a GPU per exchange, by dispatcher (megatron-core ``transformer/moe/token_dispatcher.py``):

- ``alltoall`` (``MoEAlltoAllTokenDispatcher``): every routed copy is sent: ``T_sp x topk x (EP - 1) / EP`` tokens;
  with ETP > 1 the received copies are then all-gathered over the ETP group (and reduce-scattered in combine).
- ``allgather``: all tokens all-gathered over the TP x EP group and the outputs reduce-scattered.
- ``deepep`` / ``hybridep`` / ``ncclep`` (flex dispatcher over the TP x EP group; DeepEP, Zhao et al. 2025,
  github.com/deepseek-ai/DeepEP; HybridEP and NCCL EP in Megatron-Core 0.16+ / 0.19): a token goes once to each
  distinct destination GPU, not once per expert: ``E[GPUs hit] = EP (1 - (1 - 1/EP)^topk)`` under uniform routing;
  across domains once per distinct remote domain, ``sum_j (1 - (1 - m_j / EP)^topk)`` over the remote domains, fewer
  under node-limited routing (``moe_router_num_groups`` / ``moe_router_group_topk``: DeepSeek V3 picks 4 of 8 expert
  groups per token; :func:`bridgebench.model.placement.domain_hit`), and is forwarded over NVLink inside the remote
  domain.

Time per exchange: ``max(NVLink bytes / NVLink bw, network bytes / network bw)`` at the bus efficiency of
:mod:`bridgebench.model.steptime.collectives`, plus a message latency. Exposure: all of it by default; with
``overlap_moe_expert_parallel_comm`` (the combined 1F1B schedule runs one microbatch's exchange under the other's
compute, Megatron-Core ``pipeline_parallel/combined_1f1b.py``) the exchanges are hidden up to the layer's compute and
:data:`OVERLAP_RESIDUAL` stays exposed; ``moe_shared_expert_overlap`` hides the dispatch behind the shared expert.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from bridgebench.model import placement
from bridgebench.model.placement import GroupPlacement
from bridgebench.model.steptime import collectives, registry
from bridgebench.model.steptime.gemm import LayerShape, tokens

BYTES = 2.0
#: Fraction of the exchange left exposed under ``overlap_moe_expert_parallel_comm`` (layer boundaries and the
#: dispatcher's preprocessing are not overlapped); first-principles value.
OVERLAP_RESIDUAL = 0.2
#: Exchanges per MoE layer per microbatch: dispatch and combine, forward and backward.
EXCHANGES = 4


@dataclass(frozen=True, kw_only=True)
class Exchange:
    """One MoE layer's token exchange per microbatch (seconds, forward + backward): ``seconds`` in all,
    ``dispatch_fwd`` the forward dispatch alone, ``nvlink_bytes`` / ``network_bytes`` per exchange leaving the GPU,
    ``scale_out`` whether the expert group leaves the NVLink domain."""

    seconds: float
    dispatch_fwd: float
    nvlink_bytes: float
    network_bytes: float
    scale_out: bool


def _hit(n: float, k: int) -> float:
    """Expected distinct bins among ``n`` hit by ``k`` uniform draws."""
    return n * (1.0 - (1.0 - 1.0 / n) ** k) if n > 0 else 0.0


@lru_cache(maxsize=4096)
def layer_exchange(
    sid: int, gid: int, sh: LayerShape, dispatcher: str, group: GroupPlacement | None = None
) -> Exchange:
    """The token exchange of one MoE layer per microbatch (see the module docstring). EP = ETP = 1: no exchange.

    ``group``: the EP group as the scheduler placed it (:attr:`TimeConfig.placement` ``ep``: EP ranks ``ETP``
    apart, and how they split over NVLink domains); None = the ``ETP x EP`` consecutive ranks from rank 0 on the
    GPU's NVLink domains. The busiest rank of the worst split sets the time: the one whose domain holds the fewest
    of its group's ranks."""
    spec, gpu = registry.get(sid), registry.get(gid)
    if not spec.is_moe or sh.ep * sh.etp <= 1:
        return Exchange(seconds=0.0, dispatch_fwd=0.0, nvlink_bytes=0.0, network_bytes=0.0, scale_out=False)
    _, tsp = tokens(spec, sh)
    k, h, ep = spec.moe_router_topk, spec.hidden_size, sh.ep
    if group is None:
        domain = gpu.nvlink_domain
        group = placement.place(sh.etp * ep, tp=1, ep=ep, etp=sh.etp, domain=domain).group("ep")
    scale_out = group.crosses
    token = h * BYTES
    if dispatcher == "allgather":
        grp = sh.tp * ep
        bw = gpu.network_bandwidth if scale_out else gpu.nvlink_bandwidth
        a = collectives.alpha(bw, gpu.nvlink_bandwidth)
        one = collectives.ring(tsp * grp * token, grp, bw, a)
        nvl, net = (tsp * grp * token, 0.0) if not scale_out else (0.0, tsp * grp * token)
        return Exchange(
            seconds=EXCHANGES * one, dispatch_fwd=one, nvlink_bytes=nvl, network_bytes=net, scale_out=scale_out
        )
    # per split and per own domain: (NVLink bytes, network bytes) leaving one GPU per exchange
    cases = []
    for split in group.splits:
        for own in range(len(split)) if len(split) > 1 else (0,):
            if dispatcher == "alltoall":
                nvl = tsp * k * (split[own] - 1) / ep * token
                net = tsp * k * (ep - split[own]) / ep * token
            else:  # deepep / hybridep / ncclep: once per distinct GPU, once per distinct remote domain
                nvl = tsp * _hit(ep, k) * (ep - 1) / ep * token
                hits = (
                    placement.domain_hit(m, ep, k, spec.moe_router_num_groups, spec.moe_router_group_topk)
                    for j, m in enumerate(split)
                    if j != own
                )
                net = tsp * sum(hits) * token
            cases.append((nvl, net))
    lat = collectives.NETWORK_ALPHA if scale_out else collectives.NVLINK_ALPHA
    eff = collectives.BUS_EFFICIENCY

    def seconds(c: tuple[float, float]) -> float:
        return float(max(c[0] / (gpu.nvlink_bandwidth * eff), c[1] / (gpu.network_bandwidth * eff)))

    nvl, net = max(cases, key=seconds)
    one = seconds((nvl, net)) + lat
    if sh.etp > 1 and dispatcher == "alltoall":  # all-gather the received copies over ETP (RS in combine)
        bw = gpu.link(sh.etp)
        one += collectives.ring(tsp * k * sh.etp * token, sh.etp, bw, collectives.alpha(bw, gpu.nvlink_bandwidth))
    return Exchange(seconds=EXCHANGES * one, dispatch_fwd=one, nvlink_bytes=nvl, network_bytes=net, scale_out=scale_out)


def exposed(ex: Exchange, window: float, shared_window: float, overlap: bool, shared_overlap: bool) -> float:
    """Exposed seconds of a layer's exchange per microbatch given the layer's compute ``window`` and the shared
    expert's forward ``shared_window`` (seconds at the calibrated rate)."""
    t = ex.seconds
    if shared_overlap:
        t -= min(ex.dispatch_fwd, shared_window) * (1 - OVERLAP_RESIDUAL)
    if overlap:
        return max(0.0, t - window) + OVERLAP_RESIDUAL * min(t, window)
    return t
