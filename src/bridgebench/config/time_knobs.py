"""The recipe knobs the step-time model reads, declared once: their config keys and how a point's values become
:class:`bridgebench.model.steptime.config.TimeConfig` fields. The sweep engine adds :data:`TIME_KEYS` to the keys it
reads per point and passes :func:`time_knobs` into its ``TimeConfig`` (``bridgebench.sweep.time_config``).

An unset knob takes Megatron-Core's / Megatron-Bridge's default (megatron-core 0.19.2 ``DistributedDataParallelConfig``,
``TransformerConfig``; megatron-bridge 0.6.2 ``CommOverlapConfig``); a flex backend without a dispatcher type is the
flex dispatcher (Megatron-Bridge ``training/flex_dispatcher_backend.py::apply_flex_dispatcher_backend`` sets it on
the GPUs the backend supports).
"""

from __future__ import annotations

from typing import Any

from bridgebench.config.rules import upstream
from bridgebench.model.optimizer import OptimizerKind

#: short name -> config key of the time model's knobs (added to the sweep engine's ``KEYS``).
TIME_KEYS = {
    "release": "release.name",
    "muon_assignment": "accounting.muon_assignment",
    "tp_comm_overlap": "comm_overlap.tp_comm_overlap",
    "cp_comm_type": "model.cp_comm_type",
    "moe_token_dispatcher_type": "model.moe_token_dispatcher_type",
    "moe_flex_dispatcher_backend": "model.moe_flex_dispatcher_backend",
    "overlap_moe_expert_parallel_comm": "comm_overlap.overlap_moe_expert_parallel_comm",
    "moe_shared_expert_overlap": "model.moe_shared_expert_overlap",
    "moe_expert_capacity_factor": "model.moe_expert_capacity_factor",
    "moe_pad_expert_input_to_capacity": "model.moe_pad_expert_input_to_capacity",
    "moe_expert_rank_capacity_factor": "model.moe_expert_rank_capacity_factor",
    "overlap_grad_reduce": "ddp.overlap_grad_reduce",
    "overlap_param_gather": "ddp.overlap_param_gather",
    "bucket_size": "ddp.bucket_size",
    "use_distributed_optimizer": "optimizer.use_distributed_optimizer",
    "ddp_use_distributed_optimizer": "ddp.use_distributed_optimizer",
    "ddp_grad_reduce_in_fp32": "ddp.grad_reduce_in_fp32",
    "mp_grad_reduce_in_fp32": "mixed_precision.grad_reduce_in_fp32",
    "fp8_param_gather": "mixed_precision.fp8_param_gather",
    "use_megatron_fsdp": "ddp.use_megatron_fsdp",
    "fp8_dot_product_attention": "mixed_precision.fp8_dot_product_attention",
    "fp8_output_proj": "model.fp8_output_proj",
    "attention_backend": "model.attention_backend",
}


def time_knobs(v: dict[str, Any]) -> dict[str, Any]:
    """``TimeConfig`` keyword arguments of a point's knob values (short names of :data:`TIME_KEYS`; absent or None
    = the upstream default)."""

    def flag(key: str, default: bool) -> bool:
        return default if v.get(key) is None else bool(v[key])

    dtype, backend, _ = dispatcher_of(v)
    muon = OptimizerKind(name=str(v.get("optimizer") or "adam")).is_muon
    return {
        "release": None if v.get("release") is None else str(v["release"]),
        "tp_comm_overlap": flag("tp_comm_overlap", False),
        "cp_comm_type": v.get("cp_comm_type"),
        "moe_token_dispatcher_type": dtype or ("flex" if backend else "alltoall"),
        "moe_flex_dispatcher_backend": backend,
        "overlap_moe_expert_parallel_comm": flag("overlap_moe_expert_parallel_comm", False),
        "moe_shared_expert_overlap": flag("moe_shared_expert_overlap", False),
        "moe_expert_capacity_factor": None
        if v.get("moe_expert_capacity_factor") is None
        else float(v["moe_expert_capacity_factor"]),
        "moe_pad_expert_input_to_capacity": flag("moe_pad_expert_input_to_capacity", False),
        "moe_expert_rank_capacity_factor": None
        if v.get("moe_expert_rank_capacity_factor") is None
        else float(v["moe_expert_rank_capacity_factor"]),
        "overlap_grad_reduce": flag("overlap_grad_reduce", False),
        "overlap_param_gather": flag("overlap_param_gather", False),
        "bucket_size": v.get("bucket_size"),
        "use_distributed_optimizer": flag("use_distributed_optimizer", not muon)
        or flag("ddp_use_distributed_optimizer", False),
        "grad_reduce_in_fp32": bool(v.get("ddp_grad_reduce_in_fp32") or v.get("mp_grad_reduce_in_fp32")),
        "fp8_param_gather": flag("fp8_param_gather", False),
        "use_megatron_fsdp": flag("use_megatron_fsdp", False),
        "fp8_dot_product_attention": flag("fp8_dot_product_attention", False),
        "fp8_output_proj": flag("fp8_output_proj", False),
        # an AttnBackend member or its config spelling "AttnBackend.local"; unset = Megatron-Core's default (auto)
        "attention_backend": str(
            getattr(v.get("attention_backend"), "name", v.get("attention_backend") or "auto")
        ).split(".")[-1],
        "muon_assignment": v.get("muon_assignment") or "ping_pong",
        "framework": str(v.get("framework") or "megatron"),
    }


