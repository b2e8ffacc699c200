"""Matrix-multiply work of one transformer layer per microbatch on one GPU, and its time at a shape-dependent
efficiency.

**Shapes.** Each GEMM is listed as it runs on one GPU (``M`` tokens x ``N`` outputs x ``K`` inputs, forward); the
backward runs the data-gradient and weight-gradient GEMMs of the same three sizes, so a GEMM costs ``3 x 2 M N K``
FLOPs per microbatch (Narayanan et al. 2021, arXiv 2104.04473, Appendix). Token counts per GPU: ``T = MBS x s / CP``
enter the tensor-parallel GEMMs (the sequence-parallel shards are all-gathered first); ``T_sp = T / TP`` (sequence
parallel) enter the router and MLA's down-projections (megatron-core 0.19.2 ``transformer/multi_latent_attention.py``:
``linear_q_down_proj`` / ``linear_kv_down_proj`` are TE ``duplicated`` linears on the sequence shard, and their
compressed outputs are all-gathered); column-parallel GEMMs split ``N`` by TP, row-parallel ones ``K``. Routed
experts (balanced routing, as NVIDIA's perf recipes force) get ``T_sp x topk x ETP`` token copies per GPU spread over
its ``E / EP`` local experts: ``M_e = T_sp topk ETP EP / E`` tokens each, ``N`` and ``K`` split by ETP
(megatron-core ``transformer/moe/experts.py`` ``TEGroupedMLP``).

**Efficiency by shape** (a roofline-style saturation law): a GEMM runs at ``e x f(M) f(N) f(K)`` of the tensor-core
peak with ``f(x) = x / (x + x_half)`` -- a dimension much larger than the MMA tile fills the machine, one near the
tile leaves it half idle (tile quantization and the pipeline fill of a short K loop). ``x_half`` is the tile edge
of the architecture (:data:`GEMM_TILE`); ``e`` is the fraction of the datasheet rates the on-GPU work reaches, fitted
per (GPU, precision class) on NVIDIA's published tables (:mod:`bridgebench.model.steptime.fit`).

**Checked against measured GEMMs** (issue 22 item 6; H100 SXM, torch 2.11, ``results/reference/gpu/h100_2026-11-27``;
:mod:`bridgebench.validation.gemm_fit`, ``benchmarks/validate_time.py`` part (g)): with a per-call floor ``t0`` of
the measurement separated (~18-25 us: an eagerly launched, individually timed call; back-to-back training kernels do
not pay it), this law fits 320 transformer-layer GEMM shapes (hidden 1,024-16,384, TP 1-8, 2k / 8k tokens) at mean
|log error| 0.077 (BF16) / 0.079 (FP8) by two-fold cross-validation over hidden sizes; fitting the half-saturation
sizes instead (M 51, N ~1, K 113 BF16 / 357 FP8) gains under 0.01 there and is worse on the grouped expert GEMMs
it was not fitted on (0.22-0.29 against 0.145), so the tile-edge law is kept. A large GEMM runs at 0.76 (BF16) /
0.69 (FP8) of the datasheet peak on that GPU. Blackwell's tile (256) is not measured.

**Attention core** (flash attention, causal, load-balanced CP): forward ``2 x T x (s / 2) x (d_qk + d_v) x heads /
TP`` FLOPs, backward 2.5x the forward (FlashAttention-2/3 recompute ``Q K^T`` in the backward: Dao 2023,
arXiv 2307.08691, Sec. 3.1); it runs in BF16 unless ``fp8_dot_product_attention``; relative to a large GEMM it
reaches :data:`ATTENTION_FWD_EFFICIENCY` forward and :data:`ATTENTION_BWD_EFFICIENCY` backward (FlashAttention-3,
Shah et al. 2024, arXiv 2407.08608, Fig. 5-6: ~640 and ~470 TFLOP/s on H100 BF16, head dim 128, causal, 8k tokens,
against ~750-800 TFLOP/s for large cuBLAS GEMMs).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from bridgebench.model.spec import ModelSpec
from bridgebench.model.steptime import registry
from bridgebench.model.steptime.config import GpuFacts

#: Half-saturation GEMM dimension by CUDA compute-capability major: the CTA tile edge of the architecture's
#: tensor-core GEMMs -- Ampere ``mma.sync`` and Hopper ``wgmma`` kernels tile 128 x 128 / 128 x 256 (CUTLASS 3
#: ``sm90`` default tile shapes), Blackwell ``tcgen05.mma`` 2-CTA MMAs 256 x 256 (PTX ISA 8.7, ``cta_group::2``).
#: First-principles values (no GPU lent to measure GEMMs by shape).
GEMM_TILE = {8: 128, 9: 128, 10: 256, 11: 256, 12: 256}
#: Flash-attention forward / backward rate relative to a large GEMM at the same peak (see the module docstring).
ATTENTION_FWD_EFFICIENCY = 0.85
ATTENTION_BWD_EFFICIENCY = 0.6
#: ``attention_backend="sdpa"`` (not a Megatron-Core value: torch's ``scaled_dot_product_attention`` as torchtitan
#: calls it, torch 2.5-2.6 on Hopper): its default kernel is FlashAttention-2 -- cuDNN attention was made opt-in
#: (pytorch/pytorch#138522) and torch 2.6's SDPA measured 329 TFLOP/s forward against cuDNN's 631 on H100
#: (pytorch/pytorch#142132, head dim 128): 0.52 of the flash rate above; backward FlashAttention-2 / -3 = 322 / 561
#: TFLOP/s (Shah et al. 2024, arXiv 2407.08608, Fig. 6, head dim 128, 16k): 0.57.
SDPA_FWD_EFFICIENCY = ATTENTION_FWD_EFFICIENCY * 329 / 631
SDPA_BWD_EFFICIENCY = ATTENTION_BWD_EFFICIENCY * 322 / 561


def tile_of(gpu: GpuFacts) -> int:
    """The GEMM half-saturation dimension of a GPU (:data:`GEMM_TILE`; 128 when its compute capability is unknown)."""
    cc = gpu.compute_capability
    return GEMM_TILE.get(int(cc), 256 if cc >= 10 else 128) if cc else 128


def shape_factor(m: float, n: float, k: float, tile: float) -> float:
    """``f(M) f(N) f(K)`` with ``f(x) = x / (x + tile)``: the fraction of the peak a GEMM of this shape can reach
    relative to an infinitely large one (dimensionless, in (0, 1))."""
    return (m / (m + tile)) * (n / (n + tile)) * (k / (k + tile))


@dataclass(frozen=True, kw_only=True)
class LayerShape:
    """What fixes a layer's per-GPU shapes: TP, CP, EP, ETP, MBS, sequence parallelism, the GEMM peak key, FP8
    attention, the attention backend and the MoE dispatcher (:attr:`TimeConfig.dispatcher`: which permutations run
    on the GPU). Hashable (cache key)."""

    tp: int
    cp: int
    ep: int
    etp: int
    mbs: int
    sp: bool
    peak_key: str
    fp8_attention: bool = False
    attention_backend: str = "auto"
    dispatcher: str = "alltoall"
    #: the output layer runs at ``peak_key`` (:attr:`~bridgebench.model.steptime.config.TimeConfig
    #: .output_proj_quantized`); else in BF16
    output_proj_quantized: bool = False


#: Megatron-Core ``attention_backend`` values (``transformer/enums.py`` ``AttnBackend``, megatron-core 0.19.2) whose
#: core attention materializes the score matrix: ``local`` (Megatron-Core's own ``DotProductAttention``: baddbmm,
#: ``FusedScaleMaskSoftmax``, dropout, bmm -- what Megatron-LM ran before FlashAttention, Narayanan et al. 2021,
#: Korthikanti et al. 2022) and ``unfused`` (Transformer Engine's ``UnfusedDotProductAttention``, the same steps).
MATERIALIZED_ATTENTION = ("local", "unfused")


#: recompute modules of a layer whose GEMMs run in BF16 whatever the point's precision: the MoE router (Megatron-Core
#: computes it with its own ``router_gating_linear`` in ``moe_router_dtype``, not a Transformer Engine module, so
#: no FP8 autocast reaches it: megatron-core 0.19.2 ``transformer/moe/router.py`` ``Router.gating``;
#: :func:`mlp_gemms`)
BF16_MODULES = frozenset({"router"})


@dataclass(frozen=True, kw_only=True)
class Gemm:
    """One GEMM per microbatch on one GPU (forward shape), ``count`` identical ones (grouped experts), the recompute
    module it belongs to (``attention``, ``mla_up_proj``, ``mlp``, ``router``, ``experts``, ``shared_experts``,
    ``mtp``, ``logits``) and the peak key it runs at."""

    name: str
    module: str
    m: float
    n: float
    k: float
    count: float
    peak_key: str

    @property
    def flops(self) -> float:
        """Forward + backward FLOPs (``3 x 2 M N K x count``)."""
        return 6.0 * self.m * self.n * self.k * self.count


def tokens(spec: ModelSpec, sh: LayerShape) -> tuple[float, float]:
    """(``T``, ``T_sp``): tokens per GPU per microbatch in the tensor-parallel GEMMs and on the sequence shard."""
    t = sh.mbs * spec.seq_length / sh.cp
    return t, (t / sh.tp if sh.sp else t)


def attention_gemms(spec: ModelSpec, sh: LayerShape) -> list[Gemm]:
    """The attention projections of one layer (GQA or MLA), forward shapes on one GPU."""
    t, tsp = tokens(spec, sh)
    h, n, tp, key = spec.hidden_size, spec.num_attention_heads, sh.tp, sh.peak_key
    if spec.multi_latent_attention:
        qk, rope, v = spec.qk_head_dim, spec.qk_pos_emb_head_dim, spec.v_head_dim
        q_rank, kv_rank = spec.q_lora_rank, spec.kv_lora_rank
        # (name, recompute module, m, n, k), one GEMM each
        q: list[tuple[str, str, float, float, float]] = (
            [("q_proj", "attention", t, n * (qk + rope) / tp, h)]
            if q_rank is None
            else [
                ("q_down_proj", "attention", tsp, q_rank, h),
                ("q_up_proj", "mla_up_proj", t, n * (qk + rope) / tp, q_rank),
            ]
        )
        return [
            Gemm(name=name, module=module, m=m, n=n_, k=k, count=1, peak_key=key)
            for name, module, m, n_, k in (
                *q,
                ("kv_down_proj", "attention", tsp, kv_rank + rope, h),
                ("kv_up_proj", "mla_up_proj", t, n * (qk + v) / tp, kv_rank),
                ("proj", "attention", t, h, n * v / tp),
            )
        ]
    d, g = spec.head_dim, spec.query_groups
    gate = n * d if spec.attention_output_gate else 0
    local_kv = max(g / tp, 1.0)  # KV groups are replicated when TP exceeds them
    return [
        Gemm(name="qkv", module="attention", m=t, n=(n * d + gate) / tp + 2 * local_kv * d, k=h, count=1, peak_key=key),
        Gemm(name="proj", module="attention", m=t, n=h, k=n * d / tp, count=1, peak_key=key),
    ]


def mlp_gemms(spec: ModelSpec, sh: LayerShape, moe: bool) -> list[Gemm]:
    """The MLP of one layer: dense fc1/fc2, or router + routed experts + shared expert (forward shapes)."""
    t, tsp = tokens(spec, sh)
    h, glu, key = spec.hidden_size, (2 if spec.gated_linear_unit else 1), sh.peak_key
    if not moe:
        f = spec.ffn_hidden_size
        return [
            Gemm(name="fc1", module="mlp", m=t, n=glu * f / sh.tp, k=h, count=1, peak_key=key),
            Gemm(name="fc2", module="mlp", m=t, n=h, k=f / sh.tp, count=1, peak_key=key),
        ]
    e_num, fe = spec.num_moe_experts or 1, spec.moe_ffn_hidden_size or spec.ffn_hidden_size
    m_e = tsp * spec.moe_router_topk * sh.etp * sh.ep / e_num
    local = e_num / sh.ep
    out = [
        Gemm(name="router", module="router", m=tsp, n=e_num, k=h, count=1, peak_key="bf16"),  # BF16_MODULES
        Gemm(name="experts.fc1", module="experts", m=m_e, n=glu * fe / sh.etp, k=h, count=local, peak_key=key),
        Gemm(name="experts.fc2", module="experts", m=m_e, n=h, k=fe / sh.etp, count=local, peak_key=key),
    ]
    fs = spec.moe_shared_expert_intermediate_size
    if fs:
        out.append(
            Gemm(name="shared.fc1", module="shared_experts", m=t, n=glu * fs / sh.tp, k=h, count=1, peak_key=key)
        )
        out.append(Gemm(name="shared.fc2", module="shared_experts", m=t, n=h, k=fs / sh.tp, count=1, peak_key=key))
    return out


def mtp_gemms(spec: ModelSpec, sh: LayerShape) -> list[Gemm]:
    """An MTP layer's extra projection ``eh_proj`` (``2h -> h``, column parallel); its transformer layer is a layer
    of the last decoder layer's kind and its logits are counted by :func:`logits_gemms`."""
    t, _ = tokens(spec, sh)
    return [
        Gemm(
            name="eh_proj",
            module="mtp",
            m=t,
            n=spec.hidden_size / sh.tp,
            k=2 * spec.hidden_size,
            count=1,
            peak_key=sh.peak_key,
        )
    ]


