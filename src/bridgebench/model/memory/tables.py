"""Per-model parameter tables of the memory model: each decoder-layer kind's parameter tensors (full shape, TP-sharded
or replicated, Muon matrix or Adam-side) and one routed expert's, computed once per :class:`ModelSpec`.

Sources: megatron-core 0.19.2 ``multi_latent_attention.py`` (MLA down-projections are not tensor-parallel), [MLM] and
[MB] as listed in :mod:`bridgebench.model.memory`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bridgebench.model.spec import ModelSpec


@dataclass(frozen=True)
class Param:
    """One parameter tensor of a decoder layer: full-shape ``numel``, TP-sharded or replicated, Muon or Adam."""

    name: str
    numel: int
    tp_sharded: bool  # column/row-parallel: divided by TP (routed experts: by ETP)
    muon: bool  # a 2-D matrix Muon orthogonalizes (else Adam-side: norms, biases, embeddings)


@dataclass
class ModelTables:
    """Per-model precomputation: the parameter tensors of each layer kind and of one routed expert."""

    spec: ModelSpec
    norm_params: int
    layer_kinds: tuple[int, ...]  # 0 dense MLP, 1 MoE: decoder layers, then MTP layers
    params: dict[int, tuple[Param, ...]] = field(default_factory=dict)
    expert_params: tuple[Param, ...] = ()


def _norm_vectors(spec: ModelSpec) -> int:
    """Vectors per norm: RMSNorm has a weight; LayerNorm (``extra["normalization"]``) weight and bias."""
    return 2 if spec.extra.get("normalization", "RMSNorm") == "LayerNorm" else 1


def _attention_params(spec: ModelSpec) -> list[Param]:
    """Attention + the two per-layer norms. MLA down-projections and their norms are replicated over TP
    (megatron-core ``multi_latent_attention.py``: ``linear_q_down_proj`` / ``linear_kv_down_proj`` are not
    parallel); ``qk_layernorm`` (``extra``) adds ``2 d`` per layer, a negligible term off by default."""
    h, n = spec.hidden_size, spec.num_attention_heads
    nv = _norm_vectors(spec)
    out = []
    if spec.multi_latent_attention:
        qk, rope, v = spec.qk_head_dim, spec.qk_pos_emb_head_dim, spec.v_head_dim
        if spec.q_lora_rank is None:
            out.append(Param("q_proj", h * n * (qk + rope), True, True))
        else:
            out.append(Param("q_down_proj", h * spec.q_lora_rank, False, True))
            out.append(Param("q_norm", spec.q_lora_rank * nv, False, False))
            out.append(Param("q_up_proj", spec.q_lora_rank * n * (qk + rope), True, True))
        out.append(Param("kv_down_proj", h * (spec.kv_lora_rank + rope), False, True))
        out.append(Param("kv_norm", spec.kv_lora_rank * nv, False, False))
        out.append(Param("kv_up_proj", spec.kv_lora_rank * n * (qk + v), True, True))
        out.append(Param("proj", n * v * h, True, True))
    else:
        d, g = spec.head_dim, spec.query_groups
        gate = n * d if spec.attention_output_gate else 0
        # muon_split_qkv orthogonalizes Q, K, V separately, but they are one fused tensor in memory
        out.append(Param("qkv", h * (n * d + gate + 2 * g * d), True, True))
        if spec.add_bias_linear:
            out.append(Param("qkv_bias", n * d + gate + 2 * g * d, True, False))
        out.append(Param("proj", n * d * h, True, True))
        if spec.extra.get("qk_layernorm", False):
            out.append(Param("qk_norm", 2 * d * nv, False, False))
    if spec.add_bias_linear:
        out.append(Param("proj_bias", h, False, False))
    for norm in ("input_norm", "pre_mlp_norm"):  # LayerNorm's weight and bias are separate tensors
        out += [Param(f"{norm}.{w}", h, False, False) for w in ("weight", "bias")[:nv]]
    return out


def _mlp_params(spec: ModelSpec, ffn: int, prefix: str) -> list[Param]:
    h = spec.hidden_size
    glu = 2 if spec.gated_linear_unit else 1
    out = [Param(prefix + "fc1", glu * ffn * h, True, True), Param(prefix + "fc2", ffn * h, True, True)]
    if spec.add_bias_linear:
        out += [Param(prefix + "fc1_bias", glu * ffn, True, False), Param(prefix + "fc2_bias", h, False, False)]
    return out


_TABLES: dict[int, tuple[ModelSpec, ModelTables]] = {}


def model_tables(spec: ModelSpec) -> ModelTables:
    """Per-model parameter tables, cached by object identity (a :class:`ModelSpec` is frozen but holds a dict)."""
    hit = _TABLES.get(id(spec))
    if hit is not None and hit[0] is spec:
        return hit[1]
    pattern = spec.moe_layer_pattern
    kinds = tuple(pattern) + (pattern[-1],) * spec.mtp_layers
    attn = _attention_params(spec)
    dense = tuple(attn + _mlp_params(spec, spec.ffn_hidden_size, "mlp."))
    moe: list[Param] = list(attn)
    expert: tuple[Param, ...] = ()
    if spec.is_moe:
        moe.append(Param("router", spec.num_moe_experts * spec.hidden_size, False, True))
        if spec.extra.get("moe_router_enable_expert_bias", False):
            moe.append(Param("router_expert_bias", spec.num_moe_experts, False, False))
        if spec.moe_shared_expert_intermediate_size:
            moe += _mlp_params(spec, spec.moe_shared_expert_intermediate_size, "shared.")
        expert = tuple(_mlp_params(spec, spec.moe_ffn_hidden_size or spec.ffn_hidden_size, "expert."))
    tables = ModelTables(
        spec=spec,
        norm_params=spec.hidden_size * _norm_vectors(spec),
        layer_kinds=kinds,
        params={0: dense, 1: tuple(moe)},
        expert_params=expert,
    )
    _TABLES[id(spec)] = (spec, tables)
    _BY_ID[id(tables)] = tables
    return tables


_BY_ID: dict[int, ModelTables] = {}


def tables_of(tables_id: int) -> ModelTables:
    """The :class:`ModelTables` whose ``id()`` is ``tables_id`` (the cached per-stage functions take the id, a cheap
    hashable key). Raises ``KeyError`` for an id :func:`model_tables` never returned."""
    return _BY_ID[tables_id]
