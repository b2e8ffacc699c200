"""Context-parallel communication of one attention layer per microbatch, by ``cp_comm_type`` (megatron-core 0.19.2
``transformer_config.py``; TE ``attention/dot_product_attention/context_parallel.py``).

Per GPU the KV of its sequence chunk is ``MBS x s / CP x (K + V widths per GPU) x 2 B`` (GQA: ``2 x max(g / TP, 1) x
d``; MLA: ``n / TP x (qk + rope + v)``, the up-projected heads). With CP = 1 nothing moves.

- ``p2p`` (default; ring attention, Liu et al. 2023, arXiv 2310.01889; TE ``AttnFuncWithCPAndKVP2P``): ``CP - 1``
  ring steps in the forward, each sending the KV chunk while the attention of the previous chunk runs; the backward
  sends KV and its gradient (twice the bytes) while the backward of a chunk runs. Exposed per step: the transfer
  beyond the chunk's attention time, plus the step latency (never free).
- ``a2a`` (DeepSpeed-Ulysses, Jacobs et al. 2023, arXiv 2309.14509): all-to-all of Q, K, V before and of the output
  after the attention, the same again for the gradients; not overlapped.
- ``all_gather``: all-gather of K and V in the forward, reduce-scatter of their gradients in the backward,
  overlapped with the attention core up to its time.
- ``a2a+p2p`` (hierarchical): modelled as ``p2p`` over the CP group.

The CP group is ``CP`` ranks at stride ``TP`` (rank order tp-cp-ep-dp-pp), a block of ``TP x CP`` consecutive ranks:
NVLink when it fits the NVLink domain, else the scale-out network.
"""

from __future__ import annotations

from functools import lru_cache

from bridgebench.model.placement import GroupPlacement
from bridgebench.model.spec import ModelSpec
from bridgebench.model.steptime import collectives, registry
from bridgebench.model.steptime.gemm import LayerShape, tokens

BYTES = 2.0


def _widths(spec: ModelSpec, tp: int) -> tuple[float, float, float]:
    """(q, k + v, output) widths per GPU (elements per token)."""
    n = spec.num_attention_heads / tp
    if spec.multi_latent_attention:
        qk = spec.qk_head_dim + spec.qk_pos_emb_head_dim
        return n * qk, n * (qk + spec.v_head_dim), n * spec.v_head_dim
    d = spec.head_dim
    return n * d, 2 * max(spec.query_groups / tp, 1.0) * d, n * d


@lru_cache(maxsize=4096)
def layer_terms(
    sid: int, gid: int, sh: LayerShape, comm_type: str, group: GroupPlacement | None = None
) -> tuple[str, float, float, int, float]:
    """One attention layer's CP communication per microbatch: (kind, forward step seconds, backward step seconds,
    ring steps, non-overlappable seconds); kind ``none`` (CP = 1), ``ring`` (``p2p``, ``a2a+p2p``), ``gather``
    (``all_gather``: one overlapped collective each way) or ``a2a`` (nothing overlapped). ``group``: the CP group
    as placed on NVLink domains (:attr:`TimeConfig.placement`; None: the ``TP x CP`` consecutive ranks from 0)."""
    if sh.cp <= 1:
        return ("none", 0.0, 0.0, 0, 0.0)
    spec, gpu = registry.get(sid), registry.get(gid)
    t, _ = tokens(spec, sh)
    q, kv, o = _widths(spec, sh.tp)
    if group is None:
        bw = gpu.link(sh.tp * sh.cp)
    else:
        bw = gpu.network_bandwidth if group.crosses else gpu.nvlink_bandwidth
    a = collectives.alpha(bw, gpu.nvlink_bandwidth)
    if comm_type == "a2a":
        share = (sh.cp - 1) / sh.cp
        fwd = collectives.send(share * t * (q + kv + o) * BYTES, bw, a) * 2  # Q,K,V in; O out (two exchanges)
        return ("a2a", 0.0, 0.0, 0, 2 * fwd)  # backward: the gradients of the same tensors
    if comm_type == "all_gather":
        full = t * kv * BYTES * sh.cp
        if group is None:
            step = collectives.group_ring(
                full, sh.cp, sh.tp, gpu.nvlink_domain, gpu.nvlink_bandwidth, gpu.network_bandwidth
            )
        else:
            step = collectives.placed_ring(full, group, gpu.nvlink_bandwidth, gpu.network_bandwidth)
        return ("gather", step, step, 1, 0.0)
    chunk = t * kv * BYTES
    return ("ring", collectives.send(chunk, bw, a), collectives.send(2 * chunk, bw, a), sh.cp - 1, 0.0)


def exposed(terms: tuple[str, float, float, int, float], attn_fwd: float, attn_bwd: float, cp: int) -> float:
    """Exposed CP seconds of one layer per microbatch, given its attention-core forward and backward seconds (at the
    calibrated rate): per ring step the transfer beyond a chunk's attention time plus the step latency."""
    kind, fwd, bwd, steps, fixed = terms
    if kind in ("none", "a2a"):
        return fixed
    if kind == "gather":
        return max(0.0, fwd - attn_fwd) + max(0.0, bwd - attn_bwd) + 2 * collectives.NVLINK_ALPHA
    chunk_f, chunk_b = attn_fwd / cp, attn_bwd / cp
    lat = collectives.NVLINK_ALPHA
    return steps * (max(0.0, fwd - chunk_f) + max(0.0, bwd - chunk_b) + 2 * lat) + fixed
