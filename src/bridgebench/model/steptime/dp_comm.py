"""Data-parallel (dense and expert) gradient reduction and parameter gathering, and how much of it the recipe's
overlap flags and bucket sizes leave exposed.

Volumes per GPU (its pipeline stage's local parameters, ``bridgebench.model.memory.parameter_counts``): dense params
over the DP x CP group, routed-expert params over the expert-DP group (megatron-core 0.19.2
``distributed/distributed_data_parallel.py``: expert params live in their own buffers reduced over
``expt_dp_group``). Gradients in BF16 (FP32 with ``grad_reduce_in_fp32``):

- distributed optimizer (AdamW, ``use_distributed_optimizer``): reduce-scatter of the gradients, all-gather of the
  updated BF16 params (FP8 with ``fp8_param_gather``) -- ZeRO-1 (Rajbhandari et al. 2020, arXiv 1910.02054);
- otherwise (plain DDP, and both Muon paths of Megatron-Core 0.19.2: ``muon`` and the layer-wise ``dist_muon`` keep
  full gradients, ``optimizer/layer_wise_optimizer.py``): an all-reduce; ``dist_muon``'s gather of updated params is
  the optimizer's (:mod:`bridgebench.model.steptime.optimizer`);
- Megatron-FSDP (``use_megatron_fsdp``): per microbatch an all-gather of the params in the forward and again in the
  backward and a reduce-scatter of the gradients (megatron-core ``distributed/fsdp``), overlapped with that
  microbatch's compute;
- DeepSpeed ZeRO-3 (``use_megatron_fsdp`` with ``framework="deepspeed"``, the 2021 DeepSpeed that Narayanan et al.
  2021, arXiv 2104.04473 Sec. 5.2 / Table 2, compared with): the same 3 x parameter bytes per microbatch (FP16
  params gathered in the forward and again in the backward, FP16 gradients reduce-scattered: Rajbhandari et al.
  2020, "ZeRO", arXiv 1910.02054 Sec. 7.2.2, "3 Psi"), priced by :func:`zero3_deepspeed`: a flat ring over the
  DP group whose every hop leaves the node through the GPU's own NIC, and exposed.

Exposure (megatron-core ``distributed_data_parallel.py`` / ``param_and_grad_buffer.py``): with ``overlap_grad_reduce``
the gradient buckets are reduced as the last microbatch's backward produces them -- hidden up to that backward's
time, and the last bucket after it is always exposed; the default bucket is ``max(40M, 1M x DP)`` params (line 69
there). With ``overlap_param_gather`` the params are gathered bucket by bucket under the next step's first forward,
the first bucket exposed. Without a flag its collective is fully exposed. Ring collectives over the group,
hierarchical when it leaves the NVLink domain
(:func:`bridgebench.model.steptime.collectives.group_ring`): the dense DP x CP group's members are ``TP`` ranks apart
(Megatron-Core's dense rank order tp-cp-dp-pp), the expert-DP group's ``ETP x EP`` apart (expert order etp-ep-dp-pp).
"""

from __future__ import annotations

from dataclasses import dataclass

from bridgebench.model.steptime import collectives
from bridgebench.model.steptime.config import TimeConfig

#: Megatron-Core's default DDP bucket: ``max(40_000_000, 1_000_000 x DP)`` params (``bucket_size=None``).
DEFAULT_BUCKET = 40_000_000


@dataclass(frozen=True, kw_only=True)
class DPComm:
    """Seconds per step: ``grad`` (the gradient collective, all of it), ``param`` (the param all-gather of the
    distributed optimizer, all of it), ``exposed`` (what the critical path sees)."""

    grad: float
    param: float
    exposed: float


def bucket_params(cfg: TimeConfig) -> float:
    """Params per DDP bucket (``bucket_size`` or Megatron-Core's default)."""
    return float(cfg.bucket_size or max(DEFAULT_BUCKET, 1_000_000 * cfg.dims.dp_cp))


def dense_ring(cfg: TimeConfig, bytes_: float, passes: int = 1) -> float:
    """A ring collective of ``bytes_`` over the dense DP x CP group (members ``TP`` ranks apart), as placed on the
    NVLink domains (:attr:`TimeConfig.placement`, :func:`~bridgebench.model.steptime.collectives.placed_ring`)."""
    g = cfg.gpu
    group = cfg.placement.group("dp_cp")
    return collectives.placed_ring(bytes_, group, g.nvlink_bandwidth, g.network_bandwidth, passes)


def expert_ring(cfg: TimeConfig, bytes_: float, passes: int = 1) -> float:
    """A ring collective of ``bytes_`` over the expert-DP group (members ``ETP x EP`` ranks apart), as placed."""
    g = cfg.gpu
    group = cfg.placement.group("edp")
    return collectives.placed_ring(bytes_, group, g.nvlink_bandwidth, g.network_bandwidth, passes)


