"""Predicted step time of one training point, term by term, and its model TFLOP/s/GPU, release and band.

Per microbatch, each pipeline rank runs its layers (:func:`rank_layers`); per layer (seconds on one GPU):

- ``compute``: GEMMs at a shape-dependent efficiency and the attention core (:mod:`~bridgebench.model.steptime.gemm`),
  the output layer on the loss stage;
- ``elementwise``: HBM-bound work (:mod:`~bridgebench.model.steptime.elementwise`);
- ``tp_comm``: the exposed tensor-parallel collectives (:mod:`~bridgebench.model.steptime.tp_comm`);
- ``cp_comm``: the exposed context-parallel KV exchange (:mod:`~bridgebench.model.steptime.cp_comm`);
- ``ep_a2a``: the exposed MoE dispatch / combine (:mod:`~bridgebench.model.steptime.ep_comm`);
- ``recompute``: the forward work recomputation repeats (:mod:`~bridgebench.model.steptime.recompute`);
- ``overhead``: ``c_layer`` per layer (fitted), plus, per MoE layer whose token dispatch waits on the host
  (:attr:`~bridgebench.model.steptime.config.TimeConfig.host_synced_dispatch`: every dropless dispatcher in its
  default blocking mode), the host work the GPU cannot hide: ``max(0, host / level - t_gpu)`` with ``t_gpu``
  the layer's own seconds on the GPU (:func:`host_exposed`) and ``host = host_moe + host_moe_expert x E_local``
  (:func:`host_seconds`; both fitted: seconds of host work per MoE layer per microbatch, forward and backward, and
  its part per expert the GPU holds, ``E_local = num_moe_experts / EP`` -- Transformer Engine's ``GroupedLinear``
  runs the experts' six forward / backward GEMMs through ``nvte_multi_stream_cublas_gemm``, which launches one cuBLAS
  GEMM per local expert, ``common/gemm/cublaslt_gemm.cu``; later releases deprecate it for a single grouped call).
  The host launches the layer's kernels while the GPU runs the previous ones, until the dispatch needs the
  per-expert token counts: a short layer (a small MoE at MBS 1) is launch-bound, a long one hides the host. After
  that sync the GPU has nothing queued, so the experts' forward launches (:data:`EXPERT_LAUNCH_SHARE` of the
  per-expert part) hide only behind the experts' own forward work: ``max(0, host / level - t_gpu, s x host_expert /
  level - t_experts)`` (since stop 35; a GPU with many small experts waits even inside a long layer).

The busiest rank's per-microbatch time ``t_mb`` sets the pace: ``m x t_mb`` plus the ``bubble`` ``(PP - 1)/VP x
t_mb`` and the exposed stage sends ``pp_p2p`` (:mod:`~bridgebench.model.steptime.pp`), the exposed data-parallel
``dp_comm`` (:mod:`~bridgebench.model.steptime.dp_comm`) and the ``optimizer`` step
(:mod:`~bridgebench.model.steptime.optimizer`). ``total`` is the sum of the terms; ``tflops_per_gpu`` divides the
release's model FLOPs (:func:`bridgebench.model.flops.model_flops`, what NVIDIA's tables divide) by it.

The GEMM and attention rates are scaled by ``e x level``: the calibrated efficiency of the GPU and precision class
and the software level of the point's (model, GPU, precision) group at its release
(:mod:`~bridgebench.model.steptime.release`); the element-wise rate by ``level`` alone (HBM-bound work does not run
at a tensor-core efficiency, but fusions change with releases); communication runs at datasheet bandwidths.
``band_pct`` is the +- relative uncertainty of the prediction (percent): the ~68 % conformal band of its distance
from what was calibrated (:mod:`~bridgebench.model.steptime.bands`; ``band_levels`` at 50 / 68 / 90 %, ``novelty``
the distance, ``band_source`` in words -- ``uncalibrated: nothing of this model/GPU was measured`` where nothing
was), or, with a calibration without conformal bands, its group's held-out root mean square.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from bridgebench.model import memory
from bridgebench.model.flops import model_flops
from bridgebench.model.parallel import ParallelDims
from bridgebench.model.spec import ModelSpec
from bridgebench.model.steptime import cp_comm, dp_comm, ep_comm, pp, recompute, registry, tp_comm
from bridgebench.model.steptime.bands import LEVELS
from bridgebench.model.steptime.calibration import Calibration
from bridgebench.model.steptime.config import TimeConfig, family, group_key
from bridgebench.model.steptime.elementwise import HBM_EFFICIENCY, layer_bytes, score_bytes
from bridgebench.model.steptime.gemm import BF16_MODULES, LayerShape, layer_gemm_seconds
from bridgebench.model.steptime.optimizer import OptimizerStep, optimizer_step
from bridgebench.model.steptime.quantize import quantize_bytes
from bridgebench.model.steptime.release import point_release_index

#: The terms of a step, in report order (seconds per step each; they sum to the step time).
TERMS = (
    "compute",
    "elementwise",
    "tp_comm",
    "cp_comm",
    "ep_a2a",
    "recompute",
    "overhead",
    "bubble",
    "pp_p2p",
    "dp_comm",
    "optimizer",
)

#: the terms a point's layers spend per microbatch (:func:`non_gemm_share`'s denominator).
LAYER_TERMS = ("compute", "elementwise", "tp_comm", "cp_comm", "ep_a2a", "recompute", "overhead")


@dataclass(frozen=True, kw_only=True)
class TimeBreakdown:
    """One point's prediction: ``terms`` (seconds per step per term, :data:`TERMS`), ``flops`` (model FLOPs per
    step, the release's formula), ``num_gpus``, ``band_pct`` (+- relative uncertainty in percent, e.g. 6.3 =
    +-6.3 %: the root mean square of held-out log errors, ``bridgebench.model.steptime.calibration``),
    ``release`` (the release the prediction is for), the on-GPU rate multiplier ``efficiency`` (= calibrated
    efficiency x software level) and where each came from, the optimizer's detail, the busiest pipeline rank, and
    whether the expert group leaves the NVLink domain (``ep_scale_out``)."""

    terms: dict[str, float]
    flops: float
    num_gpus: int
    band_pct: float = 0.0
    release: str = ""
    efficiency: float = 0.0
    efficiency_source: str = ""
    level: float = 1.0
    level_source: str = ""
    band_source: str = ""
    opt: OptimizerStep = field(default_factory=lambda: OptimizerStep(total=0.0))
    busiest_stage: int = 0
    ep_scale_out: bool = False
    band_levels: dict[int, float] = field(default_factory=dict)
    novelty: tuple[str, ...] = ()

    @property
    def total(self) -> float:
        """Step time (s)."""
        return sum(self.terms.values())

    @property
    def tflops_per_gpu(self) -> float:
        """Model TFLOP/s per GPU (model FLOPs only, like NVIDIA's tables)."""
        return self.flops / self.total / self.num_gpus / 1e12

    @property
    def band(self) -> float:
        """``band_pct`` as a fraction (0.063 = +-6.3 %)."""
        return self.band_pct / 100.0


# ---------------------------------------------------------------------------------------------------- structure
@lru_cache(maxsize=8192)
def rank_layers(sid: int, pp_size: int, vp: int | None, layout: str | None) -> tuple[Any, ...]:
    """Per pipeline rank: ((layer kind, count), ...), whether it holds the loss, and its layer count. Kinds:
    ``dense``, ``moe``, ``mtp_dense``, ``mtp_moe`` (megatron-core pipeline assignment:
    :func:`bridgebench.model.memory.stage_chunks`)."""
    spec = registry.get(sid)
    pattern = spec.moe_layer_pattern
    out = []
    for chunks in memory.stage_chunks(spec.num_layers, spec.mtp_layers, pp_size, vp, layout):
        counts: dict[str, int] = {}
        loss = False
        n = 0
        for layers, _, has_loss in chunks:
            loss = loss or has_loss
            for li in layers:
                if li < spec.num_layers:
                    kind = "moe" if pattern[li] else "dense"
                else:
                    kind = "mtp_moe" if pattern[-1] else "mtp_dense"
                counts[kind] = counts.get(kind, 0) + 1
                n += 1
        out.append((tuple(sorted(counts.items())), loss, n))
    return tuple(out)


@lru_cache(maxsize=8192)
def step_flops_of(sid: int, gbs: int, tp: int, formula: str) -> float:
    return float(model_flops(registry.get(sid), gbs, tensor_model_parallel_size=tp, formula=formula).total)


@lru_cache(maxsize=8192)
def local_params(
    sid: int, tp: int, pp_size: int, vp: int | None, ep: int, etp: int, layout: str | None
) -> tuple[Any, ...]:
    """(dense params, routed-expert params) on one GPU of each pipeline rank (elements)."""
    spec = registry.get(sid)
    dims = ParallelDims(num_gpus=tp * pp_size * ep * etp, mbs=1, gbs=1, tp=tp, pp=pp_size, vp=vp, ep=ep, etp=etp)
    cfg = memory.MemoryConfig(dims=dims, pipeline_model_parallel_layout=layout)
    return tuple(memory.parameter_counts(spec, cfg))


def layer_shape(cfg: TimeConfig) -> LayerShape:
    return LayerShape(
        tp=cfg.tp,
        cp=cfg.cp,
        ep=cfg.ep,
        etp=cfg.etp_,
        mbs=cfg.mbs,
        sp=cfg.sp,
        peak_key=cfg.peak_key,
        fp8_attention=cfg.fp8_dot_product_attention,
        attention_backend=cfg.attention_backend,
        dispatcher=cfg.dispatcher,
        output_proj_quantized=cfg.output_proj_quantized,
    )


def _layer(
    sid: int,
    gid: int,
    kind: str,
    sh: LayerShape,
    cfg: TimeConfig,
    rate: float,
    hbm: float,
    bf16_gain: float = 1.0,
) -> dict[str, Any]:
    """Seconds per microbatch of one layer of ``kind`` by term, at GEMM rate multiplier ``rate``, ``rate x
    bf16_gain`` for its BF16 work in a low-precision point (the attention core unless FP8, the modules of
    :data:`~bridgebench.model.steptime.gemm.BF16_MODULES`;
    :meth:`~bridgebench.model.steptime.calibration.Calibration.bf16_gain`) and effective element-wise bandwidth
    ``hbm`` (bytes/s)."""
    gem = dict(layer_gemm_seconds(sid, gid, kind, sh))
    score_f, score_b = score_bytes(sid, sh)
    attn_rate = rate if sh.fp8_attention else rate * bf16_gain
    attn_f = gem.pop("core_attn_fwd") / attn_rate + score_f / hbm
    attn_b = gem.pop("core_attn_bwd") / attn_rate + score_b / hbm
    gem = {k: v / (rate * bf16_gain if k in BF16_MODULES else rate) for k, v in gem.items()}
    elem = {k: b / hbm for k, b in layer_bytes(sid, kind, sh)}
    q_fwd, q_bwd = quantize_bytes(sid, kind, sh)
    elem["quantize"] = (q_fwd + q_bwd) / hbm
    placed = cfg.placement
    blocks = tp_comm.layer_blocks(sid, gid, kind, sh, placed.group("tp").crosses)
    tp_x = tp_comm.exposed(blocks, rate, cfg.tp_comm_overlap and sh.sp)
    cp_terms = cp_comm.layer_terms(sid, gid, sh, cfg.cp_comm_type or "p2p", placed.group("cp"))
    cp_x = cp_comm.exposed(cp_terms, attn_f, attn_b, sh.cp)
    compute = sum(gem.values()) + attn_f + attn_b
    ep_x = ep_fwd = 0.0
    scale_out = False
    if kind.endswith("moe"):
        ex = ep_comm.layer_exchange(sid, gid, sh, cfg.dispatcher, placed.group("ep"))
        shared = gem.get("shared_experts", 0.0) / 3
        ep_x = ep_comm.exposed(ex, compute, shared, cfg.overlap_moe_expert_parallel_comm, cfg.moe_shared_expert_overlap)
        ep_fwd, scale_out = ex.seconds / 2, ex.scale_out
    rec = recompute.layer_seconds(
        cfg,
        {k: v / 3 for k, v in gem.items()},
        attn_f,
        {k: (q_fwd / hbm if k == "quantize" else v / 3) for k, v in elem.items()},
        tp_comm.forward_share(blocks, sh.sp),
        ep_fwd,
    )
    return {
        "compute": compute,
        "elementwise": sum(elem.values()),
        "tp_comm": tp_x,
        "cp_comm": cp_x,
        "ep_a2a": ep_x,
        "recompute": rec,
        "scale_out": scale_out,
        "experts_fwd": (gem.get("experts", 0.0) + elem.get("moe_act", 0.0)) / 3 if kind.endswith("moe") else 0.0,
    }


#: the per-layer terms that run on the GPU (what hides the host's launches).
GPU_TERMS = ("compute", "elementwise", "tp_comm", "cp_comm", "ep_a2a", "recompute")
#: Share of a MoE layer's per-expert host work (``host_moe_expert x E_local``) launched after the dropless dispatch's
#: host sync in the forward pass: each local expert's fc1 and fc2 forward GEMMs, 2 of its 6 forward + backward GEMMs
#: (the backward runs the dgrad and wgrad of both), one cuBLAS launch per expert in Transformer Engine's multi-stream
#: grouped GEMM (module docstring). A count, not fitted; it is also the best of 1/3, 1/2 and 1 by the calibration's
#: criterion (leave-one-release-out MAPE 4.6 / 4.7 / 4.9 %, ``benchmarks/constant_scan.py``, docs/sweeps.md stop 35).
EXPERT_LAUNCH_SHARE = 2 / 6


def host_seconds(spec: ModelSpec, cfg: TimeConfig, host_moe: float, host_moe_expert: float) -> float:
    """Seconds of host work per MoE layer per microbatch at level 1: ``host_moe + host_moe_expert x E_local``,
    ``E_local = num_moe_experts / EP`` the experts one GPU holds (module docstring: Transformer Engine's multi-stream
    cuBLAS grouped GEMM launches a GEMM per local expert)."""
    return float(host_moe + expert_host_seconds(spec, cfg, host_moe_expert))


def expert_host_seconds(spec: ModelSpec, cfg: TimeConfig, host_moe_expert: float) -> float:
    """The per-expert part of :func:`host_seconds`: ``host_moe_expert x E_local`` (s per MoE layer per microbatch at
    level 1, forward and backward)."""
    return float(host_moe_expert * max(1, spec.local_experts(cfg.ep)))


def host_exposed(
    kinds: tuple[tuple[str, int], ...],
    per_kind: dict[str, dict[str, Any]],
    cfg: TimeConfig,
    host: float,
    level: float,
    expert_host: float = 0.0,
) -> float:
    """Seconds per microbatch one pipeline rank waits on the host: for each MoE layer (``kinds``: (kind, count)
    pairs; ``per_kind``: the layer terms of :func:`_layer`) whose dispatch synchronises with the host
    (``cfg.host_synced_dispatch``), ``max(0, host / level - t_gpu, s x expert_host / level - t_experts)``:
    ``t_gpu`` the layer's :data:`GPU_TERMS`, ``expert_host`` the per-expert part of ``host``
    (:func:`expert_host_seconds`), ``s`` = :data:`EXPERT_LAUNCH_SHARE` and ``t_experts`` the experts' forward GEMMs
    and activation (``experts_fwd`` of :func:`_layer`, seconds at the point's rates).

    The dropless dispatchers copy the per-expert token counts to the host before they permute (megatron-core 0.19.2
    ``transformer/moe/token_dispatcher.py``: ``MoEAlltoAllTokenDispatcher`` syncs at ``cuda_sync_point`` unless it
    drops and pads; the flex dispatcher's DeepEP / HybridEP return the received counts to the host unless run
    non-blocking with a fixed capacity), so the host cannot run ahead of the GPU across that layer: the layer takes
    at least the host's time to launch it. ``host`` is fitted (:func:`bridgebench.model.steptime.fit.calibrate`) and
    scales with the software level like the element-wise rate (fewer, fused kernels and CUDA graphs in later releases).

    The second bound is the sync's own: when the host learns the counts, the GPU has run everything launched before
    them, so the experts' per-expert forward launches (one GEMM per local expert and GEMM) can hide only behind the
    experts' own forward work. A GPU holding many small experts (DeepSeek V3 at EP 8: 32 per GPU) idles there
    however long the rest of its layer is; with few experts per GPU the first bound decides, as before stop 35.
    """
    if host <= 0 or not cfg.host_synced_dispatch:
        return 0.0
    out = 0.0
    for kind, count in kinds:
        if kind.endswith("moe"):
            t_gpu = sum(per_kind[kind][k] for k in GPU_TERMS)
            after_sync = EXPERT_LAUNCH_SHARE * expert_host / level - per_kind[kind]["experts_fwd"]
            out += count * max(0.0, host / level - t_gpu, after_sync)
    return out


def evaluate(
    spec: ModelSpec,
    cfg: TimeConfig,
    rate: float,
    c_layer: float,
    kappa: float,
    ns_efficiency: float,
    elem_rate: float | None = None,
    host_moe: float = 0.0,
    host_moe_expert: float = 0.0,
    *,
    bf16_gain: float = 1.0,
) -> tuple[dict[str, float], OptimizerStep, int, bool]:
    """The terms of one point at GEMM rate multiplier ``rate`` (fraction of the tensor-core peaks, after the shape
    law; ``rate x bf16_gain`` for the BF16 work of a low-precision point: :func:`_layer`, the output layer unless
    quantized) and element-wise rate multiplier ``elem_rate`` (fraction of HBM bandwidth x :data:`HBM_EFFICIENCY`;
    default ``rate``; the software level), with ``host_moe`` seconds of host work per MoE layer per microbatch at
    level 1 and ``host_moe_expert`` more per local expert (:func:`host_seconds`, :func:`host_exposed`), see the
    module docstring: (terms, optimizer detail, busiest rank, EP leaves the
    NVLink domain).

    Raises:
        TimeModelError: no peak for the precision on this GPU, an unknown optimizer or dispatcher.
        bridgebench.model.newton_schulz.NSError: parallel sizes that do not fit (Muon).
        bridgebench.model.layout.LayoutError: a pipeline layout outside Megatron-Core's grammar.
    """
    sid, gid = registry.handle(spec), registry.handle(cfg.gpu)
    sh = layer_shape(cfg)
    hbm = cfg.gpu.hbm_bandwidth * HBM_EFFICIENCY * (rate if elem_rate is None else elem_rate)
    share = recompute.share_of_layers(spec, cfg) if cfg.recompute_granularity == "full" else 1.0
    host = host_seconds(spec, cfg, host_moe, host_moe_expert)
    expert_host = expert_host_seconds(spec, cfg, host_moe_expert)
    per_kind: dict[str, dict[str, Any]] = {}
    best: tuple[float, int, dict[str, Any]] | None = None
    scale_out = False
    for r, (kinds, loss, n_layers) in enumerate(rank_layers(sid, cfg.pp, cfg.vp, cfg.pipeline_model_parallel_layout)):
        acc = dict.fromkeys(("compute", "elementwise", "tp_comm", "cp_comm", "ep_a2a", "recompute"), 0.0)
        for kind, count in kinds:
            if kind not in per_kind:
                per_kind[kind] = _layer(sid, gid, kind, sh, cfg, rate, hbm, bf16_gain)
            lay = per_kind[kind]
            scale_out = scale_out or lay["scale_out"]
            for key in acc:
                acc[key] += count * lay[key] * (share if key == "recompute" else 1.0)
        if loss:
            logits_rate = rate if sh.output_proj_quantized else rate * bf16_gain
            acc["compute"] += sum(v for _, v in layer_gemm_seconds(sid, gid, "logits", sh)) / logits_rate
            acc["elementwise"] += sum(b for _, b in layer_bytes(sid, "logits", sh)) / hbm
        acc["overhead"] = c_layer * n_layers + host_exposed(kinds, per_kind, cfg, host, elem_rate or rate, expert_host)
        t_mb = sum(acc.values())
        if best is None or t_mb > best[0]:
            best = (t_mb, r, acc)
    assert best is not None
    t_mb, rank, acc = best
    m = cfg.num_microbatches
    terms = {k: m * v for k, v in acc.items()}
    terms["bubble"] = pp.bubble(t_mb, cfg)
    terms["pp_p2p"] = pp.p2p_seconds(spec, cfg)
    per_stage = local_params(sid, cfg.tp, cfg.pp, cfg.vp, cfg.ep, cfg.etp_, cfg.pipeline_model_parallel_layout)
    on_gpu = acc["compute"] + acc["elementwise"] + acc["recompute"]
    dense, expert = max(per_stage, key=lambda x: x[0] + x[1])
    terms["dp_comm"] = dp_comm.dp_comm(cfg, dense, expert, on_gpu * 2 / 3, on_gpu / 3, t_mb).exposed
    opt = optimizer_step(spec, cfg, per_stage, kappa, ns_efficiency, on_gpu / 3)
    terms["optimizer"] = opt.total
    return {k: terms[k] for k in TERMS}, opt, rank, scale_out


def non_gemm_share(spec: ModelSpec, cfg: TimeConfig, rate: float, calib: Calibration) -> float:
    """The share of a point's layer work (dimensionless, in [0, 1)) that is not a tensor-core GEMM: the exposed EP
    all-to-all (``ep_a2a``), the launch and host overhead (``overhead``) and the HBM-bound element-wise work
    (``elementwise``), over the layers' terms (those and ``compute``, ``recompute``, ``tp_comm``, ``cp_comm``; not
    the pipeline bubble and sends, the data-parallel exposure or the optimizer step, which a data-parallel framework
    or the number of GPUs changes for the same layers), at GEMM rate multiplier ``rate``, software level 1 and
    ``calib``'s ``c_layer``, host and Muon constants (:func:`evaluate`). It is what the level of an unpublished
    model is read from (:meth:`bridgebench.model.steptime.calibration.Calibration.share_level`): on NVIDIA's
    published rows the log level falls with it (the element-wise fusions, small kernels and synchronisations of a
    release are what the configuration physics prices least well).

    Raises:
        The errors of :func:`evaluate`.
    """
    c, gain = calib, bf16_gain_of(cfg, calib)
    terms = evaluate(
        spec, cfg, rate, c.c_layer, c.kappa, c.ns_efficiency, 1.0, c.host_moe, c.host_moe_expert, bf16_gain=gain
    )[0]
    layers = sum(terms[k] for k in LAYER_TERMS)
    return (terms["ep_a2a"] + terms["overhead"] + terms["elementwise"]) / layers if layers > 0 else 0.0


def bf16_gain_of(cfg: TimeConfig, calib: Calibration) -> float:
    """The point's BF16 work's rate over its GEMMs' rate (:meth:`Calibration.bf16_gain` of its GPU and class)."""
    return calib.bf16_gain(cfg.gpu.name, cfg.precision_class, lambda c: cfg.gpu.peak_tflops.get(c))


def rates(spec: ModelSpec, cfg: TimeConfig, calib: Calibration) -> tuple[float, float, str, str]:
    """(GEMM rate multiplier ``e x level``, element-wise multiplier ``level``, efficiency source, level source) of
    a point under a calibration. A model with no published group (level source ``family mean``) takes the level
    of its non-GEMM share (:func:`non_gemm_share`, :meth:`Calibration.share_level`; source ``non-GEMM share``)
    where the calibration has that fit."""
    eff, eff_src = calib.efficiency_of(cfg.gpu.name, cfg.precision_class, lambda c: cfg.gpu.peak_tflops.get(c))
    log_level, level_src = calib.log_level(group_key(spec, cfg), family(spec), point_release_index(cfg))
    if level_src == "family mean" and calib.level_share is not None:
        log_level, level_src = calib.share_level(non_gemm_share(spec, cfg, eff, calib)), "non-GEMM share"
    level = math.exp(log_level)
    return eff * level, level, eff_src, level_src


def layer_time(spec: ModelSpec, cfg: TimeConfig, calib: Calibration, kind: str = "dense") -> dict[str, float]:
    """Seconds of one layer of ``kind`` (``dense``, ``moe``) per microbatch by term (``compute``, ``elementwise``,
    ``tp_comm``, ``cp_comm``, ``ep_a2a``, ``recompute``) at the point's calibrated rates (a per-layer measurement,
    e.g. Korthikanti et al. 2022 Table 4, compares with their sum)."""
    rate, level, _, _ = rates(spec, cfg, calib)
    hbm = cfg.gpu.hbm_bandwidth * HBM_EFFICIENCY * level
    sh = layer_shape(cfg)
    out = _layer(registry.handle(spec), registry.handle(cfg.gpu), kind, sh, cfg, rate, hbm, bf16_gain_of(cfg, calib))
    return {k: out[k] for k in GPU_TERMS}


def predict_time(spec: ModelSpec, cfg: TimeConfig, calib: Calibration) -> TimeBreakdown:
    """Predicted step time (s) by term, model TFLOP/s/GPU, band and release of one point (module docstring).

    Raises:
        TimeModelError: no peak for the precision on this GPU, or an unknown optimizer / dispatcher.
        bridgebench.model.newton_schulz.NSError: parallel sizes that do not fit (Muon).
    """
    pclass = cfg.precision_class
    key = group_key(spec, cfg)
    rate, level, eff_src, level_src = rates(spec, cfg, calib)
    terms, opt, rank, scale_out = evaluate(
        spec,
        cfg,
        rate,
        calib.c_layer,
        calib.kappa,
        calib.ns_efficiency,
        level,
        host_moe=calib.host_moe,
        host_moe_expert=calib.host_moe_expert,
        bf16_gain=bf16_gain_of(cfg, calib),
    )
    levels: dict[int, float] = {}
    novelty: tuple[str, ...] = ()
    if calib.conformal is not None:
        band, band_src, novelty = calib.conformal.band(spec, cfg)
        levels = {lv: round(100.0 * calib.conformal.half_width(novelty, lv), 6) for lv in LEVELS}
    else:
        band, band_src = calib.band(key, cfg.gpu.name, pclass)
    band = round(band * 100.0, 6)  # percent
    flops = step_flops_of(registry.handle(spec), cfg.gbs, cfg.tp, cfg.flops_formula)
    release = cfg.release or ("unspecified: group mean level" if level_src == "group" else "unspecified")
    return TimeBreakdown(
        terms=terms,
        flops=flops,
        num_gpus=cfg.num_gpus,
        band_pct=band,
        release=release,
        efficiency=rate,
        efficiency_source=eff_src,
        level=level,
        level_source=level_src,
        band_source=band_src,
        opt=opt,
        busiest_stage=rank,
        ep_scale_out=scale_out,
        band_levels=levels,
        novelty=novelty,
    )