def dispatcher_of(v: dict[str, Any]) -> tuple[str | None, str | None, str]:
    """``(moe_token_dispatcher_type, moe_flex_dispatcher_backend, note)`` that run for a point: as configured, except
    DeepEP on GB200 / GB300, which Megatron-Bridge replaces by ``alltoall`` (rule ``deepep_falls_back``,
    :func:`bridgebench.config.rules.upstream.effective_dispatcher`; the note says so)."""
    return upstream.effective_dispatcher(
        v.get("moe_token_dispatcher_type"), v.get("moe_flex_dispatcher_backend"), str(v.get("gpu") or ""),
        v.get("compute_capability"),
    )  # fmt: skip


#: the knobs users do not type, as shown by ``predict`` (text, ``--json`` ``knobs``) and ``points.parquet`` (one
#: column each): short name -> what it is
SHOWN_KNOBS = {
    "dispatcher": "MoE token dispatcher that runs (alltoall, allgather, deepep, hybridep, ncclep)",
    "ep_overlap": "comm_overlap.overlap_moe_expert_parallel_comm (EP all-to-all under the other microbatch)",
    "shared_expert_overlap": "model.moe_shared_expert_overlap",
    "tp_comm_overlap": "comm_overlap.tp_comm_overlap (TE userbuffers)",
    "recompute": "model.recompute_granularity (modules)",
    "expert_capacity": "model.moe_expert_capacity_factor / moe_pad_expert_input_to_capacity / "
    "moe_expert_rank_capacity_factor (dropless, or the capacity and whether it pads, or HybridEP's per-rank token "
    "budget: a padded dispatch or a budget has static shapes and never waits on the host)",
    "cuda_graph_impl": "model.cuda_graph_impl",
    "cuda_graph_scope": "model.cuda_graph_scope",
}


def shown_knobs(v: dict[str, Any], spec_is_moe: bool = True) -> dict[str, Any]:
    """The knobs of :data:`SHOWN_KNOBS` of a point (values as they run; Megatron-Core's default where the config
    leaves one unset), with ``knobs_source`` (the recipe and release they come from, or the defaults) and
    ``dispatcher_note`` (the DeepEP fallback, else empty)."""
    dtype, backend, note = dispatcher_of(v)
    dispatcher = upstream.requested_backend(dtype, backend) if spec_is_moe else None
    mods = v.get("recompute_modules")
    gran = v.get("recompute_granularity")
    if gran == "selective" and not mods:
        mods = ["core_attn"]  # megatron-core 0.19.2 TransformerConfig.__post_init__ default
    recompute = "none" if not gran else gran + (f" ({','.join(mods)})" if gran == "selective" and mods else "")
    cap = v.get("moe_expert_capacity_factor")
    budget = v.get("moe_expert_rank_capacity_factor")
    expert_capacity = None
    if spec_is_moe:
        expert_capacity = (
            "dropless"
            if cap is None
            else f"capacity {float(cap):g}" + (", padded" if v.get("moe_pad_expert_input_to_capacity") else "")
        )
        if budget is not None:
            expert_capacity += f", rank budget {float(budget):g}"
    scope = v.get("cuda_graph_scope")
    recipe = v.get("recipe")
    return {
        "dispatcher": dispatcher,
        "dispatcher_note": note,
        "ep_overlap": bool(v.get("overlap_moe_expert_parallel_comm") or False),
        "shared_expert_overlap": bool(v.get("moe_shared_expert_overlap") or False),
        "tp_comm_overlap": bool(v.get("tp_comm_overlap") or False),
        "recompute": recompute,
        "expert_capacity": expert_capacity,
        "cuda_graph_impl": str(v.get("cuda_graph_impl") or "none"),
        "cuda_graph_scope": (",".join(map(str, scope)) or None)
        if isinstance(scope, (list, tuple))
        else (scope or None),
        "knobs_source": f"recipe {recipe} @ {v.get('recipe_release')}"
        if recipe
        else "Megatron-Core / Megatron-Bridge defaults (no recipe)",
    }
