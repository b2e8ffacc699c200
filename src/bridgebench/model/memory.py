"""Peak GPU memory of one Megatron-Core training step, per GPU, on the busiest rank (bytes).

Pure Python (no torch, megatron, pandas, Hydra or YAML import), so a sweep scores thousands of points per second:
per-model parameter tables and per-(stage, group) optimizer states are computed once and cached.

Sources of the formulas (each term below names its own):

[K22]  Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models", arXiv 2205.05198 (2022),
       Sec. 4 and Table 2: per-layer activations ``s b h (34 + 5 a s / h)`` bytes; the ``5 a s / h`` attention-score
       term vanishes with fused (flash) attention; sequence parallelism splits the rest by TP.
[MLM]  Megatron-LM ``megatron/training/theoretical_memory_usage.py`` (core_r0.18.0, PR #4687): bytes per parameter
       ``18`` without the distributed optimizer (2 bf16 weight + 4 fp32 grad + 4 fp32 master + 8 Adam moments),
       ``6 + 12 / DP`` with it; embedding on the first stage, output layer on the last; embedding input and dropout
       ``8 s b + s b h`` per in-flight microbatch; ``4 s b (h + V)`` for the output layer and cross entropy.
[MB]   Megatron-Bridge 0.6.2 ``megatron/bridge/training/utils/theoretical_memory_utils.py``
       (``estimate_training_memory``): the same byte model, dense optimizer shard ``DP x CP``, routed experts sharded
       by ``EP x ETP`` with optimizer shard ``EDP = DP x TP x CP / (EP x ETP)``.
[ISK]  ISEEKYAN/mbridge ``memory_estimator/estimate_013.py`` and ``moe_mem_estimator/layers.py`` (the estimator MB
       adapted): per-module activations (MLA, grouped MLP, router, dispatcher), in-flight microbatches per pipeline
       rank and virtual chunk, selective (per-module) and full recompute.
[MC]   megatron-core 0.19.2 ``megatron/core/optimizer/layer_wise_optimizer.py`` (``LayerWiseDistributedOptimizer``,
       the ``dist_muon`` optimizer): WHOLE parameters are dealt to the ranks of the DP x CP group (routed experts:
       the expert-DP group). Legacy path ``_shard_params_ping_pong`` (the 26.02 recipes, distributed optimizer off):
       all params sorted by numel ascending, dealt ``0..G-1, G-1..0``; param-layout path
       (``use_distributed_optimizer``): Adam-side params through ``DistributedOptimizer``, Muon matrices
       balanced whole over the group. The fp32 master copy and the momentum exist only for owned params.
       emerging-optimizers 0.3.0 ``OrthogonalizedOptimizer``: one fp32 ``momentum_buffer`` per matrix.
[TE]   Transformer Engine FP8 / MXFP8: quantized weight copies (row- and column-wise, 1 B per value, MXFP8 plus one
       E8M0 scale per 32 values) are cached across microbatches; GEMM inputs saved for the weight gradient are kept
       quantized (1 B, + 1/32 B scale for MXFP8) instead of bf16 (research notes ``sweeps_and_compare.md`` Sec. 1.6,
       "MXFP8 extras").

[TT]   torchtitan@9dec370 (Dec 2024, the commit of ``benchmarks/llama3_h100_202412_torchtitan.md``), for
       ``framework="torchtitan"``: ``torchtitan/parallelisms/parallelize_llama.py`` -- op-level selective activation
       checkpointing (``selective_ac_option = "op"``, the ``llama3_8b.toml`` default): per TransformerBlock, save the
       outputs of ``aten.mm`` except every second one, of the SDPA kernels and of ``reduce_scatter_tensor``,
       recompute the rest; ``apply_fsdp``: FSDP2 ``fully_shard`` per block and on the root, ``MixedPrecisionPolicy(
       param_dtype=bf16, reduce_dtype=fp32)`` over fp32 sharded parameters, ``reshard_after_forward=False`` under
       pipeline parallelism; ``train.py`` ``loss_fn``: ``cross_entropy(pred.flatten(0, 1).float(), ...)``.
[DS]   DeepSpeed ZeRO-3 (``deepspeed/runtime/zero/constants.py``, the 2021 releases Megatron-LM's ZeRO-3 comparison
       ran, arXiv 2104.04473 Sec. 5.2), for ``framework="deepspeed"``: parameters are gathered per submodule (each
       parameter tensor whole) with at most ``stage3_max_live_parameters`` (default 1e9) resident, plus
       ``stage3_prefetch_bucket_size`` (default 5e7) prefetched; gradients are reduce-scattered in
       ``reduce_bucket_size`` (default 5e8) buckets.

``other_bytes`` (allocator-visible workspaces: cuBLAS / TE workspaces, RNG states, data and loss buffers) is a
calibration, not a derivation: its value and source are in ``configs/calibration/default.yaml``.

Not modelled here: allocator fragmentation (reserved vs allocated: the pruner's margin,
``bridgebench.config.calibration``), CUDA-graph private pools, NCCL buffers outside the PyTorch allocator, dispatcher
(DeepEP / HybridEP) workspaces, transient wgrad buffers, token-routing imbalance beyond the ``moe_imbalance`` factor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterable

from bridgebench.errors import BridgebenchError
from bridgebench.model import layout as layout_mod
from bridgebench.model.parallel import ParallelSizes
from bridgebench.model.spec import ModelSpec

GiB = 1024**3

#: bytes per logits element at the loss peak without fused cross entropy: the fp32 softmax (4 B) while the bf16
#: logits or their gradient (2 B) are alive [ISK]. Megatron-LM counts 4 B per (h + V) [MLM].
LOGITS_BYTES_UNFUSED = 6.0
#: fused cross entropy (``cross_entropy_loss_fusion``): no fp32 softmax beside the bf16 logits.
LOGITS_BYTES_FUSED = 4.0

#: extra bytes per GEMM weight element for cached quantized copies [TE]: (without fp8_param_gather, with it).
PRECISION_WEIGHT_EXTRA = {
    "bf16": (0.0, 0.0),
    "fp8_cs": (2.0, 0.0),  # row-wise + column-wise FP8 copies; with fp8_param_gather the param itself is FP8
    "mxfp8": (2.0 + 2.0 / 32, 2.0 / 32),  # 1 B + 1/32 B E8M0 scale, row- and column-wise
    "nvfp4": (2 * (0.5 + 1.0 / 16), 0.0),  # 4-bit values + one scale per 16 values, both orientations
}
#: bytes per saved GEMM input element (kept for the weight gradient) [TE]: bf16 2 B; FP8 1 B; MXFP8 1 + 1/32 B.
PRECISION_SAVED_INPUT = {"bf16": 2.0, "fp8_cs": 1.0, "mxfp8": 1.0 + 1.0 / 32, "nvfp4": 1.0 + 1.0 / 32}

OPTIMIZERS = ("adam", "muon", "dist_muon")
FSDP_STRATEGIES = ("no_shard", "optim", "optim_grads", "optim_grads_params")
#: ``offload_modules`` of fine-grained activation offloading (megatron-core 0.19.2 ``transformer_config.py``).
OFFLOAD_MODULES = (
    "attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1", "moe_act", "fused_group_mlp",
)  # fmt: skip
#: bytes per element of the dtype spellings configs use (``torch.bfloat16``, ``bf16``, ``fp32`` ...).
DTYPE_BYTES = {
    "float32": 4, "fp32": 4, "float": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2,
    "uint8": 1, "float8": 1, "fp8": 1,
}  # fmt: skip


def dtype_bytes(dtype: str | None, default: int = 4) -> int:
    """Bytes per element of a dtype spelling (``torch.bfloat16`` -> 2); ``None`` -> ``default``.

    Raises:
        MemoryModelError: an unknown spelling.
    """
    if dtype is None:
        return default
    key = str(dtype).rsplit(".", 1)[-1].lower()
    if key not in DTYPE_BYTES:
        raise MemoryModelError(f"unknown dtype {dtype!r}; known: {sorted(DTYPE_BYTES)}")
    return DTYPE_BYTES[key]


RECOMPUTE_GRANULARITIES = (None, "selective", "full")
#: whose semantics the FSDP and recompute settings take: Megatron-Core (the default), torchtitan [TT] or DeepSpeed
#: ZeRO-3 [DS] -- the last two only to check the model against published runs of those frameworks.
FRAMEWORKS = ("megatron", "torchtitan", "deepspeed")
#: bytes per logits element at torchtitan's loss peak: the bf16 logits, their fp32 copy and the fp32 log-softmax
#: output (``train.py`` ``loss_fn`` upcasts before ``cross_entropy``) [TT].
LOGITS_BYTES_TORCHTITAN = 10.0


class MemoryModelError(BridgebenchError):
    """A point the memory model cannot evaluate; the message names the field and the rule."""


# ---------------------------------------------------------------------------------------------------- inputs
@dataclass(frozen=True)
class MemoryConfig(ParallelSizes):
    """Parallelism, batch, optimizer, precision and recompute settings of one point.

    Sizes use the names of :class:`bridgebench.config.rules.Point` (``tp pp vp cp ep etp`` are Megatron-Core's
    tensor / pipeline / virtual-pipeline / context / expert / expert-tensor parallel sizes, ``etp=None`` means TP,
    ``vp=None`` no interleaving; ``mbs`` / ``gbs`` micro / global batch in sequences); the rest are Megatron-Core /
    Megatron-Bridge field names. ``seq_length=None`` takes the model's.

    ``optimizer``: ``adam`` (AdamW), ``muon`` (every DP rank holds all state) or ``dist_muon`` (layer-wise
    distributed Muon). ``use_distributed_optimizer``: Adam through Megatron's ``DistributedOptimizer``; for
    ``dist_muon`` the buffer-integrated param-layout path, else the legacy ping-pong path of the 26.02 recipes.
    ``recompute_granularity``: ``None`` | ``"selective"`` | ``"full"``; ``recompute_modules`` (selective) are
    Megatron-Core names (``core_attn``, ``mla_up_proj``, ``moe_act``, ``layernorm``, ``mlp``, ``moe``,
    ``shared_experts``); ``recompute_method`` (full) ``uniform`` | ``block`` with ``recompute_num_layers``.
    ``moe_imbalance``: routed tokens on the busiest expert rank over the mean (1.0 = force-balanced routing, as in
    NVIDIA's perf recipes). ``other_bytes``: calibrated constant per GPU (``configs/calibration``).

    Pipeline split (Megatron-Core): ``pipeline_model_parallel_layout``, ``num_layers_in_first/last_pipeline_stage``,
    ``account_for_embedding/loss_in_pipeline_split`` (:func:`bridgebench.model.layout.stage_layers`). Megatron-FSDP:
    ``use_megatron_fsdp`` with ``data_parallel_sharding_strategy`` and ``fsdp_double_buffer`` [FSDP]. Optimizer:
    ``use_precision_aware_optimizer`` with ``main_params_dtype`` / ``exp_avg_dtype`` / ``exp_avg_sq_dtype`` [PAO],
    ``optimizer_cpu_offload`` with ``optimizer_offload_fraction``. Activations: ``cpu_offloading`` (+
    ``cpu_offloading_num_layers``, ``cpu_offloading_activations``), ``fine_grained_activation_offloading`` with
    ``offload_modules`` [OFF].

    ``framework`` (:data:`FRAMEWORKS`): ``"megatron"`` (Megatron-Core, the default); ``"torchtitan"`` -- selective
    recompute is torchtitan's op-level selective activation checkpointing, Megatron-FSDP's ``optim_grads_params``
    is FSDP2 (fp32 sharded parameters and gradients, AdamW moments, no separate master copy; bf16 gathered blocks,
    all of a pipeline stage's under PP) and the loss upcasts the logits [TT]; ``"deepspeed"`` -- sharded data
    parallelism is ZeRO-3, gathering per parameter tensor under ``zero3_max_live_parameters`` with
    ``zero3_prefetch_bucket_size`` prefetched and gradients reduced in ``zero3_reduce_bucket_size`` buckets [DS].
    Neither is a Megatron-Core setting (nor a config key: only points built in code carry them).
    """

    num_gpus: int
    mbs: int
    gbs: int
    tp: int = 1
    pp: int = 1
    vp: int | None = None
    cp: int = 1
    ep: int = 1
    etp: int | None = None
    seq_length: int | None = None
    sequence_parallel: bool = False
    pipeline_model_parallel_layout: str | None = None
    optimizer: str = "adam"
    use_distributed_optimizer: bool = True
    precision: str = "bf16"
    fp8_param_gather: bool = False
    grad_reduce_in_fp32: bool = True
    recompute_granularity: str | None = None
    recompute_method: str | None = None
    recompute_num_layers: int | None = None
    recompute_modules: tuple[str, ...] = ()
    cross_entropy_loss_fusion: bool = False
    moe_imbalance: float = 1.0
    hidden_dropout: bool = False
    other_bytes: float = 0.0
    num_layers_in_first_pipeline_stage: int | None = None
    num_layers_in_last_pipeline_stage: int | None = None
    account_for_embedding_in_pipeline_split: bool = False
    account_for_loss_in_pipeline_split: bool = False
    use_megatron_fsdp: bool = False
    data_parallel_sharding_strategy: str = "no_shard"
    fsdp_double_buffer: bool = False
    use_precision_aware_optimizer: bool = False
    main_params_dtype: str | None = None
    exp_avg_dtype: str | None = None
    exp_avg_sq_dtype: str | None = None
    optimizer_cpu_offload: bool = False
    optimizer_offload_fraction: float = 0.0
    cpu_offloading: bool = False
    cpu_offloading_num_layers: int = 0
    cpu_offloading_activations: bool = True
    fine_grained_activation_offloading: bool = False
    offload_modules: tuple[str, ...] = ()
    framework: str = "megatron"
    zero3_max_live_parameters: int = 1_000_000_000
    zero3_prefetch_bucket_size: int = 50_000_000
    zero3_reduce_bucket_size: int = 500_000_000


@dataclass(frozen=True)
class MemoryBreakdown:
    """Peak memory of the busiest rank, bytes: ``total = weights + grads + optimizer_state + activations + logits
    + other``. ``stage`` is the pipeline rank it was found on; ``per_stage`` the totals of every pipeline rank."""

    weights: float
    grads: float
    optimizer_state: float
    activations: float
    logits: float
    other: float
    stage: int = 0
    per_stage: tuple[float, ...] = ()

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer_state + self.activations + self.logits + self.other

    @property
    def model_state(self) -> float:
        """Weights + gradients + optimizer state (bytes): what Megatron-Bridge's estimator calls
        ``weight_and_optimizer_bytes``."""
        return self.weights + self.grads + self.optimizer_state

    def gib(self) -> dict[str, float]:
        """Every term in GiB."""
        keys = ("weights", "grads", "optimizer_state", "activations", "logits", "other", "total")
        return {k: getattr(self, k) / GiB for k in keys}


# ---------------------------------------------------------------------------------------------------- per model
@dataclass(frozen=True)
class _Param:
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
    params: dict[int, tuple[_Param, ...]] = field(default_factory=dict)
    expert_params: tuple[_Param, ...] = ()


def _norm_vectors(spec: ModelSpec) -> int:
    """Vectors per norm: RMSNorm has a weight; LayerNorm (``extra["normalization"]``) weight and bias."""
    return 2 if spec.extra.get("normalization", "RMSNorm") == "LayerNorm" else 1


def _attention_params(spec: ModelSpec) -> list[_Param]:
    """Attention + the two per-layer norms. MLA down-projections and their norms are replicated over TP
    (megatron-core ``multi_latent_attention.py``: ``linear_q_down_proj`` / ``linear_kv_down_proj`` are not
    parallel); ``qk_layernorm`` (``extra``) adds ``2 d`` per layer, a negligible term off by default."""
    h, n = spec.hidden_size, spec.num_attention_heads
    nv = _norm_vectors(spec)
    out = []
    if spec.multi_latent_attention:
        qk, rope, v = spec.qk_head_dim, spec.qk_pos_emb_head_dim, spec.v_head_dim
        if spec.q_lora_rank is None:
            out.append(_Param("q_proj", h * n * (qk + rope), True, True))
        else:
            out.append(_Param("q_down_proj", h * spec.q_lora_rank, False, True))
            out.append(_Param("q_norm", spec.q_lora_rank * nv, False, False))
            out.append(_Param("q_up_proj", spec.q_lora_rank * n * (qk + rope), True, True))
        out.append(_Param("kv_down_proj", h * (spec.kv_lora_rank + rope), False, True))
        out.append(_Param("kv_norm", spec.kv_lora_rank * nv, False, False))
        out.append(_Param("kv_up_proj", spec.kv_lora_rank * n * (qk + v), True, True))
        out.append(_Param("proj", n * v * h, True, True))
    else:
        d, g = spec.head_dim, spec.query_groups
        gate = n * d if spec.attention_output_gate else 0
        # muon_split_qkv orthogonalizes Q, K, V separately, but they are one fused tensor in memory
        out.append(_Param("qkv", h * (n * d + gate + 2 * g * d), True, True))
        if spec.add_bias_linear:
            out.append(_Param("qkv_bias", n * d + gate + 2 * g * d, True, False))
        out.append(_Param("proj", n * d * h, True, True))
        if spec.extra.get("qk_layernorm", False):
            out.append(_Param("qk_norm", 2 * d * nv, False, False))
    if spec.add_bias_linear:
        out.append(_Param("proj_bias", h, False, False))
    for norm in ("input_norm", "pre_mlp_norm"):  # LayerNorm's weight and bias are separate tensors
        out += [_Param(f"{norm}.{w}", h, False, False) for w in ("weight", "bias")[:nv]]
    return out


def _mlp_params(spec: ModelSpec, ffn: int, prefix: str) -> list[_Param]:
    h = spec.hidden_size
    glu = 2 if spec.gated_linear_unit else 1
    out = [_Param(prefix + "fc1", glu * ffn * h, True, True), _Param(prefix + "fc2", ffn * h, True, True)]
    if spec.add_bias_linear:
        out += [_Param(prefix + "fc1_bias", glu * ffn, True, False), _Param(prefix + "fc2_bias", h, False, False)]
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
    moe: list[_Param] = list(attn)
    expert: tuple[_Param, ...] = ()
    if spec.is_moe:
        moe.append(_Param("router", spec.num_moe_experts * spec.hidden_size, False, True))
        if spec.extra.get("moe_router_enable_expert_bias", False):
            moe.append(_Param("router_expert_bias", spec.num_moe_experts, False, False))
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


# ---------------------------------------------------------------------------------------------------- pipeline
Chunk = layout_mod.Chunk  # (layer indices, holds the embedding, holds the loss)


def stage_chunks(
    num_layers: int,
    mtp: int,
    pp: int,
    vp: int | None,
    layout: str | None,
    first_stage_layers: int | None = None,
    last_stage_layers: int | None = None,
    account_for_embedding: bool = False,
    account_for_loss: bool = False,
) -> tuple[tuple[Chunk, ...], ...]:
    """Per pipeline rank, its virtual chunks in schedule order, each ``(layer indices, has_embedding, has_loss)``,
    as Megatron-Core assigns them: :func:`bridgebench.model.layout.stage_layers` (layout string, uneven first / last
    stage, ``account_for_embedding/loss_in_pipeline_split``, even split).

    Raises:
        bridgebench.model.layout.LayoutError: a layout outside Megatron-Core's grammar.
    """
    return layout_mod.stage_layers(
        num_layers, pp, vp, layout, mtp, first_stage_layers, last_stage_layers, account_for_embedding, account_for_loss
    )


def _ranks(spec: ModelSpec, cfg: MemoryConfig) -> tuple[tuple[Chunk, ...], ...]:
    return stage_chunks(
        spec.num_layers,
        spec.mtp_layers,
        cfg.pp,
        cfg.vp,
        cfg.pipeline_model_parallel_layout,
        cfg.num_layers_in_first_pipeline_stage,
        cfg.num_layers_in_last_pipeline_stage,
        cfg.account_for_embedding_in_pipeline_split,
        cfg.account_for_loss_in_pipeline_split,
    )


def inflight_microbatches(pp: int, rank: int, chunk: int, vp: int | None, m: int) -> int:
    """Microbatches whose activations of virtual chunk ``chunk`` are alive at rank ``rank``'s peak.

    1F1B (PipeDream-flush): ``min(m, p - r)`` [K22 Sec. 4.2.3; ISK]. Interleaved (``v`` chunks): chunk 0
    ``p + max(2(p - r) - 1 - p, 0)``, middle chunks ``p``, last chunk ``min(2(p - r) + 1, p)`` [ISK
    ``estimate_013.py``], capped by ``m``; summed over rank 0's chunks this is Megatron's interleaving penalty
    ``p v (1 + (p - 1)/(p v))`` [MLM].
    """
    if pp == 1:
        return 1
    if not vp or vp == 1:
        return min(m, pp - rank)
    if chunk == 0:
        n = pp + max(2 * (pp - rank) - 1 - pp, 0)
    elif chunk == vp - 1:
        n = min(2 * (pp - rank) + 1, pp)
    else:
        n = pp
    return min(n, m)


# ---------------------------------------------------------------------------------------------------- activations
@lru_cache(maxsize=65536)
def _layer_act_per_token(
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
    tables = _BY_ID[tables_id]
    spec = tables.spec
    h, n = spec.hidden_size, spec.num_attention_heads
    hs = h / tp if sp else h
    if recompute == "full":
        return 2.0 * hs
    mods = set(modules) if recompute == "selective" else set()
    off = set(offload)
    if "fused_group_mlp" in off:
        off |= {"expert_fc1", "moe_act"}
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
    if dropout:
        b += hs  # dropout mask (1 B)
    if "mlp_norm" not in off:
        b += 2 * hs  # pre-MLP norm input (residual)
    ln_out = 0.0 if "layernorm" in mods else q * hs
    glu = 2 if spec.gated_linear_unit else 1
    if kind == 0:
        if "mlp" in mods:
            return b
        f = spec.ffn_hidden_size
        b += ln_out + (2 * glu * f + q * f) / tp
    else:
        if "moe" in mods:
            return b
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
    if dropout:
        b += hs
    return b


@lru_cache(maxsize=4096)
def _op_sac_per_token(tables_id: int, kind: int, tp: int, sp: bool) -> float:
    """Bytes one dense decoder layer keeps per token of the local microbatch under torchtitan's op-level selective
    activation checkpointing [TT]: the block input (the checkpoint's argument) and the outputs of the ops its
    policy must save -- ``aten.mm`` except every second one counted from 1 in call order (Llama's ``wq``, ``wk``,
    ``wv``, ``wo``, ``w1``, ``w3``, ``w2``: ``wq``, ``wv``, ``w1`` and ``w2`` saved; a non-gated MLP's ``w1`` only),
    the flash-attention output and its fp32 log-sum-exp, and each ``reduce_scatter_tensor`` output of the
    row-parallel ``wo`` / ``w2`` under TP with sequence parallelism. A row-parallel ``mm`` output is the full-width
    partial sum (``h``, not ``h / t``). All bf16 (2 B) but the log-sum-exp (4 B). The recomputed block's own full
    set is added once by the caller, as for full recompute.

    Raises:
        MemoryModelError: an MoE or MLA layer (torchtitan's Llama has neither; not modelled).
    """
    spec = _BY_ID[tables_id].spec
    if kind != 0 or spec.multi_latent_attention:
        raise MemoryModelError(
            "framework=torchtitan op-level selective activation checkpointing is modelled for dense GQA/MHA layers "
            "only (torchtitan's Llama); use recompute_granularity full or none for MoE / MLA layers"
        )
    h, n, d, g = spec.hidden_size, spec.num_attention_heads, spec.head_dim, spec.query_groups
    hs = h / tp if sp else h
    b = 2.0 * hs  # block input
    b += 2.0 * n * d / tp + 2.0 * g * d / tp  # mm 1 (wq) and mm 3 (wv)
    b += 2.0 * n * d / tp + 4.0 * n / tp  # flash attention: output and log-sum-exp
    f = spec.ffn_hidden_size
    b += 2.0 * f / tp  # mm 5 (w1)
    if spec.gated_linear_unit:
        b += 2.0 * h  # mm 7 (w2): the row-parallel partial sum before its reduce-scatter
    if tp > 1:
        b += 2 * 2.0 * hs  # reduce_scatter_tensor outputs of wo and w2 (sequence parallel)
    return b


# ---------------------------------------------------------------------------------------------------- model state
Run = tuple[int, bool, int]  # (numel per tensor, is a Muon matrix, how many such tensors in a row)


@lru_cache(maxsize=65536)
def _stage_params(
    tables_id: int, layers: tuple[int, ...], tp: int, etp: int, ep: int, has_emb: bool, has_loss: bool
) -> tuple[tuple[Run, ...], tuple[Run, ...]]:
    """Parameter tensors on one GPU of one pipeline rank, ``(dense, routed experts)``, in Megatron-Core's parameter
    order as runs ``(numel, is_muon, count)`` (one layer's local experts are one run per expert tensor: identical
    tensors in a row deal like one block, see :func:`_ping_pong_runs`).

    Column/row-parallel tensors are divided by TP (replicated ones are not: router, norms, MLA down-projections);
    ``E / EP`` local routed experts per MoE layer, each divided by ETP; an MTP layer adds ``eh_proj`` ``(h, 2h)``
    and two norms. Word embedding ``V_pad h / t`` on the embedding stage (plus learned positions,
    ``extra["max_position_embeddings"]``), output layer on the loss stage (a tied embedding is held there too when
    it is not on the same stage) [MLM; MB].
    """
    tables = _BY_ID[tables_id]
    spec = tables.spec
    dense: list[Run] = []
    experts: list[Run] = []
    local_experts = spec.num_moe_experts // ep if spec.is_moe else 0
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


def _ping_pong_runs(runs: Iterable[tuple[int, float, int]], group: int) -> list[float]:
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
    return _ping_pong_runs(((n, b, 1) for n, b in items), group)


def lpt_loads(items: Iterable[tuple[int, float]], group: int) -> list[float]:
    """Bytes per rank when whole matrices are assigned largest first to the least-loaded rank (longest processing
    time first), the balanced param-layout path [MC]."""
    loads = [0.0] * group
    for n, b in sorted(items, key=lambda x: -x[0]):
        j = min(range(group), key=loads.__getitem__)
        loads[j] += n * b
    return loads


def _state(muon: bool, adam_bytes: float = 12.0) -> float:
    return 8.0 if muon else adam_bytes


def _optimizer_bytes(
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
        return sum(n * c * _state(m, a) for n, m, c in dense) + sum(n * c * _state(m, a) for n, m, c in experts)
    if not distopt:
        return max(_ping_pong_runs(((n, _state(m, a), c) for n, m, c in dense), dense_group)) + max(
            _ping_pong_runs(((n, _state(m, a), c) for n, m, c in experts), expert_group)
        )
    adam_side = a * sum(n * c for n, m, c in dense if not m) / dense_group
    adam_side += a * sum(n * c for n, m, c in experts if not m) / expert_group
    return (
        adam_side
        + max(lpt_loads(((n, 8.0) for n, m, c in dense if m for _ in range(c)), dense_group))
        + max(lpt_loads(((n, 8.0) for n, m, c in experts if m for _ in range(c)), expert_group))
    )


@dataclass(frozen=True)
class _StageState:
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
def _stage_state(
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
) -> _StageState:
    """Parameter counts, optimizer bytes, largest Muon matrix and largest FSDP unit of one pipeline stage."""
    dense, experts = _stage_params(tables_id, layers, tp, etp, ep, has_emb, has_loss)
    n_gemm = sum(n * c for n, mu, c in dense if mu) + sum(n * c for n, mu, c in experts if mu)
    opt = _optimizer_bytes(dense, experts, optimizer, distopt, dense_group, expert_group, adam_bytes)
    big = max((n for n, mu, _ in dense + experts if mu), default=0)
    unit = (0, 0)
    for li in layers:  # one FSDP unit per decoder / MTP layer [FSDP]
        d, e = _stage_params(tables_id, (li,), tp, etp, ep, False, False)
        n = sum(x * c for x, _, c in d + e)
        if n > unit[0]:
            unit = (n, sum(x * c for x, mu, c in d + e if mu))
    layer = unit[0]
    vpad_h = _BY_ID[tables_id].spec.padded_vocab_size(tp) * _BY_ID[tables_id].spec.hidden_size // tp
    if (has_emb or has_loss) and vpad_h > unit[0]:  # the embedding / output layer are units of the root module
        unit = (vpad_h, vpad_h)
    tensor = max((n for n, _, _ in dense + experts), default=0)
    return _StageState(
        sum(n * c for n, _, c in dense), sum(n * c for n, _, c in experts), n_gemm, opt, big, unit, tensor, layer
    )


# ---------------------------------------------------------------------------------------------------- entry
def _check(spec: ModelSpec, cfg: MemoryConfig) -> None:
    for name in ("num_gpus", "mbs", "gbs", "tp", "pp", "cp", "ep"):
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise MemoryModelError(f"{name} must be a positive integer, got {value!r}")
    if cfg.num_gpus % (cfg.tp * cfg.pp * cfg.cp):
        raise MemoryModelError(
            f"world size {cfg.num_gpus} is not divisible by TP x PP x CP = {cfg.tp * cfg.pp * cfg.cp}"
        )
    if cfg.num_gpus % (cfg.etp_ * cfg.ep * cfg.pp):
        raise MemoryModelError(
            f"world size {cfg.num_gpus} is not divisible by ETP x EP x PP = {cfg.etp_ * cfg.ep * cfg.pp}"
        )
    if cfg.ep > 1 and (not spec.is_moe or spec.num_moe_experts % cfg.ep):
        raise MemoryModelError(f"num_moe_experts {spec.num_moe_experts} is not divisible by EP {cfg.ep}")
    if cfg.optimizer not in OPTIMIZERS:
        raise MemoryModelError(f"unknown optimizer {cfg.optimizer!r}; the memory model knows {list(OPTIMIZERS)}")
    if cfg.precision not in PRECISION_WEIGHT_EXTRA:
        raise MemoryModelError(f"unknown precision {cfg.precision!r}; known: {sorted(PRECISION_WEIGHT_EXTRA)}")
    if cfg.recompute_granularity not in RECOMPUTE_GRANULARITIES:
        raise MemoryModelError(
            f"recompute_granularity must be one of {list(RECOMPUTE_GRANULARITIES)}, got {cfg.recompute_granularity!r}"
        )
    if cfg.data_parallel_sharding_strategy not in FSDP_STRATEGIES:
        raise MemoryModelError(
            f"data_parallel_sharding_strategy must be one of {list(FSDP_STRATEGIES)}, "
            f"got {cfg.data_parallel_sharding_strategy!r}"
        )
    if cfg.framework not in FRAMEWORKS:
        raise MemoryModelError(f"framework must be one of {list(FRAMEWORKS)}, got {cfg.framework!r}")
    unknown = sorted(set(cfg.offload_modules) - set(OFFLOAD_MODULES))
    if unknown:
        raise MemoryModelError(f"unknown offload_modules {unknown}; known: {list(OFFLOAD_MODULES)}")
    if not 0.0 <= cfg.optimizer_offload_fraction <= 1.0:
        raise MemoryModelError(f"optimizer_offload_fraction must be in [0, 1], got {cfg.optimizer_offload_fraction}")
    if cfg.cpu_offloading_num_layers < 0:
        raise MemoryModelError(f"cpu_offloading_num_layers must be >= 0, got {cfg.cpu_offloading_num_layers}")


def adam_state_bytes(cfg: MemoryConfig) -> float:
    """Adam state bytes per parameter: main weights + two moments (12 B fp32; precision-aware optimizer: the
    configured dtypes) [MLM; PAO]."""
    if not cfg.use_precision_aware_optimizer:
        return 12.0
    return float(
        dtype_bytes(cfg.main_params_dtype) + dtype_bytes(cfg.exp_avg_dtype) + dtype_bytes(cfg.exp_avg_sq_dtype)
    )


def estimate_memory(spec: ModelSpec, cfg: MemoryConfig) -> MemoryBreakdown:
    """Peak memory per GPU on the busiest rank (max over pipeline ranks), in bytes.

    weights: 2 B/param (bf16) [MLM] + quantized copies of GEMM weights [TE]; grads: 4 B/param with
    ``grad_reduce_in_fp32`` (fp32 main-grad buffer), else 2 B [MLM]; optimizer: :func:`_optimizer_bytes` (x (1 -
    ``optimizer_offload_fraction``) with ``optimizer_cpu_offload``). Megatron-FSDP [FSDP]: the sharded terms are
    divided by the shard group (DP x CP; routed experts expert-DP), plus two all-gathered copies of the largest unit
    (the current and the prefetched one, with their quantized copies) and its unsharded gradient (two with
    ``fsdp_double_buffer``). Activations: per-layer bytes per token (:func:`_layer_act_per_token`) x local tokens
    ``s b / CP`` x in-flight microbatches of each virtual chunk (:func:`inflight_microbatches`), plus token ids and
    embedding output ``(8 + 2h) s b`` per in-flight microbatch on the embedding chunk [MLM]; full recompute
    (``uniform``) keeps each layer's input plus one recomputed group of ``recompute_num_layers`` layers' full set
    [ISK], ``block`` recomputes the first ``recompute_num_layers`` layers of each chunk and keeps the rest;
    activation offloading [OFF]: layer-wise, ``cpu_offloading_num_layers`` of the rank's layers (at most all but
    one) leave the GPU (the peak holds the other layers'); fine-grained, the ``offload_modules`` inputs leave the GPU
    and one layer's are staged. Logits (loss stage, one microbatch): ``s b V_pad / t`` x 6 B (4 B with fused CE) per
    output head (1 + MTP layers) + the output-layer input [ISK; MLM uses 4 B (h + V)]; other: ``cfg.other_bytes`` +
    Muon's Newton-Schulz workspace for the largest owned matrix ``2 (2 m n + 2 m^2)`` B bounded with ``m =
    sqrt(numel)`` (research notes Sec. 1.6). ``framework`` ``torchtitan`` / ``deepspeed``: FSDP2, op-level selective
    checkpointing and the upcast loss [TT]; ZeRO-3's per-tensor gathering [DS] (see :class:`MemoryConfig`).

    Raises:
        MemoryModelError: non-positive or non-dividing sizes, unknown optimizer, precision, recompute, FSDP or
            offload setting.
        bridgebench.model.layout.LayoutError: a bad pipeline layout.
    """
    _check(spec, cfg)
    tp, pp, cp, ep = cfg.tp, cfg.pp, cfg.cp, cfg.ep
    etp = cfg.etp_
    tables = model_tables(spec)
    tid = id(tables)
    tokens = (cfg.seq_length or spec.seq_length) * cfg.mbs / cp
    m = cfg.num_microbatches
    sp = cfg.sequence_parallel and tp > 1
    h = spec.hidden_size
    ranks = _ranks(spec, cfg)
    vp_eff = len(ranks[0]) if len(ranks[0]) > 1 else None
    fsdp = cfg.data_parallel_sharding_strategy if cfg.use_megatron_fsdp else "no_shard"
    extra_w = PRECISION_WEIGHT_EXTRA[cfg.precision][1 if cfg.fp8_param_gather else 0]
    q = PRECISION_SAVED_INPUT[cfg.precision]
    grad_b = 4.0 if cfg.grad_reduce_in_fp32 else 2.0
    adam_b = adam_state_bytes(cfg)
    recompute = cfg.recompute_granularity
    mods = tuple(sorted(cfg.recompute_modules or ())) if recompute == "selective" else ()
    offload = tuple(sorted(cfg.offload_modules)) if cfg.fine_grained_activation_offloading else ()
    block = recompute == "full" and cfg.recompute_method == "block"
    group_layers = max(1, cfg.recompute_num_layers or 1)
    vpad = spec.padded_vocab_size(tp)
    lb = LOGITS_BYTES_FUSED if cfg.cross_entropy_loss_fusion else LOGITS_BYTES_UNFUSED
    dense_group, expert_group = cfg.dp * cp, cfg.edp
    distopt = cfg.use_distributed_optimizer or fsdp != "no_shard"
    titan = cfg.framework == "torchtitan"
    zero3 = cfg.framework == "deepspeed" and fsdp == "optim_grads_params"
    op_sac = titan and recompute == "selective"
    if titan:
        lb = LOGITS_BYTES_TORCHTITAN
        extra_w = 0.0  # torchao Float8 casts each GEMM's weight per call; no cached quantized copy
        if fsdp != "no_shard" and cfg.optimizer == "adam":
            adam_b = 8.0  # AdamW moments; the fp32 sharded parameter is its own master copy [TT]

    def per_token(kind: int, granularity: str | None, off: tuple[str, ...] = ()) -> float:
        return _layer_act_per_token(
            tid, kind, tp, etp, sp, granularity, mods, cfg.moe_imbalance, cfg.hidden_dropout, q, off
        )

    best: MemoryBreakdown | None = None
    totals = []
    for r, chunks in enumerate(ranks):
        layers = tuple(li for ch in chunks for li in ch[0])
        has_emb = any(ch[1] for ch in chunks)
        has_loss = any(ch[2] for ch in chunks)
        st = _stage_state(
            tid, layers, tp, etp, ep, has_emb, has_loss, cfg.optimizer, distopt, dense_group, expert_group, adam_b
        )
        sharded = st.n_dense / dense_group + st.n_experts / expert_group
        unit, unit_gemm = st.biggest_unit
        if titan and fsdp == "optim_grads_params":
            # FSDP2 [TT]: fp32 shards. Gathered bf16: the root group (embedding, final norm, output: one all-gather,
            # held from the forward's start and again through the backward, whose last step is the embedding's)
            # with the current and the prefetched block -- or, under PP (reshard_after_forward=False), the stage's
            # whole copy. Unsharded gradients: the output layer's bf16 one (the root reduce-scatters after the
            # whole backward) and one block's bf16 gradient with its fp32 copy for the reduce-scatter (reduce_dtype)
            vpad_h = vpad * h // tp
            root = vpad_h * (int(has_emb) + int(has_loss))
            gathered = st.n_all if pp > 1 else root + 2 * st.biggest_layer
            weights = 4.0 * sharded + 2.0 * gathered
            grads = 4.0 * sharded + 2.0 * vpad_h * int(has_loss) + (2.0 + 4.0) * st.biggest_layer
        elif zero3:
            # ZeRO-3 [DS]: the largest parameter tensor gathered whole, plus what the prefetch bucket adds under the
            # live-parameter cap; unsharded fp16 gradients up to one reduce bucket plus the tensor that overflows it
            big = st.biggest_tensor
            live = big + min(cfg.zero3_prefetch_bucket_size, max(0, cfg.zero3_max_live_parameters - big))
            weights = 2.0 * sharded + (2.0 + extra_w) * live
            grads = grad_b * sharded + 2.0 * (cfg.zero3_reduce_bucket_size + big)
        else:
            if fsdp == "optim_grads_params":
                weights = 2.0 * sharded + 2 * (2.0 * unit + extra_w * unit_gemm)
            else:
                weights = 2.0 * st.n_all + extra_w * st.n_gemm
            if fsdp in ("optim_grads", "optim_grads_params"):
                grads = grad_b * sharded + (2 if cfg.fsdp_double_buffer else 1) * grad_b * unit
            else:
                grads = grad_b * st.n_all
        opt = st.optimizer
        if cfg.optimizer_cpu_offload:
            opt *= 1.0 - cfg.optimizer_offload_fraction
        act = 0.0
        emb_act = 0.0
        recomputed = 0.0
        staged = 0.0  # one layer's offloaded tensors in transit [OFF]
        n_local = sum(len(ch[0]) for ch in chunks)
        for c, (chunk_layers, chunk_emb, _) in enumerate(chunks):
            inflight = inflight_microbatches(pp, r, c, vp_eff, m)
            b = 0.0
            for i, li in enumerate(chunk_layers):
                kind = tables.layer_kinds[li]
                if recompute == "full" and (not block or i < group_layers):
                    b += per_token(kind, "full")
                    recomputed = max(recomputed, per_token(kind, None))
                elif op_sac:
                    b += _op_sac_per_token(tid, kind, tp, sp)
                    recomputed = max(recomputed, per_token(kind, None))
                else:  # not recomputed (a block-method layer past the first N keeps its full set)
                    gran = None if recompute == "full" else recompute
                    b += per_token(kind, gran, offload)
                    if offload:
                        staged = max(staged, per_token(kind, gran) - per_token(kind, gran, offload))
            act += b * tokens * inflight
            if chunk_emb:  # token ids (int64) + embedding output: not a layer's, never offloaded
                emb_act += (8.0 + 2.0 * (h / tp if sp else h)) * tokens * inflight
        if cfg.cpu_offloading and cfg.cpu_offloading_activations and n_local > 1:
            off_layers = min(cfg.cpu_offloading_num_layers, n_local - 1)
            act = act * (n_local - off_layers) / n_local
        act += emb_act
        act += staged * tokens
        if recompute == "full":
            act += recomputed * tokens * (1 if block else group_layers)
        elif op_sac:
            act += recomputed * tokens  # the block being recomputed for its backward
        logits = 0.0
        if has_loss:
            logits = tokens * vpad / tp * lb * (1 + spec.mtp_layers) + 2.0 * h * tokens / (tp if sp else 1)
        other = cfg.other_bytes
        if cfg.optimizer in ("muon", "dist_muon") and st.biggest_matrix:
            big = st.biggest_matrix
            side = math.isqrt(big)
            other += 2.0 * (2 * big + 2 * side * side)
        total = weights + grads + opt + act + logits + other
        totals.append(total)
        if best is None or total > best.total:
            best = MemoryBreakdown(weights, grads, opt, act, logits, other, r)
    return MemoryBreakdown(
        best.weights, best.grads, best.optimizer_state, best.activations, best.logits, best.other, best.stage,
        tuple(totals),
    )  # fmt: skip


def dist_muon_state_by_rank(spec: ModelSpec, cfg: MemoryConfig, stage: int = 0) -> list[float]:
    """Optimizer-state bytes of each DP x CP rank of one pipeline stage under legacy ``dist_muon`` (expert-DP rank
    ``i % EDP``'s expert state added), to compare with a measurement taken on one particular rank (Megatron-LM logs
    memory from the last rank) [MC]."""
    _check(spec, cfg)
    tables = model_tables(spec)
    chunks = _ranks(spec, cfg)[stage]
    layers = tuple(li for ch in chunks for li in ch[0])
    dense, experts = _stage_params(
        id(tables), layers, cfg.tp, cfg.etp_, cfg.ep, any(c[1] for c in chunks), any(c[2] for c in chunks)
    )
    loads = _ping_pong_runs(((n, _state(mu), c) for n, mu, c in dense), cfg.dp * cfg.cp)
    expert_loads = _ping_pong_runs(((n, _state(mu), c) for n, mu, c in experts), cfg.edp)
    return [x + expert_loads[i % len(expert_loads)] for i, x in enumerate(loads)]


def parameter_counts(spec: ModelSpec, cfg: MemoryConfig) -> list[tuple[int, int]]:
    """Per pipeline rank: ``(dense params, routed-expert params)`` on one GPU of that rank (elements), the counts
    behind ``weights`` / ``grads`` (for comparing with Megatron-Bridge's ``parameter_count_per_gpu``)."""
    _check(spec, cfg)
    tables = model_tables(spec)
    out = []
    for chunks in _ranks(spec, cfg):
        layers = tuple(li for ch in chunks for li in ch[0])
        dense, experts = _stage_params(
            id(tables), layers, cfg.tp, cfg.etp_, cfg.ep, any(c[1] for c in chunks), any(c[2] for c in chunks)
        )
        out.append((sum(n * c for n, _, c in dense), sum(n * c for n, _, c in experts)))
    return out
