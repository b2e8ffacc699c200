"""Structured-config schemas (dataclasses) for the Hydra tree, so a misspelled key or a wrong type fails at compose
time, before anything is built or submitted.

Field names follow Megatron-Bridge 0.6.2's ``ConfigContainer`` (``model`` = the GPT/MLA model provider, i.e.
Megatron-Core ``TransformerConfig`` + ``ModelParallelConfig`` fields; ``train``, ``optimizer``, ``ddp``,
``mixed_precision``, ``comm_overlap``), so an override reads the same in both tools. Only the fields bridgebench sets
are declared; to use another Megatron-Bridge field, add it here (one line) and it becomes valid everywhere.
``register()`` stores the schemas in Hydra's ConfigStore; each group's YAMLs name their schema in their defaults list.
"""

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from omegaconf import MISSING

from bridgebench.model.spec import ModelSpec


def _arch_fields() -> list[tuple[str, Any, Any]]:
    """The architecture fields of :class:`bridgebench.model.spec.ModelSpec` as structured-config fields: the model
    schema is generated from ``ModelSpec``, so a model field is declared once. ``X | None`` becomes ``Optional[X]``,
    other unions ``Any`` (OmegaConf 2.3 types); required fields are ``MISSING``."""
    hints = typing.get_type_hints(ModelSpec)
    out = []
    for f in dataclasses.fields(ModelSpec):
        if f.name == "extra":
            continue
        hint, args = hints[f.name], typing.get_args(hints[f.name])
        if args and type(None) in args and len(args) == 2:
            hint = Optional[next(a for a in args if a is not type(None))]
        elif args:
            hint = Any
        default = MISSING if f.default is dataclasses.MISSING else f.default
        out.append((f.name, hint, field(default=default)))
    return out


@dataclass
class _ModelRunFields:
    # parallelism (Megatron-Core ModelParallelConfig)
    tensor_model_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1
    virtual_pipeline_model_parallel_size: Optional[int] = None
    context_parallel_size: int = 1
    expert_model_parallel_size: int = 1
    expert_tensor_parallel_size: Optional[int] = None
    sequence_parallel: bool = False
    pipeline_model_parallel_layout: Optional[str] = None
    num_layers_in_first_pipeline_stage: Optional[int] = None
    num_layers_in_last_pipeline_stage: Optional[int] = None
    account_for_embedding_in_pipeline_split: bool = False
    account_for_loss_in_pipeline_split: bool = False
    # performance settings of the published runs
    recompute_granularity: Optional[str] = None
    recompute_method: Optional[str] = None
    recompute_num_layers: Optional[int] = None
    recompute_modules: Optional[List[str]] = None
    cuda_graph_impl: Optional[str] = None
    cuda_graph_scope: Optional[List[str]] = None
    moe_token_dispatcher_type: Optional[str] = None
    moe_flex_dispatcher_backend: Optional[str] = None
    moe_hybridep_num_sms: Optional[int] = None
    overlap_moe_expert_parallel_comm: Optional[bool] = None
    moe_router_force_load_balancing: Optional[bool] = None
    moe_shared_expert_overlap: Optional[bool] = None
    moe_permute_fusion: Optional[bool] = None
    moe_router_fusion: Optional[bool] = None
    moe_grouped_gemm: Optional[bool] = None
    mtp_loss_scaling_factor: Optional[float] = None
    fine_grained_activation_offloading: Optional[bool] = None
    offload_modules: Optional[List[str]] = None


#: ``model.*``: ModelSpec's architecture fields + parallel sizes and performance settings (Megatron-Core names).
ModelSchema = dataclasses.make_dataclass(
    "ModelSchema",
    _arch_fields()
    + [
        (
            f.name,
            f.type,
            field(default=f.default)
            if f.default is not dataclasses.MISSING
            else field(default_factory=f.default_factory),
        )
        for f in dataclasses.fields(_ModelRunFields)
    ],
)


@dataclass
class TrainSchema:
    global_batch_size: int = MISSING
    micro_batch_size: int = 1
    train_iters: int = 50
    manual_gc: Optional[bool] = None
    manual_gc_interval: Optional[int] = None


