"""FLOPs accounting of one composed run: the bridge from :class:`bridgebench.config.RunFacts` to the FLOPs and NS
models. Pure Python (no pandas, torch or megatron), so ``bridgebench flops`` starts fast."""

from __future__ import annotations

from bridgebench.config.compose import RunFacts
from bridgebench.model.flops import FlopsBreakdown, model_flops
from bridgebench.model.newton_schulz import NSPolicy, Parallelism


def parallelism(f: RunFacts) -> Parallelism:
    """Parallel sizes of a run (``model.*_parallel_size`` keys; unset sizes are 1, ETP defaults to TP)."""
    p = f.parallel
    return Parallelism.from_flat(
        num_gpus=f.num_gpus,
        tensor_model_parallel_size=p["tensor_model_parallel_size"] or 1,
        pipeline_model_parallel_size=p["pipeline_model_parallel_size"] or 1,
        virtual_pipeline_model_parallel_size=p["virtual_pipeline_model_parallel_size"],
        context_parallel_size=p["context_parallel_size"] or 1,
        expert_model_parallel_size=p["expert_model_parallel_size"] or 1,
        expert_tensor_parallel_size=p["expert_tensor_parallel_size"],
        pipeline_model_parallel_layout=p.get("pipeline_model_parallel_layout"),
    )


def ns_policy(f: RunFacts) -> NSPolicy:
    """NS counting policy of a run: the optimizer config (``dist_*`` = layer-wise distributed optimizer,
    ``muon_tp_mode``, ``muon_num_ns_steps``, ``muon_split_qkv``) plus ``accounting.ns_kernel``."""
    o = f.optimizer
    return NSPolicy(
        num_ns_steps=int(o.get("muon_num_ns_steps", 5)),
        kernel=f.accounting["ns_kernel"],
        tp_mode=o.get("muon_tp_mode", "blockwise"),
        layer_wise=f.optimizer_kind.layer_wise,
        split_qkv=bool(o.get("muon_split_qkv", True)),
    )


def step_flops(f: RunFacts) -> FlopsBreakdown:
    """Model FLOPs of one optimizer step (GBS sequences) with the formula of the run's release."""
    tp = f.parallel["tensor_model_parallel_size"] or 1
    return model_flops(
        f.model, f.global_batch_size, tensor_model_parallel_size=tp, formula=f.accounting["flops_formula"]
    )
