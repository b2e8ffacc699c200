"""Stages 3 and 4 of a sweep: memory per GPU on the busiest rank (:func:`score_memory`,
:func:`bridgebench.model.memory.estimate_memory`; pruned above the GPU's HBM less the measured fragmentation
margin) and the predicted step time (:func:`score_time`, :func:`bridgebench.model.steptime.predict.predict_time`)."""

from __future__ import annotations

import json
from typing import Any, Callable, Sequence

from bridgebench.config.calibration import ModelCalibration
from bridgebench.config.time_knobs import shown_knobs, time_knobs
from bridgebench.model import memory as mem
from bridgebench.model import placement as pl
from bridgebench.model.layout import LayoutError, PipelineSplit, split_layout
from bridgebench.model.newton_schulz import NSError, NSPolicy, muon_matrices, ns_flops
from bridgebench.model.optimizer import OptimizerKind
from bridgebench.model.parallel import ParallelDims
from bridgebench.model.spec import ModelSpec
from bridgebench.model.steptime.config import GpuFacts, TimeConfig, TimeModelError
from bridgebench.model.steptime.predict import predict_time
from bridgebench.sweep.bases import Base, arch_spec, effective


# ---------------------------------------------------------------------------------------------------- stage 2, 3
def grad_reduce_in_fp32(v: dict[str, Any]) -> bool:
    """FP32 gradient buffers: ``mixed_precision.grad_reduce_in_fp32``, which Megatron-Bridge 0.6.2 copies over
    ``ddp.grad_reduce_in_fp32`` (``training/mixed_precision.py::MixedPrecisionConfig.setup`` ->
    ``update_config_with_precision_overrides``); the DDP value only where the mixed-precision one is unset."""
    mp = v["mp_grad_reduce_in_fp32"]
    return bool(v["ddp_grad_reduce_in_fp32"] if mp is None else mp)


def hbm_capacity(v: dict[str, Any], base: Base, calib: ModelCalibration) -> float:
    """Bytes of memory the GPU has: what the driver reports (``gpu.hbm_total_mib``, ``nvidia-smi``) where the GPU's
    config records it, else the datasheet's ``hbm_gb`` x ``datasheet_gb_bytes`` (``configs/calibration``: NVIDIA's
    "GB" are about GiB)."""
    mib = v["hbm_total_mib"]
    return float(mib) * 2**20 if mib else base.gpu.hbm_bytes / 1e9 * calib.datasheet_gb_bytes


def expandable_segments(v: dict[str, Any]) -> bool:
    """``PYTORCH_CUDA_ALLOC_CONF`` of the run's environment sets ``expandable_segments:True``."""
    conf = str(v["alloc_conf"] or "").replace(" ", "").lower()
    return "expandable_segments:true" in conf


def recompute_modules(v: dict[str, Any]) -> tuple[str, ...]:
    """The modules a point recomputes: its ``model.recompute_modules``, or Megatron-Core's default ``["core_attn"]``
    (``TransformerConfig.recompute_modules``, megatron-core 0.19.2) when granularity is selective and none are set."""
    mods = v["recompute_modules"]
    if v["recompute_granularity"] == "selective" and mods is None:
        mods = ["core_attn"]
    return tuple(mods or ())


