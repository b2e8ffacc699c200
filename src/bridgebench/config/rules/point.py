"""What the rules read and what they report: :class:`Point` (the flat numbers and flags of one run), a
:class:`Violation` (one broken rule) and :class:`RuleError` (a point that breaks rules)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bridgebench.errors import BridgebenchError
from bridgebench.model.parallel import MEGATRON_NAMES, DimsView, ParallelDims


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule: ``rule`` is a stable id from :data:`RULES`, ``message`` names the rule and its numbers,
    ``fix`` the override that makes the point valid where one does (None otherwise)."""

    rule: str
    message: str
    fix: str | None = None

    def __str__(self) -> str:
        return f"{self.rule}: {self.message}" + (f" -- fix: {self.fix}" if self.fix else "")


class RuleError(BridgebenchError):
    """A point breaks one or more rules; ``violations`` holds them, ``str()`` lists each as ``rule: message``."""

    def __init__(self, violations: list[Violation]):
        self.violations = list(violations)
        super().__init__(self.violations)

    def __str__(self) -> str:
        n = len(self.violations)
        lines = "\n".join(f"  {v}" for v in self.violations)
        return f"configuration breaks {n} rule{'s' if n != 1 else ''}:\n{lines}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Point(DimsView):
    """The flat numbers and flags of one run that the rules need.

    ``dims``: the parallel sizes and batch (:class:`bridgebench.model.parallel.ParallelDims`, read as ``p.tp`` ...;
    ``Point.from_flat(num_gpus=.., tp=.., num_layers=..)`` from flat keywords); the rest are Megatron-Bridge
    ``ConfigContainer`` field names (``use_distributed_optimizer`` is ``optimizer.use_distributed_optimizer``,
    ``ddp_use_distributed_optimizer`` and ``overlap_param_gather`` are ``ddp.*``, ``fp8_param_gather`` /
    ``reuse_grad_buf_for_mxfp8_param_ag`` are ``mixed_precision.*``, ``precision`` is bridgebench's precision name:
    bf16, fp8_cs, mxfp8, nvfp4). Defaults are those of ``configs/`` (adamw, bf16).
    """

    dims: ParallelDims
    num_layers: int
    num_attention_heads: int
    seq_length: int
    gpus_per_node: int = 8
    sequence_parallel: bool = False
    mtp_num_layers: int | None = None
    num_query_groups: int | None = None
    num_moe_experts: int | None = None
    pipeline_model_parallel_layout: str | None = None
    num_layers_in_first_pipeline_stage: int | None = None
    num_layers_in_last_pipeline_stage: int | None = None
    account_for_embedding_in_pipeline_split: bool = False
    account_for_loss_in_pipeline_split: bool = False
    optimizer: str = "adam"
    use_distributed_optimizer: bool = True
    ddp_use_distributed_optimizer: bool = True
    overlap_param_gather: bool = True
    fp8_param_gather: bool = False
    reuse_grad_buf_for_mxfp8_param_ag: bool = False
    precision: str = "bf16"
    # GPU x precision x system (configs/gpu, configs/precision, env_vars); None = not declared, rule skipped
    gpu: str = ""
    compute_capability: float | None = None
    min_compute_capability: float | None = None
    nvlink_domain: int | None = None
    segment_policy: str = "node"  # configs/gpu segment_policy (bridgebench.model.placement)
    moe_token_dispatcher_type: str | None = None
    moe_flex_dispatcher_backend: str | None = None
    overlap_moe_expert_parallel_comm: bool = False  # comm_overlap.* (rule ep_overlap_needs_vp)
    fp8_output_proj: bool = False  # model.* (rule fp8_output_proj_needs_mxfp8)
    env_nvlink_domain_size: Any = None
    env_use_mnnvl: Any = None
    env_hybrid_ep_ranks_per_nvlink_domain: Any = None

    @classmethod
    def from_config(cls, cfg: Any) -> Point:
        """Read a composed config (:func:`bridgebench.config.compose`) into a point. No Hydra compose, no import."""
        m = cfg.model
        o = cfg.optimizer
        d = cfg.ddp
        mp = cfg.mixed_precision
        return cls(
            dims=config_dims(cfg),
            gpus_per_node=cfg.gpu.gpus_per_node,
            sequence_parallel=m.sequence_parallel,
            seq_length=m.seq_length,
            num_layers=m.num_layers,
            mtp_num_layers=m.mtp_num_layers,
            num_attention_heads=m.num_attention_heads,
            num_query_groups=m.num_query_groups,
            num_moe_experts=m.num_moe_experts,
            pipeline_model_parallel_layout=m.pipeline_model_parallel_layout,
            num_layers_in_first_pipeline_stage=m.num_layers_in_first_pipeline_stage,
            num_layers_in_last_pipeline_stage=m.num_layers_in_last_pipeline_stage,
            account_for_embedding_in_pipeline_split=m.account_for_embedding_in_pipeline_split,
            account_for_loss_in_pipeline_split=m.account_for_loss_in_pipeline_split,
            optimizer=o.optimizer,
            use_distributed_optimizer=o.use_distributed_optimizer,
            ddp_use_distributed_optimizer=d.use_distributed_optimizer,
            overlap_param_gather=d.overlap_param_gather,
            fp8_param_gather=mp.fp8_param_gather,
            reuse_grad_buf_for_mxfp8_param_ag=mp.reuse_grad_buf_for_mxfp8_param_ag,
            precision=cfg.precision.name,
            gpu=str(cfg.gpu.name),
            compute_capability=cfg.gpu.get("compute_capability"),
            min_compute_capability=cfg.precision.get("min_compute_capability"),
            nvlink_domain=cfg.gpu.get("nvlink_domain"),
            segment_policy=str(cfg.gpu.get("segment_policy") or "node"),
            **_dispatch(cfg),
            overlap_moe_expert_parallel_comm=bool(
                (cfg.get("comm_overlap") or {}).get("overlap_moe_expert_parallel_comm") or False
            ),
            fp8_output_proj=bool(m.get("fp8_output_proj") or False),
            env_nvlink_domain_size=env_value(cfg, "NVLINK_DOMAIN_SIZE"),
            env_use_mnnvl=env_value(cfg, "USE_MNNVL"),
            env_hybrid_ep_ranks_per_nvlink_domain=env_value(cfg, "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN"),
        )

    def replace(self, **changes: Any) -> Point:
        """A copy with some fields changed, sizes (``tp``, ``gbs`` ...) included (:meth:`DimsView.with_dims`)."""
        return self.with_dims(**changes)