def logits_gemms(spec: ModelSpec, sh: LayerShape) -> list[Gemm]:
    """The output layer (vocabulary padded for TP, column parallel), once per head: main + MTP heads; in BF16 unless
    ``sh.output_proj_quantized`` (Megatron-Core keeps the output layer out of Transformer Engine's FP8 autocast:
    :attr:`bridgebench.model.steptime.config.TimeConfig.output_proj_quantized`)."""
    t, _ = tokens(spec, sh)
    v = spec.padded_vocab_size(sh.tp) / sh.tp
    return [
        Gemm(
            name="logits",
            module="logits",
            m=t,
            n=v,
            k=spec.hidden_size,
            count=1 + spec.mtp_layers,
            peak_key=sh.peak_key if sh.output_proj_quantized else "bf16",
        )
    ]


def gemm_seconds(gemms: list[Gemm], gpu: GpuFacts) -> dict[str, float]:
    """Forward + backward seconds per recompute module at efficiency 1 (``flops / (peak x shape factor)``)."""
    tile = tile_of(gpu)
    out: dict[str, float] = {}
    for g in gemms:
        out[g.module] = out.get(g.module, 0.0) + g.flops / (gpu.peak(g.peak_key) * shape_factor(g.m, g.n, g.k, tile))
    return out