def memory_config(v: dict[str, Any], calib: ModelCalibration) -> mem.MemoryConfig:
    """The memory model's view of a point's effective values (see :func:`effective`): parallelism, the pipeline
    split, optimizer and its dtypes, precision, recompute, Megatron-FSDP, activation / optimizer offloading."""
    granularity = v["recompute_granularity"]
    mods = recompute_modules(v)
    fine = bool(v["fine_grained_offloading"])
    return mem.MemoryConfig(
        dims=ParallelDims.from_row(v),
        seq_length=v["seq_length"],
        sequence_parallel=bool(v["sequence_parallel"]),
        pipeline_model_parallel_layout=v["layout"],
        optimizer=v["optimizer"],
        use_distributed_optimizer=bool(v["use_distributed_optimizer"]),
        precision=v["precision"],
        fp8_param_gather=bool(v["fp8_param_gather"]),
        grad_reduce_in_fp32=grad_reduce_in_fp32(v),
        recompute_granularity=granularity,
        recompute_method=v["recompute_method"],
        recompute_num_layers=v["recompute_num_layers"],
        recompute_modules=mods,
        cross_entropy_loss_fusion=bool(v["ce_fusion"]),
        moe_imbalance=calib.moe_imbalance,
        other_bytes=calib.other_bytes,
        num_layers_in_first_pipeline_stage=v["first_stage_layers"],
        num_layers_in_last_pipeline_stage=v["last_stage_layers"],
        account_for_embedding_in_pipeline_split=bool(v["account_embedding"]),
        account_for_loss_in_pipeline_split=bool(v["account_loss"]),
        use_megatron_fsdp=bool(v["use_megatron_fsdp"]),
        data_parallel_sharding_strategy=str(v["fsdp_strategy"] or "no_shard"),
        fsdp_double_buffer=bool(v["fsdp_double_buffer"]),
        use_precision_aware_optimizer=bool(v["precision_aware_optimizer"]),
        main_params_dtype=v["main_params_dtype"],
        exp_avg_dtype=v["exp_avg_dtype"],
        exp_avg_sq_dtype=v["exp_avg_sq_dtype"],
        optimizer_cpu_offload=bool(v["optimizer_cpu_offload"]),
        optimizer_offload_fraction=float(v["optimizer_offload_fraction"] or 0.0),
        cpu_offloading=bool(v["cpu_offloading"]),
        cpu_offloading_num_layers=int(v["cpu_offloading_num_layers"] or 0),
        cpu_offloading_activations=v["cpu_offloading_activations"] is not False,
        fine_grained_activation_offloading=fine,
        offload_modules=tuple(v["offload_modules"] or ()) if fine else (),
        framework=str(v["framework"] or "megatron"),
    )


def time_config(v: dict[str, Any], gpu: GpuFacts, spec: ModelSpec | None = None) -> TimeConfig:
    """The time model's view of a point's effective values (knobs: :func:`bridgebench.config.time_knobs.time_knobs`).
    With the point's ``spec``, a pipeline split given without a layout string (uneven first / last stage, embedding
    and loss counted as layers) reaches the time model as the layout string that builds the same stages
    (:func:`bridgebench.model.layout.split_layout`; the time model reads only a layout); without it such a split is
    priced as the even split with the remainder on the earliest stages."""
    granularity = v["recompute_granularity"]
    mods = recompute_modules(v)
    layout = v["layout"]
    if spec is not None and not layout and isinstance(v["pp"], int) and v["pp"] > 1:
        split = PipelineSplit(
            first_stage_layers=v["first_stage_layers"],
            last_stage_layers=v["last_stage_layers"],
            account_for_embedding=bool(v["account_embedding"]),
            account_for_loss=bool(v["account_loss"]),
        )
        layout = split_layout(spec.num_layers, v["pp"], v["vp"], spec.mtp_layers, split)
    return TimeConfig(
        gpu=gpu,
        peak_key=v["peak_key"],
        dims=ParallelDims.from_row(v),
        pipeline_model_parallel_layout=layout,
        optimizer=v["optimizer"],
        ns_policy=ns_policy(v),
        flops_formula=v["flops_formula"] or "v2",
        sequence_parallel=bool(v["sequence_parallel"]),
        recompute_granularity=granularity,
        recompute_method=v["recompute_method"],
        recompute_num_layers=v["recompute_num_layers"],
        recompute_modules=mods,
        **time_knobs(v),
    )


def placement_columns(cfg: TimeConfig, spec: ModelSpec, dispatcher: str) -> dict[str, Any]:
    """Where a point's ranks land (:attr:`bridgebench.model.steptime.config.TimeConfig.placement`): ``domain_gpus``
    (consecutive ranks per NVLink domain as the scheduler fills them), ``segment_nodes`` (``sbatch --segment``,
    None = none), ``ep_domains`` (most domains one EP group touches), ``ep_split`` (its members per domain, e.g.
    ``48/16``), ``ep_cross_copies`` (copies of a token leaving the sender's domain, worst rank,
    :func:`bridgebench.model.placement.cross_domain_copies` for the dispatcher that runs) and ``groups_crossing``
    (the group kinds some group of which spans domains, e.g. ``pp,dp_cp``)."""
    placed = cfg.placement
    ep = placed.group("ep")
    worst = max(ep.splits, key=len)
    topk = spec.moe_router_topk if spec.is_moe else 0
    return {
        "domain_gpus": placed.domain_gpus,
        "segment_nodes": placed.segment,
        "ep_domains": ep.domains,
        "ep_split": "/".join(str(m) for m in worst),
        "ep_cross_copies": pl.cross_domain_copies(
            ep, topk, dispatcher, spec.moe_router_num_groups, spec.moe_router_group_topk
        )
        if spec.is_moe
        else 0.0,
        "groups_crossing": ",".join(g.kind for g in placed.groups if g.crosses and g.size > 1) or None,
    }