#: FP16 parameters and gradients on the wire (DeepSpeed ZeRO-3 of 2021 trained in FP16 mixed precision, the
#: gradients reduced in the training precision: ``communication_data_type`` unset).
ZERO3_BYTES = 2.0


def zero3_deepspeed(cfg: TimeConfig, dense: float, expert: float) -> float:
    """Seconds per microbatch of DeepSpeed ZeRO-3's collectives on one GPU: an all-gather of the FP16 params in the
    forward, another in the backward and a reduce-scatter of the FP16 gradients (Rajbhandari et al. 2020, "ZeRO",
    arXiv 1910.02054 Sec. 7.2.2: 3 x the parameter bytes, 1.5x plain data parallelism), ``dense`` params (elements)
    over the DP x CP group and ``expert`` over the expert-DP group.

    Link: a flat ring (:func:`bridgebench.model.steptime.collectives.ring`) over the whole group at the GPU's own
    scale-out bandwidth whenever the group leaves the NVLink domain, not the hierarchical ring of Megatron-Core's
    buckets (:func:`dense_ring`): DeepSpeed issues one collective per submodule's parameter tensors over the
    flat data-parallel group, and Narayanan et al. 2021 (arXiv 2104.04473 Sec. 5.2) attribute ZeRO-3's loss of
    throughput as GPUs double to its cross-node communication. Exposure: all of it -- DeepSpeed gathers a
    submodule's params when the submodule is about to run, prefetching at most ``stage3_prefetch_bucket_size`` params
    ahead (DeepSpeed's default 5e7, ``deepspeed/runtime/zero/constants.py``, the memory model's
    ``zero3_prefetch_bucket_size``: under 3 % of one GPT-3 175B layer's 1.8e9), so the gathers sit on the
    critical path; the gradient reduce-scatter is counted exposed too (a modelling choice: a backward that waits on
    every gather has little compute to hide it under). An upper bound on what a topology-aware NCCL ring over eight
    NICs per node would take (about 8x faster on DGX A100); no published isolated measurement decides between them.
    """
    g = cfg.gpu

    def flat(kind: str, size: int, params: float) -> float:
        crosses = cfg.placement.group(kind).crosses
        bw, step = (
            (g.network_bandwidth, collectives.NETWORK_ALPHA)
            if crosses
            else (g.nvlink_bandwidth, collectives.NVLINK_ALPHA)
        )
        return collectives.ring(params * ZERO3_BYTES, size, bw, step)

    return 3 * (flat("dp_cp", cfg.dims.dp_cp, dense) + flat("edp", cfg.dims.edp, expert))


def dp_comm(
    cfg: TimeConfig, dense: float, expert: float, bwd_window: float, fwd_window: float, per_mb_window: float
) -> DPComm:
    """Data-parallel communication of one GPU per step.

    Args:
        cfg: the point (optimizer, flags, group sizes).
        dense, expert: local dense / routed-expert params of the busiest stage (elements).
        bwd_window, fwd_window: seconds of one microbatch's backward / forward on that stage (the overlap windows).
        per_mb_window: one microbatch's forward + backward seconds (Megatron-FSDP's window).
    """
    grad_b = 4.0 if cfg.grad_reduce_in_fp32 else 2.0
    param_b = 1.0 if cfg.fp8_param_gather else 2.0

    def both(bytes_per_param: float, passes: int = 1) -> float:
        return dense_ring(cfg, dense * bytes_per_param, passes) + expert_ring(cfg, expert * bytes_per_param, passes)

    if cfg.use_megatron_fsdp and cfg.framework == "deepspeed":
        zero3 = cfg.num_microbatches * zero3_deepspeed(cfg, dense, expert)
        return DPComm(grad=zero3, param=0.0, exposed=zero3)
    if cfg.use_megatron_fsdp:
        one = 2 * both(2.0) + both(grad_b)
        m = cfg.num_microbatches
        return DPComm(grad=m * one, param=0.0, exposed=m * max(0.0, one - per_mb_window))
    distopt = cfg.optimizer == "adam" and cfg.use_distributed_optimizer
    grad = both(grad_b, 1 if distopt else 2)
    param = both(param_b) if distopt else 0.0
    total = dense + expert
    share = min(1.0, bucket_params(cfg) / total) if total else 1.0
    grad_x = max(0.0, grad - bwd_window) + share * grad if cfg.overlap_grad_reduce else grad
    param_x = (max(0.0, param - fwd_window) + share * param if cfg.overlap_param_gather else param) if distopt else 0.0
    return DPComm(grad=grad, param=param, exposed=min(grad, grad_x) + min(param, param_x))