def attention_core_flops(spec: ModelSpec, sh: LayerShape) -> float:
    """Forward FLOPs of the causal attention core of one layer on one GPU per microbatch (see the module
    docstring; load-balanced CP gives every rank half of the full-sequence keys on average)."""
    t, _ = tokens(spec, sh)
    n = spec.num_attention_heads / sh.tp
    dims = sum(_head_dims(spec))
    return 2.0 * t * (spec.seq_length / 2.0) * dims * n


def attention_core_seconds(spec: ModelSpec, sh: LayerShape, gpu: GpuFacts) -> tuple[float, float]:
    """(forward, backward) seconds of the attention core's matrix work at efficiency 1.

    Flash-style backends: the flash-attention rates relative to a GEMM (torch SDPA's FlashAttention-2 for
    ``sdpa``), at the BF16 peak (FP8 with ``fp8_attention``) and the shape factor of (query chunk, keys), causal
    half of the keys (module docstring).
    Materialized scores (:data:`MATERIALIZED_ATTENTION`): two batched GEMMs per head over the FULL key range (the
    causal mask is applied to the computed scores, nothing is skipped), ``Q K^T`` (``M`` queries, ``N`` keys,
    ``K`` = head dim) and ``P V`` (``M`` queries, ``N`` = head dim, ``K`` keys), at the GEMM shape law; the backward
    runs two GEMMs per forward GEMM (``dQ, dK`` and ``dP, dV``: 2x the forward, no recomputation of ``Q K^T``). Their
    softmax / mask / dropout traffic is :func:`bridgebench.model.steptime.elementwise.score_bytes`."""
    tile = tile_of(gpu)
    q = spec.seq_length / sh.cp
    peak = gpu.peak(sh.peak_key if sh.fp8_attention else "bf16")
    if sh.attention_backend in MATERIALIZED_ATTENTION:
        t, _ = tokens(spec, sh)
        n = spec.num_attention_heads / sh.tp
        dqk, dv = _head_dims(spec)
        s = spec.seq_length
        qk = 2.0 * t * s * dqk * n / shape_factor(q, s, dqk, tile)
        pv = 2.0 * t * s * dv * n / shape_factor(q, dv, s, tile)
        return (qk + pv) / peak, 2.0 * (qk + pv) / peak
    fwd = attention_core_flops(spec, sh)
    f = (q / (q + tile)) * (spec.seq_length / (spec.seq_length + tile))
    sdpa = sh.attention_backend == "sdpa"
    e_fwd, e_bwd = (
        (SDPA_FWD_EFFICIENCY, SDPA_BWD_EFFICIENCY) if sdpa else (ATTENTION_FWD_EFFICIENCY, ATTENTION_BWD_EFFICIENCY)
    )
    return fwd / (peak * f * e_fwd), 2.5 * fwd / (peak * f * e_bwd)