@dataclass
class OptimizerSchema:
    optimizer: str = MISSING
    lr: float = 3.0e-4
    min_lr: float = 3.0e-5
    weight_decay: float = 0.1
    adam_beta1: float = 0.9
    adam_beta2: float = 0.95
    adam_eps: float = 1.0e-8
    clip_grad: float = 1.0
    use_distributed_optimizer: bool = True
    use_precision_aware_optimizer: Optional[bool] = None
    muon_momentum: Optional[float] = None
    muon_nesterov: Optional[bool] = None
    muon_split_qkv: Optional[bool] = None
    muon_scale_mode: Optional[str] = None
    muon_fp32_matmul_prec: Optional[str] = None
    muon_num_ns_steps: Optional[int] = None
    muon_tp_mode: Optional[str] = None
    muon_coefficient_type: Optional[str] = None
    muon_scalar_optimizer: Optional[str] = None


@dataclass
class SchedulerSchema:
    lr_decay_style: str = "cosine"
    lr_warmup_iters: int = 0


@dataclass
class DDPSchema:
    use_distributed_optimizer: bool = True
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    grad_reduce_in_fp32: bool = False


@dataclass
class MixedPrecisionSchema:
    fp8_param_gather: bool = False
    reuse_grad_buf_for_mxfp8_param_ag: bool = False
    grad_reduce_in_fp32: bool = False


@dataclass
class CommOverlapSchema:
    tp_comm_overlap: bool = False
    delay_wgrad_compute: bool = False
    overlap_param_gather_with_optimizer_step: bool = False


@dataclass
class PrecisionSchema:
    name: str = MISSING
    peak: str = MISSING
    aliases: List[str] = field(default_factory=list)
    min_compute_capability: Optional[float] = None  # the GPU's compute_capability must reach it (precision_needs_gpu)
    mixed_precision_recipe: str = MISSING


@dataclass
class GPUSchema:
    name: str = MISSING
    display_name: str = MISSING
    published_system: str = MISSING
    gpus_per_node: int = MISSING
    compute_capability: Optional[float] = None  # CUDA compute capability (9.0 Hopper, 10.0 / 10.3 Blackwell)
    nvlink_domain: int = MISSING
    peak_tflops: Dict[str, Optional[float]] = field(default_factory=dict)
    hbm_gb: float = MISSING  # HBM capacity per GPU, GB (1e9 B)
    hbm_bandwidth_tb_s: float = MISSING  # TB/s per GPU
    nvlink_bandwidth_gb_s: float = MISSING  # GB/s per GPU per direction
    network_bandwidth_gb_s: float = MISSING  # scale-out GB/s per GPU per direction
    memory_source: str = MISSING
    peak_table_version: str = MISSING
    source: str = MISSING


@dataclass
class PublishedRoundingSchema:
    """How a release's published performance table rounds each figure (``release.published_rounding``).

    ``integer``: a whole number (the true value lies within +-0.5). ``whole_sequences_per_job`` (tokens/s/GPU only):
    derived from a whole number of sequences per second for the whole job, so ``tokens/s/GPU x GPUs / seq_length`` is
    an integer (+-0.5 sequences/s) -- true of every row of 26.04.01, 26.06.01 and 26.08 and of almost none elsewhere
    (``bridgebench.results.compare_stats.token_rounding_consistency``; shared/reference README). Values are checked by
    ``bridgebench.results.compare_stats.release_facts`` (plain strings here keep composed configs JSON-able).
    """

    model_tflops_per_gpu: str = "integer"
    tokens_per_sec_per_gpu: str = "integer"


@dataclass
class ReleaseSchema:
    name: str = MISSING
    container_image: str = MISSING
    megatron_bridge_version: str = MISSING
    megatron_core_commit: Optional[str] = None
    flops_formula: str = MISSING
    api: str = MISSING
    published_table_source: Optional[str] = None
    note: str = ""
    published_rounding: PublishedRoundingSchema = field(default_factory=PublishedRoundingSchema)


@dataclass
class AccountingSchema:
    flops_formula: str = MISSING
    ns_kernel: str = "gemm"


@dataclass
class TunnelSchema:
    type: str = "local"  # local | ssh
    job_dir: str = MISSING
    host: Optional[str] = None
    user: Optional[str] = None


