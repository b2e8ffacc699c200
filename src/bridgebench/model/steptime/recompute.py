"""Activation recomputation: which forward work the backward repeats (megatron-core 0.19.2 ``TransformerConfig``
``recompute_granularity`` / ``recompute_method`` / ``recompute_num_layers`` / ``recompute_modules``;
``transformer/transformer_block.py::_checkpointed_forward``, ``transformer/transformer_layer.py``).

- ``full``: the whole forward of a recomputed layer (its GEMMs, attention core, element-wise work, and its forward
  tensor-parallel collectives and MoE dispatch / combine) -- every layer with ``uniform``, ``recompute_num_layers``
  of each virtual chunk's layers with ``block``;
- ``selective``: the forward of each listed module -- ``core_attn`` the attention core, ``mla_up_proj`` MLA's q / kv
  up-projections, ``mlp`` the dense MLP, ``moe`` the MoE layer (router, experts, shared expert and the forward
  dispatch / combine), ``shared_experts`` the shared expert, ``moe_act`` the experts' activation and ``layernorm``
  the norms (element-wise, HBM-bound).

Seconds come from the same per-module GEMM, attention and element-wise work the step pays once
(:mod:`bridgebench.model.steptime.gemm`, :mod:`bridgebench.model.steptime.elementwise`); a module's forward is a third
of its forward + backward GEMM work and of its element-wise bytes, the attention core's forward its own.
:func:`recompute_flops` gives the repeated FLOPs in the model-FLOPs terms of Megatron-Bridge's formula.
"""

from __future__ import annotations

from bridgebench.model.flops import model_flops
from bridgebench.model.spec import ModelSpec
from bridgebench.model.steptime.config import TimeConfig

#: selective modules -> GEMM modules of :mod:`bridgebench.model.steptime.gemm` whose forward they repeat.
SELECTIVE_GEMMS = {
    "mla_up_proj": ("mla_up_proj",),
    "mlp": ("mlp",),
    "moe": ("router", "experts", "shared_experts"),
    "shared_experts": ("shared_experts",),
}
#: selective modules -> element-wise modules of :mod:`bridgebench.model.steptime.elementwise`.
SELECTIVE_ELEMENTWISE = {"moe_act": ("moe_act",), "layernorm": ("layernorm",), "moe": ("moe_act",)}


def share_of_layers(spec: ModelSpec, cfg: TimeConfig) -> float:
    """Fraction of the layers a ``full`` recompute repeats (1 with ``uniform``)."""
    if cfg.recompute_method != "block":
        return 1.0
    chunks = cfg.pp * (cfg.vp or 1)
    per_chunk = (spec.num_layers + spec.mtp_layers) / chunks
    return float(min(1.0, (cfg.recompute_num_layers or 1) / per_chunk))


def layer_seconds(
    cfg: TimeConfig,
    gemm_fwd: dict[str, float],
    attn_fwd: float,
    elem_fwd: dict[str, float],
    tp_fwd: float,
    ep_fwd: float,
) -> float:
    """Forward seconds one layer's recompute repeats per microbatch, from the layer's forward seconds per GEMM
    module (``gemm_fwd``), attention core (``attn_fwd``), element-wise module (``elem_fwd``), forward
    tensor-parallel collectives (``tp_fwd``) and forward MoE exchanges (``ep_fwd``), all at the calibrated rate."""
    granularity = cfg.recompute_granularity
    if granularity == "full":
        return sum(gemm_fwd.values()) + attn_fwd + sum(elem_fwd.values()) + tp_fwd + ep_fwd
    if granularity != "selective":
        return 0.0
    mods = set(cfg.recompute_modules or ("core_attn",))
    out = attn_fwd if "core_attn" in mods else 0.0
    gem: set[str] = set()
    ele: set[str] = set()
    for m in mods:
        gem.update(SELECTIVE_GEMMS.get(m, ()))
        ele.update(SELECTIVE_ELEMENTWISE.get(m, ()))
    if "moe" in mods:
        out += ep_fwd
    out += sum(gemm_fwd.get(g, 0.0) for g in gem) + sum(elem_fwd.get(e, 0.0) for e in ele)
    return out


def recompute_flops(spec: ModelSpec, cfg: TimeConfig) -> float:
    """Forward FLOPs per step that activation recomputation repeats (all GPUs together), in the terms of
    :func:`bridgebench.model.flops.model_flops` (Megatron-Bridge's ``flop_utils.py``).

    ``full``: a third (the forward) of every recomputed layer's forward + backward FLOPs. ``selective``:
    ``core_attn`` the attention core, ``mla_up_proj`` the MLA q/kv up-projections (``2 (q_lora n (qk + rope) +
    kv_lora n (qk + v))`` per token and layer), ``mlp`` the dense MLPs, ``moe`` the routed and shared experts,
    ``shared_experts`` the shared ones; ``moe_act`` and ``layernorm`` are element-wise (no FLOPs).
    """
    granularity = cfg.recompute_granularity
    if granularity not in ("full", "selective"):
        return 0.0
    f = model_flops(spec, cfg.gbs, tensor_model_parallel_size=cfg.tp, formula=cfg.flops_formula)
    layer_terms = f.attention_projections + f.attention_core + f.mlp_dense + f.mlp_routed_experts
    layer_terms += f.mlp_shared_experts
    if granularity == "full":
        return float(layer_terms) / 3 * share_of_layers(spec, cfg)
    mods = set(cfg.recompute_modules)
    out = 0.0
    if "core_attn" in mods:
        out += float(f.attention_core) / 3
    if "mla_up_proj" in mods and spec.multi_latent_attention:
        n, qk, rope, v = spec.num_attention_heads, spec.qk_head_dim, spec.qk_pos_emb_head_dim, spec.v_head_dim
        per_token = 2 * ((spec.q_lora_rank or 0) * n * (qk + rope) + spec.kv_lora_rank * n * (qk + v))
        out += per_token * (spec.num_layers + spec.mtp_layers) * f.tokens
    if "mlp" in mods:
        out += float(f.mlp_dense) / 3
    if "moe" in mods:
        out += float(f.mlp_routed_experts + f.mlp_shared_experts) / 3
    elif "shared_experts" in mods:
        out += float(f.mlp_shared_experts) / 3
    return out