def placement_json(cfg: TimeConfig, spec: ModelSpec) -> dict[str, Any]:
    """``predict --json`` ``placement``: the domains, the segment, and per group kind its size, stride, domains
    touched and member splits, with the EP group's cross-domain copies per token (:func:`placement_columns`)."""
    placed = cfg.placement
    return {
        "domain_gpus": placed.domain_gpus,
        "domains": placed.domains,
        "segment_nodes": placed.segment,
        "segment_policy": cfg.gpu.segment_policy,
        "groups": {g.kind: g.as_dict() for g in placed.groups},
        "ep_cross_domain_copies_per_token": placement_columns(cfg, spec, cfg.dispatcher)["ep_cross_copies"],
        "dispatcher": cfg.dispatcher if spec.is_moe else None,
    }


def ns_policy(v: dict[str, Any]) -> NSPolicy:
    """Newton-Schulz policy of a point (``optimizer.muon_*``, ``accounting.ns_kernel``)."""
    return NSPolicy(
        num_ns_steps=int(v["ns_steps"] or 5),
        kernel=v["ns_kernel"] or "gemm",
        tp_mode=v["muon_tp_mode"] or "blockwise",
        layer_wise=OptimizerKind(name=str(v["optimizer"])).layer_wise,
        split_qkv=True if v["muon_split_qkv"] is None else bool(v["muon_split_qkv"]),
    )


def _point_state(base: Base, row: dict[str, Any], cache: dict) -> tuple[ModelSpec, dict[str, Any]]:
    delta = json.loads(row["delta"])
    spec = arch_spec(base, delta, cache)
    return (base.spec if isinstance(spec, Exception) else spec), effective(base, delta)


def _optstep_subset(spec: ModelSpec, layers: int, experts: int, split_qkv: bool) -> list:
    """The matrices of the optimizer-step benchmark's subset: the first ``layers`` dense and MoE layers, the first
    ``experts`` routed experts of each MoE layer, no MTP (mirrors ``bridgebench.payloads.optstep.select_matrices``)."""
    pattern = spec.moe_layer_pattern
    chosen = set(
        [i for i, moe in enumerate(pattern) if not moe][:layers] + [i for i, m in enumerate(pattern) if m][:layers]
    )
    out = []
    for m in muon_matrices(spec, split_qkv=split_qkv):
        if m.layer not in chosen:
            continue
        if m.is_expert and int(m.name.rsplit("weight", 1)[1]) >= experts:
            continue
        out.append(m)
    return out


#: bytes per element the optimizer-step benchmark keeps per matrix element: fp32 param, grad, Muon momentum and
#: AdamW's two moments (``bridgebench.payloads.optstep`` steps both optimizers on the same fp32 tensors).
OPTSTEP_BYTES_PER_ELEMENT = 4.0 * 5