@dataclass
class ClusterSchema:
    name: str = MISSING
    account: str = MISSING
    partition: str = MISSING
    time_limit: str = "00:30:00"
    container: bool = True
    container_mounts: List[str] = field(default_factory=list)
    exclusive: bool = True
    mem: Optional[str] = None
    gpus_per_node_request: bool = False
    tunnel: TunnelSchema = field(default_factory=TunnelSchema)
    max_retries: int = 0
    pyxis: bool = True  # compute nodes can run --container-image; False: submissions run on the host
    supports_segment: bool = True  # sbatch --segment (Slurm >= 23.02 topology/block)
    client_env: Dict[str, str] = field(default_factory=dict)  # environment for sbatch/sacct on the submit side
    # what the cluster has (config/cluster_fit.py: submit refuses runs it cannot start)
    nodes: Optional[int] = None  # nodes in the partition (None: not declared; sinfo is still asked)
    gpu: Optional[str] = None  # configs/gpu name of the nodes' GPUs; None: no GPUs
    gpus_per_node: int = 0
    # a file on the submit side holding a UUID made with the cluster's state (local cluster: launch/cluster/up.sh);
    # None: the cluster name alone (job ids are then told apart by SLURM's JobName and submit time)
    identity_file: Optional[str] = None
    lost_after_s: float = 600.0  # an unfinished job SLURM has not reported for this long is marked LOST


@dataclass
class JobSchema:
    type: str = "pretrain"  # pretrain (bridgebench.payloads.pretrain) | optstep (bridgebench.payloads.optstep)
    layers: int = 1  # optstep: decoder layers whose matrices are timed
    experts: int = 2  # optstep: experts per MoE layer
    repeats: int = 5  # optstep: timed repeats
    # argv run in front of the payload command (numactl, nsys profile ..., or a test's fault injector); each item is
    # shell-quoted
    wrapper: List[str] = field(default_factory=list)


@dataclass
class PathsSchema:
    plans: str = MISSING
    ledger: str = MISSING
    results: str = MISSING
    reference: str = MISSING
    tables: str = MISSING
    hf_cache: str = MISSING
    job_dir: str = MISSING
    sweeps: str = MISSING


@dataclass
class RootSchema:
    num_gpus: int = MISSING
    model: ModelSchema = field(default_factory=ModelSchema)
    train: TrainSchema = field(default_factory=TrainSchema)
    optimizer: OptimizerSchema = field(default_factory=OptimizerSchema)
    scheduler: SchedulerSchema = field(default_factory=SchedulerSchema)
    ddp: DDPSchema = field(default_factory=DDPSchema)
    mixed_precision: MixedPrecisionSchema = field(default_factory=MixedPrecisionSchema)
    comm_overlap: CommOverlapSchema = field(default_factory=CommOverlapSchema)
    precision: PrecisionSchema = field(default_factory=PrecisionSchema)
    gpu: GPUSchema = field(default_factory=GPUSchema)
    release: ReleaseSchema = field(default_factory=ReleaseSchema)
    accounting: AccountingSchema = field(default_factory=AccountingSchema)
    env_vars: Dict[str, str] = field(default_factory=dict)
    cluster: ClusterSchema = field(default_factory=ClusterSchema)
    job: JobSchema = field(default_factory=JobSchema)
    paths: PathsSchema = field(default_factory=PathsSchema)


_REGISTERED = False


def register() -> None:
    """Store the root schema as ``base_config`` in Hydra's ConfigStore (idempotent)."""
    global _REGISTERED
    if _REGISTERED:
        return
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    ConfigStore.instance().store(name="base_config", node=RootSchema)
    # Resolvers for values that follow from others (env vars from the GPU and EP): declared once, derived everywhere.
    OmegaConf.register_new_resolver("bb.min", lambda *xs: min(int(x) for x in xs), replace=True)
    OmegaConf.register_new_resolver("bb.gt", lambda a, b: int(a) > int(b), replace=True)
    OmegaConf.register_new_resolver(
        "bb.flag", lambda b: "1" if b in (True, "True", "true", 1, "1") else "0", replace=True
    )
    _REGISTERED = True