def _head_dims(spec: ModelSpec) -> tuple[float, float]:
    """(query/key head dim, value head dim): MLA's ``qk_head_dim + qk_pos_emb_head_dim`` and ``v_head_dim``, else
    ``head_dim`` both."""
    if spec.multi_latent_attention:
        return spec.qk_head_dim + spec.qk_pos_emb_head_dim, spec.v_head_dim
    return spec.head_dim, spec.head_dim


@lru_cache(maxsize=4096)
def layer_gemm_seconds(sid: int, gid: int, kind: str, sh: LayerShape) -> tuple[tuple[str, float], ...]:
    """Per recompute module, forward + backward GEMM seconds at efficiency 1 of one layer of ``kind`` (``dense``,
    ``moe``, ``mtp_dense``, ``mtp_moe``) or of the ``logits``; the attention core's forward and backward as
    ``core_attn_fwd`` and ``core_attn_bwd``."""
    spec, gpu = registry.get(sid), registry.get(gid)
    if kind == "logits":
        return tuple(gemm_seconds(logits_gemms(spec, sh), gpu).items())
    moe = kind.endswith("moe")
    gemms = attention_gemms(spec, sh) + mlp_gemms(spec, sh, moe)
    if kind.startswith("mtp"):
        gemms += mtp_gemms(spec, sh)
    out = gemm_seconds(gemms, gpu)
    out["core_attn_fwd"], out["core_attn_bwd"] = attention_core_seconds(spec, sh, gpu)
    return tuple(out.items())
