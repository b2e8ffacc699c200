"""Expert-parallel token exchange of one MoE layer per microbatch: dispatch and combine, by dispatcher, over NVLink
when the expert group fits the NVLink domain and over the scale-out network when it does not -- never free.

Per GPU ``T_sp`` tokens (its sequence shard) are routed to ``topk`` experts each (balanced routing, as NVIDIA's perf
recipes force with ``moe_router_force_load_balancing``). The EP group is ``EP`` ranks at stride ``ETP``, a block of
``ETP x EP`` consecutive ranks (expert rank order etp-ep-edp-pp, megatron-core 0.19.2 ``parallel_state.py``); with a
domain of ``D`` GPUs a fraction ``D / (ETP x EP)`` of the destinations is in the own domain when the block spans
several domains. BF16 tokens (``2 h`` bytes). One exchange each way in the forward (dispatch, combine) and in the
backward (the gradient of combine, then of dispatch): 4 exchanges per layer per microbatch.

Bytes leaving a GPU per exchange, by dispatcher (megatron-core ``transformer/moe/token_dispatcher.py``):

- ``alltoall`` (``MoEAlltoAllTokenDispatcher``): every routed copy is sent: ``T_sp x topk x (EP - 1) / EP`` tokens;
  with ETP > 1 the received copies are then all-gathered over the ETP group (and reduce-scattered in combine).
- ``allgather``: all tokens all-gathered over the TP x EP group and the outputs reduce-scattered.
- ``deepep`` / ``hybridep`` / ``ncclep`` (flex dispatcher over the TP x EP group; DeepEP, Zhao et al. 2025,
  github.com/deepseek-ai/DeepEP; HybridEP and NCCL EP in Megatron-Core 0.16+ / 0.19): a token goes once to each
  distinct destination GPU, not once per expert: ``E[GPUs hit] = EP (1 - (1 - 1/EP)^topk)`` under uniform routing;
  across domains once per distinct remote domain, ``(n - 1)(1 - (1 - 1/n)^topk)`` for ``n`` domains, and is forwarded
  over NVLink inside the remote domain.

Time per exchange: ``max(NVLink bytes / NVLink bw, network bytes / network bw)`` at the bus efficiency of
:mod:`bridgebench.model.steptime.collectives`, plus a message latency. Exposure: all of it by default; with
``overlap_moe_expert_parallel_comm`` (the combined 1F1B schedule runs one microbatch's exchange under the other's
compute, Megatron-Core ``pipeline_parallel/combined_1f1b.py``) the exchanges are hidden up to the layer's compute and
:data:`OVERLAP_RESIDUAL` stays exposed; ``moe_shared_expert_overlap`` hides the dispatch behind the shared expert.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from bridgebench.model.steptime import collectives, registry
from bridgebench.model.steptime.gemm import LayerShape, tokens

BYTES = 2.0
#: Fraction of the exchange left exposed under ``overlap_moe_expert_parallel_comm`` (layer boundaries and the
#: dispatcher's preprocessing are not overlapped); first-principles value.
OVERLAP_RESIDUAL = 0.2
#: Exchanges per MoE layer per microbatch: dispatch and combine, forward and backward.
EXCHANGES = 4


@dataclass(frozen=True)
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
def layer_exchange(sid: int, gid: int, sh: LayerShape, dispatcher: str) -> Exchange:
    """The token exchange of one MoE layer per microbatch (see the module docstring). EP = ETP = 1: no exchange."""
    spec, gpu = registry.get(sid), registry.get(gid)
    if not spec.is_moe or sh.ep * sh.etp <= 1:
        return Exchange(0.0, 0.0, 0.0, 0.0, False)
    _, tsp = tokens(spec, sh)
    k, h, ep = spec.moe_router_topk, spec.hidden_size, sh.ep
    span = sh.etp * ep
    domain = gpu.nvlink_domain
    local = min(1.0, domain / span)
    scale_out = span > domain
    token = h * BYTES
    if dispatcher == "allgather":
        group = sh.tp * ep
        bw = gpu.link(group * max(1, sh.etp // sh.tp))
        a = collectives.alpha(bw, gpu.nvlink_bandwidth)
        one = collectives.ring(tsp * group * token, group, bw, a)
        nvl, net = (tsp * group * token, 0.0) if not scale_out else (0.0, tsp * group * token)
    else:
        if dispatcher == "alltoall":
            out = tsp * k * (ep - 1) / ep * token
            nvl, net = out * local, out * (1 - local)
        else:  # deepep / hybridep / ncclep: once per distinct GPU, once per distinct remote domain
            gpus = _hit(ep, k) * (ep - 1) / ep
            if scale_out:
                n = span / domain
                net = tsp * _hit(n, k) * (n - 1) / n * token
                nvl = tsp * gpus * token
            else:
                nvl, net = tsp * gpus * token, 0.0
        t_nvl = nvl / (gpu.nvlink_bandwidth * collectives.BUS_EFFICIENCY)
        t_net = net / (gpu.network_bandwidth * collectives.BUS_EFFICIENCY)
        lat = collectives.NETWORK_ALPHA if scale_out else collectives.NVLINK_ALPHA
        one = max(t_nvl, t_net) + lat
        if sh.etp > 1 and dispatcher == "alltoall":  # all-gather the received copies over ETP (RS in combine)
            bw = gpu.link(sh.etp)
            one += collectives.ring(tsp * k * sh.etp * token, sh.etp, bw, collectives.alpha(bw, gpu.nvlink_bandwidth))
    return Exchange(EXCHANGES * one, one, nvl, net, scale_out)


def exposed(ex: Exchange, window: float, shared_window: float, overlap: bool, shared_overlap: bool) -> float:
    """Exposed seconds of a layer's exchange per microbatch given the layer's compute ``window`` and the shared
    expert's forward ``shared_window`` (seconds at the calibrated rate)."""
    t = ex.seconds
    if shared_overlap:
        t -= min(ex.dispatch_fwd, shared_window) * (1 - OVERLAP_RESIDUAL)
    if overlap:
        return max(0.0, t - window) + OVERLAP_RESIDUAL * min(t, window)
    return t
