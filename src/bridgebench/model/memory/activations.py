"""Activations of the memory model: the bytes a decoder layer saves per token (per module, by recompute and
fine-grained offloading) and the activations alive on one pipeline rank at its peak (in-flight microbatches of each
virtual chunk, the embedding, layer-wise offloading, the layer being recomputed).

Sources: [K22], [ISK], [MLM], [TE], [OFF] and [TT] as listed in :mod:`bridgebench.model.memory`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from bridgebench.model.memory.frameworks import op_sac_per_token
from bridgebench.model.memory.pipeline import Chunk, inflight_microbatches
from bridgebench.model.memory.tables import tables_of
from bridgebench.model.spec import ModelSpec


@lru_cache(maxsize=65536)
def layer_act_per_token(
    tables_id: int,
    kind: int,
    tp: int,
    etp: int,
    sp: bool,
    recompute: str | None,
    modules: tuple[str, ...],
    imbalance: float,
    dropout: bool,
    q: float,
    offload: tuple[str, ...] = (),
) -> float:
    """Bytes of saved activations of one decoder layer per token of the local (CP-split) microbatch, without the
    inputs of the ``offload`` modules (fine-grained activation offloading [OFF]).

    Per-module accounting [ISK ``layers.py``; K22 Table 2 with fused attention]: attention -- norm input (residual),
    norm output = QKV input, Q/K/V after RoPE ``(n d + 2 g d) / t``, core-attention output = projection input
    ``n d / t``, fp32 softmax statistics ``4 n / t``; MLA -- q/kv down-projection outputs and their norm outputs
    (replicated), up-projection outputs and RoPE'd q, k ``/ t`` (dropped by ``mla_up_proj``); dense MLP -- norm
    input, fc1 input ``h``, fc1 output ``(2 if GLU else 1) f / t``, activation output ``f / t``; MoE -- router logits
    and probabilities (fp32, ``8 E`` bytes), ``k`` dispatched copies of each token (x ``moe_imbalance``; x ETP / TP:
    expert-TP ranks see their group's tokens), per routed token fc1 input ``h``, fc1 output ``(2 if GLU else 1) f_e /
    etp``, activation output ``f_e / etp`` (dropped by ``moe_act``); probabilities are applied inside the activation
    (megatron-core >= 0.13), so the fc2 output is not kept; shared expert as a dense MLP. Tensors are bf16 (2 B)
    except the fp32 router terms and GEMM inputs saved for the weight gradient, which TE keeps quantized (``q``
    bytes) [TE]. With sequence parallelism the residual-stream tensors are split by TP (``hs``). ``full``
    recompute keeps only the layer input; the recomputed layer's own set is added once by the caller.
    """
    tables = tables_of(tables_id)
    spec = tables.spec
    h = spec.hidden_size
    hs = h / tp if sp else h
    if recompute == "full":
        return 2.0 * hs
    mods = set(modules) if recompute == "selective" else set()
    off = set(offload)
    if "fused_group_mlp" in off:
        off |= {"expert_fc1", "moe_act"}
    b = _attention_bytes(spec, tp, hs, mods, off, q)
    if dropout:
        b += hs  # dropout mask (1 B)
    if "mlp_norm" not in off:
        b += 2 * hs  # pre-MLP norm input (residual)
    if ("mlp" if kind == 0 else "moe") in mods:  # the MLP is recomputed: only its input is kept
        return b
    b = _with_mlp(b, spec, kind, tp, etp, sp, hs, mods, off, q, imbalance)
    if dropout:
        b += hs
    return b


def _attention_bytes(spec: ModelSpec, tp: int, hs: float, mods: set[str], off: set[str], q: float) -> float:
    """Bytes per token the attention half of a layer saves (see :func:`layer_act_per_token`): the input norm's input
    and output, MLA's down/up projections or GQA's Q, K, V and softmax statistics, the projection input."""
    n = spec.num_attention_heads
    b = 0.0 if "attn_norm" in off else 2 * hs  # input-norm input (residual)
    if "layernorm" not in mods and "qkv_linear" not in off:
        b += q * hs  # norm output = QKV / down-projection input
    if spec.multi_latent_attention:
        qk, rope, v = spec.qk_head_dim, spec.qk_pos_emb_head_dim, spec.v_head_dim
        rq = spec.q_lora_rank or 0
        b += 2 * (rq + spec.kv_lora_rank + rope) + q * (rq + spec.kv_lora_rank)  # down outputs; norm outputs
        if "core_attn" not in off:
            if "mla_up_proj" not in mods:
                b += 2 * (n * (qk + rope) + n * (qk + v) + 2 * n * (qk + rope)) / tp  # up outputs + RoPE'd q, k
            else:
                b += 2 * (n * v) / tp  # V kept for core attention
        if "attn_proj" not in off:
            b += q * (n * v) / tp  # core-attention output = projection input
    else:
        d, g = spec.head_dim, spec.query_groups
        if "core_attn" not in off:
            b += 2 * (n * d + 2 * g * d) / tp  # Q, K, V (after RoPE) saved by fused attention
            b += 4 * n / tp  # softmax statistics (fp32)
        if "attn_proj" not in off:
            b += q * (n * d) / tp  # attention output = linear_proj input
    return b


def _with_mlp(
    b: float,
    spec: ModelSpec,
    kind: int,
    tp: int,
    etp: int,
    sp: bool,
    hs: float,
    mods: set[str],
    off: set[str],
    q: float,
    imbalance: float,
) -> float:
    """``b`` plus the bytes per token the MLP half of a layer saves (``kind`` 0: dense MLP, else MoE with its router,
    routed experts and shared expert; see :func:`layer_act_per_token`)."""
    h = spec.hidden_size
    ln_out = 0.0 if "layernorm" in mods else q * hs
    glu = 2 if spec.gated_linear_unit else 1
    if kind == 0:
        f = spec.ffn_hidden_size
        return b + (ln_out + (2 * glu * f + q * f) / tp)
    fe = spec.moe_ffn_hidden_size or spec.ffn_hidden_size
    b += ln_out + 8.0 * spec.num_moe_experts / (tp if sp else 1)  # router logits + probabilities
    routed = spec.moe_router_topk * imbalance * (etp / tp if sp else etp)
    per_routed = 0.0 if "expert_fc1" in off else q * h  # fc1 input
    if "moe_act" not in off:
        per_routed += 2 * glu * fe / etp  # fc1 output = activation input
    if "moe_act" not in mods and "fused_group_mlp" not in off:
        per_routed += q * fe / etp  # activation output = fc2 input
    b += routed * per_routed
    fs = spec.moe_shared_expert_intermediate_size
    if fs and "shared_experts" not in mods:
        b += (2 * glu * fs + q * fs) / tp
    return b


@dataclass(frozen=True, kw_only=True)
class ActivationSettings:
    """What the activations of a point depend on, derived once per point by
    :func:`bridgebench.model.memory.estimate.estimate_memory`.

    ``tables_id``: ``id()`` of the model's :class:`~bridgebench.model.memory.tables.ModelTables`; ``tp`` / ``etp`` /
    ``pp`` parallel sizes, ``vp`` the virtual chunks per rank (``None``: no interleaving); ``sp`` sequence parallelism
    in effect; ``microbatches`` per step; ``tokens`` of one local (CP-split) microbatch; ``hidden`` the hidden size;
    ``recompute`` the granularity, ``modules`` the selective-recompute modules (sorted), ``block`` full recompute by
    the ``block`` method, ``group_layers`` ``recompute_num_layers`` (at least 1); ``offload`` the fine-grained
    offloaded modules (sorted); ``layer_offload`` layer-wise activation offloading on, with ``offload_layers`` layers;
    ``imbalance`` ``moe_imbalance``, ``dropout`` ``hidden_dropout``, ``q`` bytes per saved GEMM input element;
    ``op_sac`` torchtitan's op-level selective checkpointing [TT].
    """

    tables_id: int
    tp: int
    etp: int
    pp: int
    vp: int | None
    sp: bool
    microbatches: int
    tokens: float
    hidden: int
    recompute: str | None
    modules: tuple[str, ...]
    block: bool
    group_layers: int
    offload: tuple[str, ...]
    layer_offload: bool
    offload_layers: int
    imbalance: float
    dropout: bool
    q: float
    op_sac: bool

    def per_token(self, kind: int, granularity: str | None, off: tuple[str, ...] = ()) -> float:
        """:func:`layer_act_per_token` of a layer kind under this point's settings (bytes per token)."""
        return layer_act_per_token(
            self.tables_id, kind, self.tp, self.etp, self.sp, granularity, self.modules, self.imbalance, self.dropout,
            self.q, off,
        )  # fmt: skip


def rank_activations(s: ActivationSettings, rank: int, chunks: tuple[Chunk, ...]) -> float:
    """Activation bytes alive at pipeline rank ``rank``'s peak (its virtual ``chunks`` in schedule order).

    Per-layer bytes per token (:func:`layer_act_per_token`) x local tokens ``s b / CP`` x in-flight microbatches of
    each virtual chunk (:func:`~bridgebench.model.memory.pipeline.inflight_microbatches`), plus token ids and
    embedding output ``(8 + 2h) s b`` per in-flight microbatch on the embedding chunk [MLM]; full recompute
    (``uniform``) keeps each layer's input plus one recomputed group of ``recompute_num_layers`` layers' full set
    [ISK], ``block`` recomputes the first ``recompute_num_layers`` layers of each chunk and keeps the rest;
    activation offloading [OFF]: layer-wise, ``cpu_offloading_num_layers`` of the rank's layers (at most all but
    one) leave the GPU (the peak holds the other layers'); fine-grained, the ``offload_modules`` inputs leave the GPU
    and one layer's are staged; torchtitan's op-level checkpointing [TT] keeps its saved ops plus the block being
    recomputed.
    """
    kinds = tables_of(s.tables_id).layer_kinds
    full = s.recompute == "full"
    act = 0.0
    emb_act = 0.0
    recomputed = 0.0
    staged = 0.0  # one layer's offloaded tensors in transit [OFF]
    n_local = sum(len(ch[0]) for ch in chunks)
    for c, (chunk_layers, chunk_emb, _) in enumerate(chunks):
        inflight = inflight_microbatches(s.pp, rank, c, s.vp, s.microbatches)
        b = 0.0
        for i, li in enumerate(chunk_layers):
            kind = kinds[li]
            if full and (not s.block or i < s.group_layers):
                b += s.per_token(kind, "full")
                recomputed = max(recomputed, s.per_token(kind, None))
            elif s.op_sac:
                b += op_sac_per_token(s.tables_id, kind, s.tp, s.sp)
                recomputed = max(recomputed, s.per_token(kind, None))
            else:  # not recomputed (a block-method layer past the first N keeps its full set)
                gran = None if full else s.recompute
                b += s.per_token(kind, gran, s.offload)
                if s.offload:
                    staged = max(staged, s.per_token(kind, gran) - s.per_token(kind, gran, s.offload))
        act += b * s.tokens * inflight
        if chunk_emb:  # token ids (int64) + embedding output: not a layer's, never offloaded
            emb_act += (8.0 + 2.0 * (s.hidden / s.tp if s.sp else s.hidden)) * s.tokens * inflight
    if s.layer_offload and n_local > 1:
        off_layers = min(s.offload_layers, n_local - 1)
        act = act * (n_local - off_layers) / n_local
    act += emb_act
    act += staged * s.tokens
    if full:
        act += recomputed * s.tokens * (1 if s.block else s.group_layers)
    elif s.op_sac:
        act += recomputed * s.tokens  # the block being recomputed for its backward
    return act