def score_memory(
    rows: list[dict[str, Any]],
    bases: Sequence[Base],
    calib: ModelCalibration,
    progress: Callable[[int, int], None] | None = None,
) -> list[dict[str, Any]]:
    """Stage 3 (in place): memory per GPU of every ``valid`` row (GB = 1e9 B columns ``mem_*_gb``,
    ``mem_total_gb``, ``hbm_gb`` (:func:`hbm_capacity`), ``hbm_usable_gb``, busiest pipeline rank ``mem_stage``);
    rows whose predicted peak times the lowest measured allocator fragmentation (reserved over allocated,
    ``configs/calibration``) exceeds the GPU's memory become ``over_memory`` with the numbers in ``reason``; the
    others ``fits``, flagged ``tight`` when the median measured fragmentation would not fit and the run does not
    use expandable segments (:func:`expandable_segments`)."""
    todo = [r for r in rows if r["status"] == "valid"]
    cache: dict = {}
    for i, row in enumerate(todo, 1):
        base = bases[row["base"]]
        spec, v = _point_state(base, row, cache)
        capacity, expandable = hbm_capacity(v, base, calib), expandable_segments(v)
        usable = calib.usable_hbm_bytes(capacity)
        row["hbm_gb"] = capacity / 1e9
        row["hbm_usable_gb"] = usable / 1e9
        row["expandable_segments"] = expandable
        if v["job_type"] == "optstep":
            mats = _optstep_subset(spec, v["job_layers"], v["job_experts"], ns_policy(v).split_qkv)
            numel = sum(m.rows * m.cols for m in mats)
            biggest = max((m.rows * m.cols for m in mats), default=0)
            total = OPTSTEP_BYTES_PER_ELEMENT * numel + 4.0 * 3 * biggest + calib.other_bytes  # + NS workspace
            row.update(mem_total_gb=total / 1e9, mem_weights_gb=4.0 * numel / 1e9)
        else:
            try:
                b = mem.estimate_memory(spec, memory_config(v, calib))
            except (mem.MemoryModelError, LayoutError) as err:
                row.update(status="invalid", rule="memory_model", reason=str(err))
                continue
            total = b.total
            row.update(
                mem_weights_gb=b.weights / 1e9,
                mem_grads_gb=b.grads / 1e9,
                mem_optimizer_gb=b.optimizer_state / 1e9,
                mem_activations_gb=b.activations / 1e9,
                mem_logits_gb=b.logits / 1e9,
                mem_other_gb=b.other / 1e9,
                mem_total_gb=total / 1e9,
                mem_stage=b.stage,
            )
        frag = calib.fragmentation
        row["tight"] = False
        if total > usable:
            row["status"] = "over_memory"
            row["rule"] = "memory"
            row["reason"] = (
                f"predicted {total / 1e9:.1f} GB per GPU x (1 + fragmentation {frag:g}) = "
                f"{total * (1 + frag) / 1e9:.1f} GB > {capacity / 1e9:.1f} GB GPU memory"
            ) + _sp_fix(spec, v, calib, usable)
        else:
            row["status"] = "fits"
            row["tight"] = bool(total > calib.typical_hbm_bytes(capacity) and not expandable)
        if progress and (i % 256 == 0 or i == len(todo)):
            progress(i, len(todo))
    return rows


def _sp_fix(spec: Any, v: dict[str, Any], calib: ModelCalibration, usable: float) -> str:
    """`` -- fix: model.sequence_parallel=true (...)`` when a point over memory has TP > 1 without sequence
    parallelism and fits with it (the activations outside the TP regions are sharded over TP: Korthikanti et al.
    2022, arXiv 2205.05198, Sec. 4.2.2); else empty. A recipe that does not state SP leaves Megatron-Core's default,
    off -- the prune then names the override that makes it fit."""
    if v.get("job_type") == "optstep" or v["sequence_parallel"] or (v.get("tp") or 1) <= 1:
        return ""
    try:
        sp = mem.estimate_memory(spec, memory_config({**v, "sequence_parallel": True}, calib)).total
    except (mem.MemoryModelError, LayoutError):
        return ""
    return f" -- fix: model.sequence_parallel=true ({sp / 1e9:.1f} GB with it)" if sp <= usable else ""


