"""Tensor-parallel communication of one layer per microbatch, and what ``tp_comm_overlap`` hides.

With sequence parallelism (Korthikanti et al. 2022, arXiv 2205.05198, Sec. 4.2.2; megatron-core 0.19.2
``tensor_parallel/layers.py`` / TE ``Linear(sequence_parallel=True)``) each tensor-parallel block (attention, dense
MLP, shared expert) runs, per microbatch:

- forward: an all-gather of its input (``T x w_in`` elements, the full sequence of the CP shard) before the column-
  parallel GEMM and a reduce-scatter of its output (``T x h``) after the row-parallel one;
- backward: the reduce-scatter of the input gradient, the all-gather of the output gradient, and the all-gather of
  the input again for the weight gradient (the gathered input is not kept) -- five collectives in all.

``w_in`` is ``h`` for GQA and the MLPs; for MLA the compressed q / kv (``q_lora + kv_lora + rope``; megatron-core
``transformer/multi_latent_attention.py`` all-gathers ``q_compressed`` and ``kv_compressed``). Routed experts have no
tensor-parallel collective here: their tokens move in the dispatcher (:mod:`bridgebench.model.steptime.ep_comm`).
Without sequence parallelism (TP > 1) each block all-reduces its output in the forward and its input gradient in
the backward (Shoeybi et al. 2019, arXiv 1909.08053, Sec. 3: ``f`` and ``g`` operators).

BF16 activations on the wire (2 B). The tensor-parallel group is ``TP`` consecutive ranks (Megatron's rank order
tp-cp-ep-dp-pp), so NVLink when ``TP`` fits the NVLink domain.

``tp_comm_overlap`` (TE userbuffers, Megatron-Bridge ``comm_overlap.tp_comm_overlap``; needs sequence parallelism)
pipelines each collective with the GEMM next to it: a block's collectives are hidden up to its GEMM time, and a
residual :data:`OVERLAP_RESIDUAL` of them stays exposed (the first / last chunk of each pipelined GEMM and the
userbuffers copies; Wang et al. 2022, "Overlap Communication with Dependent Computation via Decomposition",
ASPLOS '23, reports 70-90 % of the communication hidden). Without it every collective is exposed.
"""

from __future__ import annotations

from functools import lru_cache

from bridgebench.model.steptime import collectives, registry
from bridgebench.model.steptime.gemm import LayerShape, attention_gemms, gemm_seconds, mlp_gemms, tokens

#: Fraction of a tensor-parallel collective left exposed under ``tp_comm_overlap`` when the GEMM is long enough.
OVERLAP_RESIDUAL = 0.15
#: Activation bytes per element on the wire (BF16).
BYTES = 2.0


@lru_cache(maxsize=4096)
def layer_blocks(
    sid: int, gid: int, kind: str, sh: LayerShape, crosses: bool | None = None
) -> tuple[tuple[float, float], ...]:
    """Per tensor-parallel block of a layer of ``kind``: (collective seconds forward + backward per microbatch,
    the block's GEMM seconds at efficiency 1 that can hide them). Empty with TP = 1. ``crosses``: the TP group
    leaves its NVLink domain as placed (:attr:`TimeConfig.placement`; None: TP consecutive ranks from rank 0)."""
    if sh.tp <= 1 or kind == "logits":
        return ()
    spec, gpu = registry.get(sid), registry.get(gid)
    t, _ = tokens(spec, sh)
    h = spec.hidden_size
    bw = gpu.link(sh.tp) if crosses is None else (gpu.network_bandwidth if crosses else gpu.nvlink_bandwidth)
    a = collectives.alpha(bw, gpu.nvlink_bandwidth)

    def block(w_in: float, w_out: float) -> float:
        if sh.sp:
            ag_in = collectives.ring(t * w_in * BYTES, sh.tp, bw, a)
            rs_out = collectives.ring(t * w_out * BYTES, sh.tp, bw, a)
            return 3 * ag_in + 2 * rs_out  # fwd AG + RS; bwd RS(dgrad in) + AG(grad out) + AG(input for wgrad)
        return 2 * collectives.ring(t * w_out * BYTES, sh.tp, bw, a, passes=2)  # fwd AR + bwd AR

    if spec.multi_latent_attention:
        q_in = spec.q_lora_rank or h
        w_attn = q_in + spec.kv_lora_rank + spec.qk_pos_emb_head_dim
    else:
        w_attn = h
    attn_gemm = sum(gemm_seconds(attention_gemms(spec, sh), gpu).values())
    out = [(block(w_attn, h), attn_gemm)]
    moe = kind.endswith("moe")
    mlp = gemm_seconds(mlp_gemms(spec, sh, moe), gpu)
    if not moe:
        out.append((block(h, h), mlp.get("mlp", 0.0)))
    elif spec.moe_shared_expert_intermediate_size:
        out.append((block(h, h), mlp.get("shared_experts", 0.0)))
    return tuple(out)


def exposed(blocks: tuple[tuple[float, float], ...], rate: float, overlap: bool) -> float:
    """Exposed seconds of a layer's tensor-parallel collectives at on-GPU rate ``rate`` (GEMM seconds at efficiency
    1 divided by ``rate`` are the overlap windows)."""
    if not overlap:
        return sum(c for c, _ in blocks)
    return sum(max(0.0, c - w / rate) + OVERLAP_RESIDUAL * min(c, w / rate) for c, w in blocks)


def forward_share(blocks: tuple[tuple[float, float], ...], sp: bool) -> float:
    """Seconds of the forward collectives alone (what full recompute repeats): 2 of 5 with sequence parallelism,
    1 of 2 without."""
    return sum(c for c, _ in blocks) * (2 / 5 if sp else 1 / 2)
