"""The memory model's inputs and result: :class:`MemoryConfig` (one point's parallelism, batch, optimizer, precision,
recompute and offload settings), :class:`MemoryBreakdown` (bytes per term on the busiest rank), the byte constants of
precisions and dtypes, and :func:`check_config` (the errors a point raises before anything is computed).

Sources: the bracketed tags ([MLM], [ISK], [TE], [TT], [DS], [FSDP], [PAO], [OFF]) are listed in
:mod:`bridgebench.model.memory`.
"""

from __future__ import annotations

from dataclasses import dataclass

from bridgebench.errors import BridgebenchError
from bridgebench.model.parallel import DimsView, ParallelDims
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


class MemoryModelError(BridgebenchError):
    """A point the memory model cannot evaluate; the message names the field and the rule."""


@dataclass(frozen=True, kw_only=True)
class RecomputeSettings:
    """Megatron-Core's activation recompute settings (``TransformerConfig.recompute_*``), as the memory and the time
    model read them: ``recompute_granularity`` (:data:`RECOMPUTE_GRANULARITIES`), ``recompute_method`` (full:
    ``uniform`` | ``block``), ``recompute_num_layers`` and ``recompute_modules`` (selective)."""

    recompute_granularity: str | None = None
    recompute_method: str | None = None
    recompute_num_layers: int | None = None
    recompute_modules: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class MemoryConfig(RecomputeSettings, DimsView):
    """Parallelism, batch, optimizer, precision and recompute settings of one point.

    ``dims``: the parallel sizes and batch (:class:`bridgebench.model.parallel.ParallelDims`; read as ``cfg.tp``,
    ``cfg.dp`` ... through :class:`~bridgebench.model.parallel.DimsView`; ``MemoryConfig.from_flat(num_gpus=..,
    tp=.., optimizer=..)`` builds one from flat keywords); the rest are Megatron-Core / Megatron-Bridge field names.
    ``seq_length=None`` takes the model's.

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

    dims: ParallelDims
    seq_length: int | None = None
    sequence_parallel: bool = False
    pipeline_model_parallel_layout: str | None = None
    optimizer: str = "adam"
    use_distributed_optimizer: bool = True
    precision: str = "bf16"
    fp8_param_gather: bool = False
    grad_reduce_in_fp32: bool = True
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


@dataclass(frozen=True, kw_only=True)
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


def check_config(spec: ModelSpec, cfg: MemoryConfig) -> None:
    """Refuse a point the memory model cannot evaluate, before anything is computed.

    Raises:
        MemoryModelError: a non-positive size, a world size TP x PP x CP or ETP x EP x PP does not divide, EP not
            dividing the experts, an unknown optimizer, precision, recompute granularity, FSDP strategy, framework
            or offload module, an offload fraction outside [0, 1] or a negative offloaded layer count.
    """
    dims = cfg.dims
    sizes = dims.size_problems()
    if sizes:
        raise MemoryModelError(sizes[0][1])
    grid = dims.world_size_problem() or dims.expert_grid_problem()
    if grid:
        raise MemoryModelError(grid)
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