def score_time(
    rows: list[dict[str, Any]],
    bases: Sequence[Base],
    calib: ModelCalibration,
    progress: Callable[[int, int], None] | None = None,
) -> list[dict[str, Any]]:
    """Stage 4 (in place): predicted step time of every ``fits`` and ``over_memory`` row: ``step_time_s``,
    ``tflops_per_gpu``, ``tokens_per_s_per_gpu``, one ``t_<term>_s`` column per term of the time model
    (``TimeBreakdown.terms``), ``band_pct`` (the prediction's ~68 % +- band, percent; ``band_50_pct`` and
    ``band_90_pct`` the 50 and 90 % ones, ``band_source`` the distance from the calibration it is for:
    :mod:`bridgebench.model.steptime.bands`) and ``time_release`` (the software
    level it is for). ``score`` is what the ranking sorts by (``bridgebench.sweep.trust``): predicted model
    TFLOP/s/GPU, or for optimizer-step benchmark points (which train nothing) minus the Muon step time."""
    todo = [r for r in rows if r["status"] in ("fits", "over_memory")]
    cache: dict = {}
    overlay = cluster_refit(calib)
    for i, row in enumerate(todo, 1):
        base = bases[row["base"]]
        spec, v = _point_state(base, row, cache)
        try:
            if v["job_type"] == "optstep":
                mats = _optstep_subset(spec, v["job_layers"], v["job_experts"], ns_policy(v).split_qkv)
                pol = ns_policy(v)
                flops = sum(ns_flops(m.rows, m.cols, pol.num_ns_steps, pol.kernel) for m in mats)
                rate = base.gpu.peak("bf16") * calib.time.ns_efficiency
                t = flops / rate + calib.time.kappa * len(mats)
                row.update(step_time_s=t, t_ns_s=flops / rate, t_per_matrix_s=calib.time.kappa * len(mats))
                row["tflops_per_gpu"] = flops / t / 1e12
                row["score"] = -t
                row["band_pct"] = None
            else:
                cfg = time_config(v, base.gpu, spec)
                b = predict_time(spec, cfg, calib.time)
                row.update({f"t_{name}_s": float(value) for name, value in b.terms.items()})
                row.update(placement_columns(cfg, spec, cfg.dispatcher))
                row.update(shown_knobs(v, spec.is_moe))
                seq = v["seq_length"] or spec.seq_length
                row.update(
                    step_time_s=b.total,
                    tflops_per_gpu=b.tflops_per_gpu,
                    tokens_per_s_per_gpu=v["gbs"] * seq / (b.total * v["num_gpus"]),
                    band_pct=float(b.band_pct),
                    band_50_pct=b.band_levels.get(50),
                    band_90_pct=b.band_levels.get(90),
                    band_source=b.band_source or None,
                    time_release=b.release or None,
                    efficiency=getattr(b, "efficiency", None),
                    efficiency_source=getattr(b, "efficiency_source", None),
                    ep_scale_out=getattr(b, "ep_scale_out", None),
                )
                row["score"] = b.tflops_per_gpu
                if overlay is not None:
                    _apply_cluster_refit(row, b, overlay, calib.name)
        except (TimeModelError, NSError, LayoutError) as err:
            if row["status"] == "fits":
                row.update(status="invalid", rule="time_model", reason=str(err))
            continue
        if row["status"] == "fits":
            row["status"] = "ranked"
        if progress and (i % 256 == 0 or i == len(todo)):
            progress(i, len(todo))
    return rows


def cluster_refit(calib: ModelCalibration):
    """The refit of a cluster's own calibration (``cluster_refit`` node, written by ``bridgebench calibrate
    --from-runs``) as a :class:`bridgebench.model.refit.Posterior`, or None for a published calibration."""
    node = (calib.raw or {}).get("cluster_refit")
    if not node:
        return None
    from bridgebench.model.refit import Posterior

    return Posterior.from_mapping(node["posterior"])


def _apply_cluster_refit(row: dict[str, Any], b, post, name: str) -> None:
    """Correct a point's prediction by a cluster's refit: the published model's figures kept as
    ``step_time_model_s`` / ``band_model_pct``; ``step_time_s``, ``tflops_per_gpu``, ``tokens_per_s_per_gpu`` and
    ``band_pct`` become the refit's (posterior mean, posterior predictive sd: bridgebench.model.refit)."""
    from bridgebench.model.refit import Candidate

    c = Candidate(
        point_id=str(row.get("point_id")), step_s=b.total, flops=b.flops, num_gpus=int(b.num_gpus),
        band_pct=float(b.band_pct), group=f"{row['gpu']}/{row['precision']}", terms=dict(b.terms),
        ep_scale_out=bool(getattr(b, "ep_scale_out", False)), model=str(row.get("model") or ""),
    )  # fmt: skip
    step, sd = post.step(c)
    scale = b.total / step
    row.update(
        step_time_model_s=b.total,
        band_model_pct=float(b.band_pct),
        step_time_s=step,
        tflops_per_gpu=b.tflops_per_gpu * scale,
        tokens_per_s_per_gpu=row["tokens_per_s_per_gpu"] * scale,
        band_pct=100 * sd,
        cluster_calibration=name,
    )
    row["score"] = row["tflops_per_gpu"]
