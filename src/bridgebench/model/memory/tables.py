"""Per-model parameter tables of the memory model: each decoder-layer kind's parameter tensors (full shape, TP-sharded
or replicated, Muon matrix or Adam-side) and one routed expert's, computed once per :class:`ModelSpec`.

Sources: megatron-core 0.19.2 ``multi_latent_attention.py`` (MLA down-projections are not tensor-parallel), [MLM] and
[MB] as listed in :mod:`bridgebench.model.memory`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bridgebench.model.spec import ModelSpec


@dataclass(frozen=True, kw_only=True)
class Param:
    """One parameter tensor of a decoder layer: full-shape ``numel``, TP-sharded or replicated, Muon or Adam."""

    name: str
    numel: int
    tp_sharded: bool  # column/row-parallel: divided by TP (routed experts: by ETP)
    muon: bool  # a 2-D matrix Muon orthogonalizes (else Adam-side: norms, biases, embeddings)


@dataclass(kw_only=True)
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
            out.append(Param(name="q_proj", numel=h * n * (qk + rope), tp_sharded=True, muon=True))
        else:
            out.append(Param(name="q_down_proj", numel=h * spec.q_lora_rank, tp_sharded=False, muon=True))
            out.append(Param(name="q_norm", numel=spec.q_lora_rank * nv, tp_sharded=False, muon=False))
            out.append(Param(name="q_up_proj", numel=spec.q_lora_rank * n * (qk + rope), tp_sharded=True, muon=True))
        out.append(Param(name="kv_down_proj", numel=h * (spec.kv_lora_rank + rope), tp_sharded=False, muon=True))
        out.append(Param(name="kv_norm", numel=spec.kv_lora_rank * nv, tp_sharded=False, muon=False))
        out.append(Param(name="kv_up_proj", numel=spec.kv_lora_rank * n * (qk + v), tp_sharded=True, muon=True))
        out.append(Param(name="proj", numel=n * v * h, tp_sharded=True, muon=True))
    else:
        d, g = spec.head_dim, spec.query_groups
        gate = n * d if spec.attention_output_gate else 0
        # muon_split_qkv orthogonalizes Q, K, V separately, but they are one fused tensor in memory
        out.append(Param(name="qkv", numel=h * (n * d + gate + 2 * g * d), tp_sharded=True, muon=True))
        if spec.add_bias_linear:
            out.append(Param(name="qkv_bias", numel=n * d + gate + 2 * g * d, tp_sharded=True, muon=False))
        out.append(Param(name="proj", numel=n * d * h, tp_sharded=True, muon=True))
        if spec.extra.get("qk_layernorm", False):
            out.append(Param(name="qk_norm", numel=2 * d * nv, tp_sharded=False, muon=False))
    if spec.add_bias_linear:
        out.append(Param(name="proj_bias", numel=h, tp_sharded=False, muon=False))
    for norm in ("input_norm", "pre_mlp_norm"):  # LayerNorm's weight and bias are separate tensors
        out += [Param(name=f"{norm}.{w}", numel=h, tp_sharded=False, muon=False) for w in ("weight", "bias")[:nv]]
    return out


def _mlp_params(spec: ModelSpec, ffn: int, prefix: str) -> list[Param]:
    h = spec.hidden_size
    glu = 2 if spec.gated_linear_unit else 1
    out = [
        Param(name=prefix + "fc1", numel=glu * ffn * h, tp_sharded=True, muon=True),
        Param(name=prefix + "fc2", numel=ffn * h, tp_sharded=True, muon=True),
    ]
    if spec.add_bias_linear:
        out += [
            Param(name=prefix + "fc1_bias", numel=glu * ffn, tp_sharded=True, muon=False),
            Param(name=prefix + "fc2_bias", numel=h, tp_sharded=False, muon=False),
        ]
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
        moe.append(Param(name="router", numel=spec.num_moe_experts * spec.hidden_size, tp_sharded=False, muon=True))
        if spec.extra.get("moe_router_enable_expert_bias", False):
            moe.append(Param(name="router_expert_bias", numel=spec.num_moe_experts, tp_sharded=False, muon=False))
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