def _dispatch(cfg: Any) -> dict[str, Any]:
    """The dispatcher fields of a composed config as the build keeps them: the config's, else its base recipe's
    (:data:`bridgebench.config.schema.DISPATCH_FIELDS`, :func:`~bridgebench.config.schema.start_values`), as the
    sweep engine reads them."""
    m = cfg.model
    keys = ("moe_token_dispatcher_type", "moe_flex_dispatcher_backend")
    out = {k: m.get(k) for k in keys}
    if any(k not in m for k in keys):
        from bridgebench.config.schema import SectionError, start_values

        try:
            starts = start_values(str(m.name), str(cfg.precision.mixed_precision_recipe))
        except SectionError:
            return out
        out.update({k: starts.get(f"model.{k}") for k in keys if k not in m})
    return out


def config_dims(cfg: Any) -> ParallelDims:
    """The parallel sizes of a composed config (:func:`bridgebench.config.compose`): ``num_gpus``, the
    ``model.*_parallel_size`` fields and ``train.micro_batch_size`` / ``train.global_batch_size``
    (:data:`bridgebench.model.parallel.MEGATRON_NAMES`), values as given (:meth:`ParallelDims.problems` judges them)."""
    sizes = {short: getattr(cfg.train if name in _TRAIN else cfg.model, name) for name, short in MEGATRON_NAMES.items()}
    return ParallelDims(num_gpus=cfg.num_gpus, **sizes)


#: the sizes :func:`config_dims` reads from the ``train`` section (the rest are ``model`` fields)
_TRAIN = ("micro_batch_size", "global_batch_size")


def env_value(cfg: Any, key: str) -> Any:
    """``env_vars[key]`` as an int when it is one (env values are strings), else as given; None when unset."""
    env = cfg.get("env_vars") if hasattr(cfg, "get") else None
    value = env.get(key) if env is not None else None
    if value is None:
        return None
    try:
        return int(str(value).strip())
    except ValueError:
        return str(value)
