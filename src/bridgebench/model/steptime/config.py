"""The inputs of the step-time model: the GPU's datasheet facts (:class:`GpuFacts`) and one training point
(:class:`TimeConfig`), with the knobs of the recipe that decide what communication is exposed.

Pure Python (no torch, megatron, pandas, Hydra or YAML import). GPU facts come from ``configs/gpu/<name>.yaml``
(read by the config layer); every field of :class:`TimeConfig` carries the Megatron-Core / Megatron-Bridge name of
the setting it mirrors and that setting's upstream default (megatron-core 0.19.2, megatron-bridge 0.6.2).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any, Mapping

from bridgebench.errors import BridgebenchError
from bridgebench.model import placement as pl
from bridgebench.model.memory.config import FRAMEWORKS, RecomputeSettings
from bridgebench.model.newton_schulz import NSPolicy, Parallelism
from bridgebench.model.parallel import DimsView, ParallelDims
from bridgebench.model.spec import ModelSpec

#: precision peak key (``configs/precision/*.yaml`` ``peak``) -> efficiency class: FP8 and MXFP8 share the FP8 rate.
PRECISION_CLASS = {"bf16": "bf16", "fp8": "fp8", "mxfp8": "fp8", "nvfp4": "nvfp4"}
#: Megatron-Core ``moe_token_dispatcher_type`` values (``alltoall``, ``allgather``) and the ``flex`` dispatcher's
#: ``moe_flex_dispatcher_backend`` values (``deepep``, ``hybridep``, ``ncclep``), megatron-core 0.19.2
#: ``transformer/moe/token_dispatcher.py``; :func:`TimeConfig.dispatcher` folds them into one name.
DISPATCHERS = ("alltoall", "allgather", "deepep", "hybridep", "ncclep")
#: the flex backends that take a per-rank token budget (``moe_expert_rank_capacity_factor``; megatron-core 0.19.2
#: ``TransformerConfig.__post_init__`` refuses it with any other)
BUDGET_BACKENDS = ("hybridep", "ncclep")
#: Megatron-Core ``cp_comm_type`` values (``transformer_config.py``; ``None`` = ``p2p``).
CP_COMM_TYPES = ("p2p", "a2a", "all_gather", "a2a+p2p")
#: Megatron-Core ``attention_backend`` values (``transformer/enums.py`` ``AttnBackend``), and ``sdpa``: not Megatron's,
#: torch's ``scaled_dot_product_attention`` as torchtitan runs it (:mod:`bridgebench.model.steptime.gemm`).
ATTENTION_BACKENDS = ("flash", "fused", "unfused", "local", "auto", "sdpa")
#: Layer-wise Muon deals of whole params to data-parallel ranks: Megatron-Core 0.19.2's (``ping_pong``) and the
#: cost-balanced packing of Megatron-LM PR #6379 (``cost_balanced``, not in 0.19.2: a what-if).
MUON_ASSIGNMENTS = ("ping_pong", "cost_balanced")


#: Tensor-core rate against the board power limit, for a GPU whose datasheets print the same die at two power
#: limits: ``(watts, rate relative to the configs/gpu peaks)``, ascending. H100 (GH100, 132 SMs): the SXM5 at 700 W
#: is the configs/gpu peak (989.4 TFLOP/s BF16 dense); the H100 NVL at 400 W prints 835 (1,671 sparse / 2), 0.8439
#: of it (NVIDIA H100 Tensor Core GPU datasheet, SXM and NVL columns): the sustained clock the power limit allows.
#: Between them the rate is taken linear in watts (first-principles reading, not measured here).
POWER_RATE = {"h100": ((400.0, 835.0 / 989.4), (700.0, 1.0))}


class TimeModelError(BridgebenchError):
    """A point the time model cannot evaluate (unknown GPU peak, optimizer, dispatcher, or a calibration that does
    not fit); the message names the field."""


@dataclass(frozen=True, kw_only=True)
class GpuFacts:
    """One GPU kind (``configs/gpu/<name>.yaml``): dense tensor-core peaks in TFLOP/s by peak key, HBM capacity
    (bytes) and bandwidth (bytes/s), NVLink and scale-out bandwidth per GPU per direction (bytes/s), NVLink domain
    size (GPUs), GPUs per node, CUDA compute capability (9.0 Hopper, 10.x Blackwell; decides the GEMM tile of
    :mod:`bridgebench.model.steptime.gemm`) and how the scheduler fills NVLink domains (``segment_policy``,
    :mod:`bridgebench.model.placement`)."""

    name: str
    peak_tflops: Mapping[str, float | None]
    hbm_bytes: float
    hbm_bandwidth: float
    nvlink_bandwidth: float
    network_bandwidth: float
    nvlink_domain: int
    gpus_per_node: int = 8
    compute_capability: float | None = None
    segment_policy: str = "node"

    @classmethod
    def from_mapping(cls, gpu: Mapping[str, Any]) -> GpuFacts:
        """From a ``configs/gpu`` mapping (``hbm_gb``, ``hbm_bandwidth_tb_s``, ``nvlink_bandwidth_gb_s``,
        ``network_bandwidth_gb_s``, ``nvlink_domain``, ``peak_tflops``; ``gpus_per_node``, ``compute_capability``
        and ``segment_policy`` optional). Raises :class:`TimeModelError` on a missing key."""
        try:
            cc = gpu.get("compute_capability")
            return cls(
                name=str(gpu["name"]),
                peak_tflops=dict(gpu["peak_tflops"]),
                hbm_bytes=float(gpu["hbm_gb"]) * 1e9,
                hbm_bandwidth=float(gpu["hbm_bandwidth_tb_s"]) * 1e12,
                nvlink_bandwidth=float(gpu["nvlink_bandwidth_gb_s"]) * 1e9,
                network_bandwidth=float(gpu["network_bandwidth_gb_s"]) * 1e9,
                nvlink_domain=int(gpu["nvlink_domain"]),
                gpus_per_node=int(gpu.get("gpus_per_node") or 8),
                compute_capability=None if cc is None else float(cc),
                segment_policy=str(gpu.get("segment_policy") or "node"),
            )
        except KeyError as err:
            raise TimeModelError(f"gpu {gpu.get('name')!r} lacks {err.args[0]!r} (configs/gpu)") from err

    def peak(self, peak_key: str) -> float:
        """Dense peak in FLOP/s for a peak key. Raises :class:`TimeModelError` when the GPU lacks the format."""
        value = self.peak_tflops.get(peak_key)
        if not value:
            raise TimeModelError(f"{self.name} has no {peak_key} tensor-core peak (configs/gpu/{self.name}.yaml)")
        return float(value) * 1e12

    def at_power_limit(self, watts: float) -> GpuFacts:
        """This GPU with its tensor-core peaks at a board power limit of ``watts`` (:data:`POWER_RATE`: linear
        between the datasheet anchors, 1 at or above the highest; HBM and links unchanged -- memory and link clocks
        do not follow the SM clock). Same ``name`` (its calibrated efficiency still applies).

        Raises:
            TimeModelError: no datasheet anchors for this GPU, or a limit below the lowest anchor.
        """
        anchors = POWER_RATE.get(self.name)
        if not anchors or watts < anchors[0][0]:
            raise TimeModelError(f"no datasheet tensor rate for {self.name} at a {watts:g} W power limit (POWER_RATE)")
        rate = 1.0
        for (w0, r0), (w1, r1) in zip(anchors, anchors[1:]):
            if w0 <= watts <= w1:
                rate = r0 + (r1 - r0) * (watts - w0) / (w1 - w0)
        peaks = {k: (None if v is None else float(v) * rate) for k, v in self.peak_tflops.items()}
        return dataclasses.replace(self, peak_tflops=peaks)

    def link(self, span: int) -> float:
        """Bandwidth (bytes/s per GPU per direction) of a group whose ranks lie in a block of ``span`` consecutive
        ranks: NVLink when the block fits one NVLink domain, else the scale-out network (the per-GPU NIC is the
        bottleneck of a ring or all-to-all that leaves the domain)."""
        return self.nvlink_bandwidth if span <= self.nvlink_domain else self.network_bandwidth


@dataclass(frozen=True, kw_only=True)
class TimeConfig(RecomputeSettings, DimsView):
    """One training point.

    ``dims`` the parallel sizes and batch (:class:`bridgebench.model.parallel.ParallelDims`, read as ``cfg.tp`` ...;
    ``TimeConfig.from_flat(gpu=.., num_gpus=.., tp=..)`` from flat keywords);
    ``peak_key`` the precision's ``configs/precision`` peak key (``bf16 fp8 mxfp8 nvfp4``); ``optimizer`` a
    Megatron-Core name (``adam``, ``muon``, ``dist_muon``) with its Newton-Schulz policy; ``flops_formula`` the
    release's FLOPs formula (``v1``/``v2``); ``release`` the NeMo release the prediction is for (``26.02``; None:
    the group's mean level, see :mod:`bridgebench.model.steptime.release`).

    Recipe knobs (Megatron-Core / Megatron-Bridge names; default = upstream default unless said):

    - ``sequence_parallel``; ``tp_comm_overlap`` (``comm_overlap.tp_comm_overlap``, TE userbuffers AG/RS overlap);
    - ``cp_comm_type`` (``p2p``, ``a2a``, ``all_gather``, ``a2a+p2p``; None = ``p2p``);
    - ``moe_token_dispatcher_type`` (``alltoall``, ``allgather``, ``flex``) and ``moe_flex_dispatcher_backend``
      (``deepep``, ``hybridep``, ``ncclep``); ``overlap_moe_expert_parallel_comm`` (EP all-to-all hidden behind the
      other microbatch of the combined 1F1B schedule); ``moe_shared_expert_overlap``;
    - ``overlap_grad_reduce``, ``overlap_param_gather``, ``bucket_size`` (params per DDP bucket; None = Megatron-Core's
      ``max(40M, 1M x DP)``), ``use_distributed_optimizer``, ``grad_reduce_in_fp32``, ``fp8_param_gather``,
      ``use_megatron_fsdp``;
    - ``fp8_output_proj`` (the output layer's GEMM in MXFP8: :attr:`output_proj_quantized`);
    - ``fp8_dot_product_attention`` (attention core in FP8 instead of BF16); ``attention_backend`` (Megatron-Core's
      ``AttnBackend``: ``flash``, ``fused``, ``auto`` run a flash-style kernel; ``local`` and ``unfused``
      materialize the score matrix; ``sdpa``, not a Megatron-Core value, is torch's SDPA as torchtitan calls it,
      :mod:`bridgebench.model.steptime.gemm`);
    - ``overlap_p2p_comm`` (None = Megatron-Bridge's: on with VP > 1);
    - the ``recompute_*`` settings (:class:`bridgebench.model.memory.config.RecomputeSettings`, priced by
      :mod:`bridgebench.model.steptime.recompute`);
    - ``muon_assignment`` (``ping_pong`` = Megatron-Core 0.19.2, ``cost_balanced`` = Megatron-LM PR #6379 what-if);
    - ``framework`` (``bridgebench.model.memory.config.FRAMEWORKS``; ``framework.name``): whose data-parallel
      semantics a fully sharded point takes -- ``megatron`` (Megatron-FSDP), ``torchtitan``, or ``deepspeed``
      (2021 DeepSpeed ZeRO-3, :func:`bridgebench.model.steptime.dp_comm.zero3_deepspeed`; only to check the model
      against published runs of that framework).
    """

    gpu: GpuFacts
    peak_key: str
    dims: ParallelDims
    pipeline_model_parallel_layout: str | None = None
    optimizer: str = "adam"
    ns_policy: NSPolicy = NSPolicy()
    flops_formula: str = "v2"
    release: str | None = None
    release_index: float | None = None
    sequence_parallel: bool = False
    tp_comm_overlap: bool = False
    cp_comm_type: str | None = None
    moe_token_dispatcher_type: str = "alltoall"
    moe_flex_dispatcher_backend: str | None = None
    overlap_moe_expert_parallel_comm: bool = False
    moe_shared_expert_overlap: bool = False
    moe_expert_capacity_factor: float | None = None
    moe_pad_expert_input_to_capacity: bool = False
    moe_expert_rank_capacity_factor: float | None = None
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    bucket_size: int | None = None
    use_distributed_optimizer: bool = True
    grad_reduce_in_fp32: bool = False
    fp8_param_gather: bool = False
    use_megatron_fsdp: bool = False
    fp8_dot_product_attention: bool = False
    fp8_output_proj: bool = False
    attention_backend: str = "auto"
    overlap_p2p_comm: bool | None = None
    muon_assignment: str = "ping_pong"
    framework: str = "megatron"

    def __post_init__(self) -> None:
        if self.dispatcher not in DISPATCHERS:
            raise TimeModelError(
                f"unknown MoE dispatcher {self.moe_token_dispatcher_type!r}/{self.moe_flex_dispatcher_backend!r}; "
                "moe_token_dispatcher_type is one of alltoall, allgather, flex (flex backends deepep, hybridep, ncclep)"
            )
        if (self.cp_comm_type or "p2p") not in CP_COMM_TYPES:
            raise TimeModelError(f"cp_comm_type must be one of {CP_COMM_TYPES}, got {self.cp_comm_type!r}")
        if self.attention_backend not in ATTENTION_BACKENDS:
            raise TimeModelError(
                f"attention_backend must be one of {ATTENTION_BACKENDS}, got {self.attention_backend!r}"
            )
        if self.muon_assignment not in MUON_ASSIGNMENTS:
            raise TimeModelError(f"muon_assignment must be one of {MUON_ASSIGNMENTS}, got {self.muon_assignment!r}")
        if self.framework not in FRAMEWORKS:
            raise TimeModelError(f"framework must be one of {FRAMEWORKS}, got {self.framework!r}")

    @functools.cached_property
    def placement(self) -> pl.Placement:
        """Where the job's ranks land: NVLink domains as the scheduler fills them (the GPU's ``segment_policy``)
        and every group kind's split over them (:func:`bridgebench.model.placement.place`; kept on the point after
        the first read: the time model reads it several times per evaluation)."""
        g = self.gpu
        domain = pl.domain_gpus(self.num_gpus, g.gpus_per_node, g.nvlink_domain, g.segment_policy)
        seg = pl.segment_nodes(max(1, self.num_gpus // g.gpus_per_node), g.gpus_per_node, g.segment_policy)
        return pl.place(self.num_gpus, tp=self.tp, cp=self.cp, pp=self.pp, ep=self.ep, etp=self.etp, domain=domain,
                        segment=seg)  # fmt: skip

    def link_of(self, kind: str) -> float:
        """Bandwidth (bytes/s per GPU per direction) of a group kind: NVLink when every group of that kind lies in
        one NVLink domain as placed, else the scale-out network."""
        crosses = self.placement.group(kind).crosses
        return self.gpu.network_bandwidth if crosses else self.gpu.nvlink_bandwidth

    @property
    def output_proj_quantized(self) -> bool:
        """Whether the output layer (the logits GEMM) runs at the point's low precision: only with
        ``fp8_output_proj`` under the MXFP8 recipe. Otherwise Megatron-Core builds it as its own
        ``tensor_parallel.ColumnParallelLinear``, outside Transformer Engine's FP8 autocast, so it runs in BF16 in an
        FP8, MXFP8 or NVFP4 run (megatron-core 0.19.2 ``models/gpt/gpt_model.py``: ``TELMHeadColumnParallelLinear``
        only ``if is_mxfp8_output_proj_active(config)``, ``fp8_utils.py``; ``TransformerConfig.__post_init__`` refuses
        ``fp8_output_proj`` without ``fp8_recipe='mxfp8'``)."""
        return self.fp8_output_proj and self.peak_key == "mxfp8"

    @property
    def dispatcher(self) -> str:
        """One name for the MoE token exchange: ``alltoall``, ``allgather``, or the flex backend."""
        if self.moe_token_dispatcher_type == "flex":
            return self.moe_flex_dispatcher_backend or "deepep"  # Megatron-Core's default flex backend
        return self.moe_token_dispatcher_type

    @property
    def host_synced_dispatch(self) -> bool:
        """Whether each MoE layer's token dispatch waits on the host for the per-expert token counts: dropless
        (no ``moe_expert_capacity_factor``) or dropping without ``moe_pad_expert_input_to_capacity``, unless a
        per-rank token budget is set. Static shapes, no host wait (megatron-core 0.19.2
        ``transformer/moe/token_dispatcher.py``):

        - a capacity-padded dispatch (``MoEAlltoAllTokenDispatcher``: ``cuda_sync_point = "no_sync"`` with
          ``drop_and_pad``);
        - HybridEP or NCCL EP with ``moe_expert_rank_capacity_factor`` (the HybridEP manager's ``setup_metadata``:
          a static upper bound on the permuted tokens, those above it dropped; without it "HybridEP sizes buffers
          dynamically (CPU sync in dispatch)"; NCCL EP requires the budget). ``TransformerConfig.__post_init__``
          accepts the factor only with those two backends, and ``moe_paged_stash`` (the 26.08 recipes' full-
          iteration CUDA graphs) only with the factor.
        """
        if self.moe_expert_rank_capacity_factor is not None and self.dispatcher in BUDGET_BACKENDS:
            return False
        return self.moe_expert_capacity_factor is None or not self.moe_pad_expert_input_to_capacity

    @property
    def precision_class(self) -> str:
        return PRECISION_CLASS.get(self.peak_key, self.peak_key)

    @property
    def sp(self) -> bool:
        """Sequence parallelism in effect: set, or required (Megatron-Core asserts it for MoE with TP > 1)."""
        return self.tp > 1 and self.sequence_parallel

    def parallelism(self) -> Parallelism:
        """The Newton-Schulz model's view: the sizes without the batch (which it does not read, so one point's
        per-rank loads serve every batch size) and the pipeline layout."""
        return Parallelism(
            dims=self.dims.replace(mbs=1, gbs=None),
            pipeline_model_parallel_layout=self.pipeline_model_parallel_layout,
        )


def group_key(spec: ModelSpec, cfg: TimeConfig) -> tuple[str, str, str]:
    """The published-table group of a point: (``configs/model`` name, ``configs/gpu`` name, peak key)."""
    return (spec.name, cfg.gpu.name, cfg.peak_key)


def config_key(spec: ModelSpec, cfg: TimeConfig) -> str:
    """One configuration, whatever the release: ``model|gpu|peak key|seq|mtp|optimizer|GPUs|TP|PP|VP|CP|EP|ETP|MBS|GBS``
    (the same sizes at two releases are one configuration: leave-one-configuration-out holds out both)."""
    sizes = (cfg.num_gpus, cfg.tp, cfg.pp, cfg.vp or 1, cfg.cp, cfg.ep, cfg.etp_, cfg.mbs, cfg.gbs)
    parts = (spec.name, cfg.gpu.name, cfg.peak_key, spec.seq_length, spec.mtp_layers, cfg.optimizer, *sizes)
    return "|".join(str(p) for p in parts)


def family(spec: ModelSpec) -> str:
    """Calibration family of a model: ``moe`` or ``dense`` (MLA and GQA MoE share one)."""
    return "moe" if spec.is_moe else "dense"
