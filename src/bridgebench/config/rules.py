"""Fast validity rules for one benchmark point, checked before anything is built or submitted.

Sweeps call :func:`check` on thousands of points, so this module is pure Python (stdlib only: no torch, megatron,
Hydra or OmegaConf import) and does no Hydra compose: a composed config is read once into a flat :class:`Point`
(:meth:`Point.from_config`), or a sweep builds :class:`Point` objects directly from numbers. :func:`check` returns all
violations (empty list = valid); :func:`validate` raises :class:`RuleError` listing them. Each rule is one
:class:`Rule` in :data:`RULES` (id, upstream source, one-line summary); the longer explanation of each is in
``docs/rules.md``. Versions: parallelism rules follow megatron-core 0.19.2 / megatron-bridge 0.6.2 (paths relative to
``site-packages/megatron/``); the Muon rules reproduce the Megatron-Bridge v0.3.1 perf recipe (NeMo 26.02).
"""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from bridgebench.errors import BridgebenchError
from bridgebench.model.layout import LAYOUT_MAX_CHARS, _parse_layout_cached, parse_layout  # noqa: F401  (re-exported)
from bridgebench.model.optimizer import family as optimizer_family

__all__ = [
    "NON_POINT_RULES",
    "RULES",
    "Point",
    "RuleError",
    "Violation",
    "check",
    "check_config",
    "parse_layout",
    "validate",
]


@dataclass(frozen=True, slots=True)
class Rule:
    """One validity rule: a stable ``id``, the upstream ``source`` that enforces it, a one-line ``summary``."""

    id: str
    source: str
    summary: str


#: every rule, by id (explanations: docs/rules.md)
RULES: dict[str, Rule] = {
    r.id: r
    for r in (
        Rule(
            "positive_int",
            "bridgebench (sizes must be positive integers)",
            "sizes are positive integers (mtp_num_layers may be 0)",
        ),
        Rule(
            "world_size",
            "megatron/core/parallel_state.py initialize_model_parallel; "
            "megatron/bridge/training/config.py ConfigContainer.get_data_parallel_size",
            "num_gpus is divisible by TP x PP x CP",
        ),
        Rule(
            "expert_grid",
            "megatron/core/parallel_state.py initialize_model_parallel (expert rank generator)",
            "num_gpus is divisible by ETP x EP x PP (integer expert data-parallel size)",
        ),
        Rule(
            "ep_needs_moe",
            "megatron/core/transformer/transformer_config.py TransformerConfig.__post_init__",
            "EP > 1 needs a MoE model",
        ),
        Rule(
            "experts_divisible",
            "megatron/core/transformer/moe/moe_layer.py BaseMoELayer.__init__",
            "EP divides num_moe_experts",
        ),
        Rule(
            "gbs_divisible",
            "megatron/core/num_microbatches_calculator.py ConstantNumMicroBatchesCalculator",
            "GBS is divisible by MBS x DP",
        ),
        Rule(
            "microbatches_interleaved",
            "megatron/core/pipeline_parallel/schedules.py forward_backward_pipelining_with_interleaving",
            "with the interleaved schedule, GBS / (MBS x DP) is a multiple of PP",
        ),
        Rule(
            "layers_fit_pp_vp",
            "megatron/core/transformer/transformer_block.py get_num_layers_to_build; "
            "megatron/core/transformer/transformer_config.py TransformerConfig.__post_init__ (uneven PP)",
            "decoder layers split over PP x VP stages (even, or the uneven-PP branches)",
        ),
        Rule(
            "pipeline_split_conflict",
            "megatron/core/transformer/transformer_config.py TransformerConfig.__post_init__",
            "layout, first/last-stage layer counts and account_for_* exclude each other",
        ),
        Rule(
            "layout_syntax",
            "megatron/core/transformer/pipeline_parallel_layer_layout.py parse_str_to_list",
            "pipeline_model_parallel_layout follows Megatron-Core's grammar",
        ),
        Rule(
            "layout_stages",
            "megatron/core/transformer/pipeline_parallel_layer_layout.py __init__; "
            "TransformerConfig.__post_init__ (VP vs layout)",
            "the layout has PP x VP stages",
        ),
        Rule(
            "layout_layers",
            "megatron/core/transformer/pipeline_parallel_layer_layout.py validate_layer_layout",
            "one E first, one L last, num_layers t, mtp_num_layers m in the last virtual stage",
        ),
        Rule(
            "heads_divisible_tp",
            "megatron/core/transformer/transformer_config.py TransformerConfig.__post_init__",
            "num_attention_heads is divisible by TP",
        ),
        Rule(
            "query_groups_divisible_tp",
            "megatron/core/transformer/transformer_config.py TransformerConfig.__post_init__",
            "num_query_groups is a multiple or a divisor of TP",
        ),
        Rule(
            "sequence_parallel_needs_tp",
            "megatron/core/model_parallel_config.py ModelParallelConfig.__post_init__",
            "sequence_parallel needs TP > 1",
        ),
        Rule(
            "vp_needs_pp",
            "megatron/core/parallel_state.py initialize_model_parallel",
            "a VP size needs PP > 1",
        ),
        Rule(
            "seq_divisible_cp",
            "megatron/bridge/training/config.py ConfigContainer.validate",
            "with CP > 1, seq_length is divisible by 2 x CP",
        ),
        Rule(
            "seq_divisible_tp_sp",
            "megatron/core/tensor_parallel/mappings.py _split_along_first_dim",
            "with sequence parallelism, seq_length is divisible by TP x CP",
        ),
        Rule(
            "gpus_per_node",
            "bridgebench (whole nodes, or one partial node)",
            "jobs use whole nodes, or one partial node that divides gpus_per_node",
        ),
        Rule(
            "muon_dist_optimizer",
            "Megatron-Bridge v0.3.1 recipes/kimi/kimi_k2.py + scripts/performance/configs/kimi/"
            "kimi_llm_pretrain.py; megatron-core 55ac7082 core/optimizer/muon.py, "
            "training/arguments.py; bridge 0.6.2 _validate_and_sync_distributed_optimizer_settings",
            "Muon needs optimizer.use_distributed_optimizer = ddp.use_distributed_optimizer = false",
        ),
        Rule(
            "muon_overlap_param_gather",
            "Megatron-Bridge v0.3.1 recipes/kimi/kimi_k2.py; megatron-core 55ac7082 training/arguments.py",
            "Muon needs ddp.overlap_param_gather = false",
        ),
        Rule(
            "muon_fp8_param_gather",
            "Megatron-Bridge v0.3.1 scripts/performance/configs/kimi/kimi_llm_pretrain.py set_kimi_k2_common_configs",
            "Muon under MXFP8 needs mixed_precision.fp8_param_gather = false",
        ),
        Rule(
            "muon_reuse_grad_buf",
            "Megatron-Bridge v0.3.1 scripts/performance/configs/kimi/kimi_llm_pretrain.py set_kimi_k2_common_configs",
            "Muon under MXFP8 needs reuse_grad_buf_for_mxfp8_param_ag = false",
        ),
        Rule(
            "reuse_grad_buf_needs_fp8_param_gather",
            "megatron/core/distributed/distributed_data_parallel_config.py __post_init__",
            "reuse_grad_buf_for_mxfp8_param_ag needs fp8_param_gather",
        ),
        Rule(
            "mxfp8_param_gather_needs_reuse_grad_buf",
            "megatron/bridge/training/config.py ConfigContainer.validate",
            "under MXFP8, fp8_param_gather needs reuse_grad_buf_for_mxfp8_param_ag",
        ),
        Rule(
            "fp8_param_gather_needs_fp8",
            "megatron/bridge/training/mixed_precision.py (fp8_param = fp8_param_gather); "
            "TransformerConfig.__post_init__",
            "fp8_param_gather needs an FP8 precision",
        ),
        Rule(
            "precision_needs_gpu",
            "Transformer Engine 2.x transformer_engine/pytorch/quantization.py (fp8.py before 2.8) "
            "check_fp8_support / check_mxfp8_support / check_nvfp4_support; compute capabilities: CUDA C++ "
            "Programming Guide, 'Compute Capabilities' table",
            "the GPU's compute capability (configs/gpu) reaches the precision's minimum (configs/precision): "
            "MXFP8 and NVFP4 need Blackwell (10.0), FP8 needs 8.9",
        ),
        Rule(
            "nvlink_env_matches_gpu",
            "Megatron-Bridge 0.6.2 recipes/moonlight/h100/moonlight_16b.py (NVLINK_DOMAIN_SIZE 8, USE_MNNVL 0) and "
            "recipes/qwen/gb200/qwen3_moe.py (72, 1); v0.3.1 scripts/performance/perf_plugins.py",
            "HybridEP's NVLINK_DOMAIN_SIZE is the GPU system's NVLink domain, USE_MNNVL=1 only where the domain spans "
            "nodes (NVL72), NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN fits the domain",
        ),
        Rule(
            "secret_in_config",
            "bridgebench (README 'Secrets': jobs get credentials from the submitting environment); token formats: "
            "GitHub ghp_/gho_/ghu_/ghs_/ghr_/github_pat_, Hugging Face hf_, OpenAI/Anthropic sk-, Slack xox?-, "
            "AWS AKIA/ASIA key ids, Google AIza, GitLab glpat-, NVIDIA nvapi-, PEM private keys, JWTs",
            "no environment variable whose name (TOKEN, KEY, SECRET, PASSWORD, CREDENTIAL ...) or value looks like "
            "a credential goes into a config, plan or script",
        ),
        Rule(
            "env_resolver",
            "bridgebench (README 'Secrets'); OmegaConf 2.3 resolvers oc.env / oc.decode read the environment at "
            "resolve time, and plans, scripts and records hold resolved values",
            "no value read from the environment or a file by a resolver is written: env_vars.NAME: ${oc.env:VAR} is "
            "passed by name (the job reads $VAR on the node), BRIDGEBENCH_*/SLURM_* settings resolve, the rest is "
            "refused",
        ),
        Rule(
            "shell_safe_value",
            "bridgebench launch/shellsafe.py; nemo-run 0.11.1 core/execution/slurm.py SlurmBatchRequest.materialize "
            "(srun words unquoted: noquote is an alias of str; export lines as given; #SBATCH via shlex.quote)",
            "every value that reaches sbatch, srun, an #SBATCH line or the job script matches a strict grammar "
            "(names, paths, mounts, image, time, memory, env names, job ids) or is quoted (env values, wrapper words)",
        ),
        Rule(
            "cluster_nodes",
            "bridgebench (configs/cluster/<name>.yaml nodes, and sinfo's node count of the partition); SLURM keeps "
            "such a job PENDING forever (reason PartitionNodeLimit / PartitionConfig)",
            "the run's nodes fit the cluster's partition",
        ),
        Rule(
            "cluster_gpus",
            "bridgebench (configs/cluster/<name>.yaml gpu, gpus_per_node)",
            "a GPU run goes to a cluster whose nodes carry that GPU, enough of them per node",
        ),
        Rule(
            "cluster_container",
            "bridgebench (configs/cluster/<name>.yaml pyxis); pretrain runs need the release's NeMo container",
            "a pretrain run goes to a cluster that can start containers (pyxis/enroot)",
        ),
        Rule(
            "collect_partial",
            "bridgebench launch/collect.py (job folders are written by the job: untrusted input); exit code 5",
            "an attempt collect cannot read (symlink loop, a result file that is not the payload's object, logs not "
            "fetched, a clashing record) is set aside with its reason; the rest are collected; exit code 5",
        ),
        Rule(
            "yaml_bounds",
            "bridgebench config/bounds.py (PyYAML 6 yaml.compose node graph; 'billion laughs', CVE-2003-1564 class)",
            "a user config file is at most 1 MiB and expands to at most 100,000 YAML nodes with its aliases followed",
        ),
        Rule(
            "config_name_confined",
            "bridgebench config/bounds.py (Hydra 1.3 loads <group>/<option>.yaml from the search path as named)",
            "an option name is a file name of its group (no '/' or '..', also with @package); a user config file or "
            "group folder does not link out of $BRIDGEBENCH_CONFIG_DIR",
        ),
        Rule(
            "config_range",
            "bridgebench config/bounds.py (pydantic); megatron/core/transformer/transformer_config.py __post_init__ "
            "(kv_channels = hidden_size // num_attention_heads; num_attention_heads % num_query_groups)",
            "model sizes positive and under stated caps (4096 layers, 2^20 hidden, 2^16 experts ...), hidden_size "
            "divisible by num_attention_heads without kv_channels; GPU peaks, memory and bandwidths positive; "
            "cluster counts in range",
        ),
        Rule(
            "sweep_space_cap",
            "bridgebench config/sweep/space.py (each stage keeps its point rows in memory)",
            "a search space holds at most 200,000 points, counted from the axes' lengths before any is built",
        ),
        Rule(
            "out_is_folder",
            "bridgebench cli/app.py out_folder",
            "--out names a folder; an existing file there is refused, never written over",
        ),
        Rule(
            "sweep_state_corrupt",
            "bridgebench launch/sweep.py (state.json: which stages are done, what was planned and submitted)",
            "sweep --resume refuses a state.json that is not the JSON object a sweep writes (a corrupt stage file "
            "is redone instead)",
        ),
    )
}

#: rules judged on a composed config or on a cluster, not on a :class:`Point` (config/secrets.py and
#: config/cluster_fit.py); every other rule is judged by :func:`check`.
NON_POINT_RULES = frozenset(
    {
        "secret_in_config",
        "env_resolver",
        "shell_safe_value",
        "cluster_nodes",
        "cluster_gpus",
        "cluster_container",
        "collect_partial",
        "yaml_bounds",
        "config_name_confined",
        "config_range",
        "sweep_space_cap",
        "out_is_folder",
        "sweep_state_corrupt",
    }
)

#: GPU architecture by compute-capability major version (messages only).
_ARCH = {8: "Ampere/Ada", 9: "Hopper", 10: "Blackwell", 12: "Blackwell (consumer)"}


def _arch(cc: float) -> str:
    return _ARCH.get(int(cc), f"sm_{int(cc * 10)}")


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule: ``rule`` is a stable id from :data:`RULES`, ``message`` names the rule and its numbers."""

    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.message}"


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
class Point:
    """The flat numbers and flags of one run that the rules need.

    Names: ``tp pp vp cp ep etp`` are the Megatron-Core tensor / pipeline / virtual-pipeline / context / expert /
    expert-tensor parallel sizes (``etp=None`` means "= TP", ``vp=None`` means no interleaving); ``mbs``/``gbs`` the
    micro / global batch sizes; the rest are Megatron-Bridge ``ConfigContainer`` field names
    (``use_distributed_optimizer`` is ``optimizer.use_distributed_optimizer``, ``ddp_use_distributed_optimizer`` and
    ``overlap_param_gather`` are ``ddp.*``, ``fp8_param_gather`` / ``reuse_grad_buf_for_mxfp8_param_ag`` are
    ``mixed_precision.*``, ``precision`` is bridgebench's precision name: bf16, fp8_cs, mxfp8, nvfp4).
    Defaults are those of ``configs/`` (adamw, bf16).
    """

    num_gpus: int
    num_layers: int
    num_attention_heads: int
    seq_length: int
    gbs: int
    mbs: int = 1
    gpus_per_node: int = 8
    tp: int = 1
    pp: int = 1
    vp: int | None = None
    cp: int = 1
    ep: int = 1
    etp: int | None = None
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
    env_nvlink_domain_size: Any = None
    env_use_mnnvl: Any = None
    env_hybrid_ep_ranks_per_nvlink_domain: Any = None

    @classmethod
    def from_config(cls, cfg: Any) -> Point:
        """Read a composed config (:func:`bridgebench.config.compose`) into a point. No Hydra compose, no import."""
        m = cfg.model
        t = cfg.train
        o = cfg.optimizer
        d = cfg.ddp
        mp = cfg.mixed_precision
        return cls(
            num_gpus=cfg.num_gpus,
            gpus_per_node=cfg.gpu.gpus_per_node,
            tp=m.tensor_model_parallel_size,
            pp=m.pipeline_model_parallel_size,
            vp=m.virtual_pipeline_model_parallel_size,
            cp=m.context_parallel_size,
            ep=m.expert_model_parallel_size,
            etp=m.expert_tensor_parallel_size,
            sequence_parallel=m.sequence_parallel,
            mbs=t.micro_batch_size,
            gbs=t.global_batch_size,
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
            env_nvlink_domain_size=_env(cfg, "NVLINK_DOMAIN_SIZE"),
            env_use_mnnvl=_env(cfg, "USE_MNNVL"),
            env_hybrid_ep_ranks_per_nvlink_domain=_env(cfg, "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN"),
        )

    def replace(self, **changes: Any) -> Point:
        """A copy with some fields changed (``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)


def _env(cfg: Any, key: str) -> Any:
    """``env_vars[key]`` as an int when it is one (env values are strings), else as given; None when unset."""
    env = cfg.get("env_vars") if hasattr(cfg, "get") else None
    value = env.get(key) if env is not None else None
    if value is None:
        return None
    try:
        return int(str(value).strip())
    except ValueError:
        return str(value)


# ---------------------------------------------------------------------------------------------------- size types
_REQUIRED_POSITIVE = (
    "num_gpus",
    "num_layers",
    "num_attention_heads",
    "seq_length",
    "gbs",
    "mbs",
    "gpus_per_node",
    "tp",
    "pp",
    "cp",
    "ep",
)
_OPTIONAL_POSITIVE = (
    "vp",
    "etp",
    "num_query_groups",
    "num_moe_experts",
    "num_layers_in_first_pipeline_stage",
    "num_layers_in_last_pipeline_stage",
)


def _is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _size_violations(p: Point) -> tuple[list[Violation], Point | None]:
    """Slow path: name every bad size; or, when all are integral (e.g. numpy ints), a copy with plain ints."""
    out = []
    fixed = {}
    for name in _REQUIRED_POSITIVE:
        v = getattr(p, name)
        if not _is_int(v) or v < 1:
            out.append(Violation("positive_int", f"{name} must be a positive integer, got {v!r}"))
        else:
            fixed[name] = int(v)
    for name in _OPTIONAL_POSITIVE:
        v = getattr(p, name)
        if v is not None and (not _is_int(v) or v < 1):
            out.append(Violation("positive_int", f"{name} must be a positive integer or None, got {v!r}"))
        elif v is not None:
            fixed[name] = int(v)
    v = p.mtp_num_layers
    if v is not None and (not _is_int(v) or v < 0):
        out.append(Violation("positive_int", f"mtp_num_layers must be a non-negative integer or None, got {v!r}"))
    elif v is not None:
        fixed["mtp_num_layers"] = int(v)
    layout = p.pipeline_model_parallel_layout
    if layout is not None and not isinstance(layout, str):
        out.append(
            Violation(
                "layout_syntax", f"pipeline_model_parallel_layout must be a string or None, got {type(layout).__name__}"
            )
        )
    return out, (None if out else dataclasses.replace(p, **fixed))


# ---------------------------------------------------------------------------------------------------- layouts


@lru_cache(maxsize=4096)
def _layout_violations(
    layout: str, pp: int, vp: int | None, num_layers: int, mtp: int
) -> tuple[int | None, tuple[Violation, ...]]:
    """(effective VP, violations) of a layout string, as Megatron-Core's layout class and TransformerConfig."""
    stages, error = _parse_layout_cached(layout)
    if stages is None:
        return vp, (Violation("layout_syntax", error),)
    n = len(stages)
    if n % pp:
        return vp, (
            Violation(
                "layout_stages",
                f"layout {layout!r} has {n} stages, which is not a multiple of PP = {pp} (it must have PP x VP stages)",
            ),
        )
    detected = n // pp
    out = []
    if vp is not None and vp != detected:
        out.append(
            Violation(
                "layout_stages",
                f"layout {layout!r} has {n} stages = PP x {detected} but VP = {vp}: "
                f"it must have PP x VP = {pp} x {vp} = {pp * vp} stages",
            )
        )
    eff_vp = vp if vp is not None else (detected if detected > 1 else None)
    flat = "".join(stages)

    def bad(message: str) -> None:
        out.append(Violation("layout_layers", f"layout {layout!r}: {message}"))

    if not flat or flat[0] != "E":
        bad(f"the first layer must be the embedding E, got {flat[:1] or 'nothing'!r}")
    if not flat or flat[-1] != "L":
        bad(f"the last layer must be the loss L, got {flat[-1:] or 'nothing'!r}")
    if flat.count("E") != 1:
        bad(f"the embedding E must appear exactly once, found {flat.count('E')}")
    if flat.count("L") != 1:
        bad(f"the loss L must appear exactly once, found {flat.count('L')}")
    if flat.count("t") != num_layers:
        bad(f"it has {flat.count('t')} decoder layers t, num_layers is {num_layers}")
    n_m = flat.count("m")
    if n_m != mtp:
        bad(f"it has {n_m} MTP layers m, mtp_num_layers is {mtp}")
    if n_m:
        if "t" in flat[flat.index("m") :]:
            bad("decoder layers t must all come before the MTP layers m")
        # layout[pp_rank][vpp_rank] = stages[vpp_rank * PP + pp_rank]
        for i, stage in enumerate(stages):
            if "m" in stage:
                if i // pp < detected - 1:
                    bad(
                        f"MTP layers must be in the last virtual stage of their pipeline rank, found in stage {i} "
                        f"(pipeline rank {i % pp}, virtual stage {i // pp} of {detected})"
                    )
                elif stage.count("m") != mtp:
                    bad(f"all {mtp} MTP layers must be in one stage, stage {i} has {stage.count('m')}")
    return eff_vp, tuple(out)


# ---------------------------------------------------------------------------------------------------- layer split
def _split_violations(p: Point, pp: int, vp: int | None, num_layers: int) -> list[Violation]:
    """Layer split without a layout: Megatron-Core's uneven / account_for / even branches."""
    first = p.num_layers_in_first_pipeline_stage
    last = p.num_layers_in_last_pipeline_stage
    out = []
    if first is not None or last is not None:
        if vp is not None:
            for name, value in (("first", first), ("last", last)):
                if value is not None and value % vp:
                    out.append(
                        Violation(
                            "layers_fit_pp_vp",
                            f"num_layers_in_{name}_pipeline_stage {value} is not divisible by VP = {vp}",
                        )
                    )
        stages = pp - (first is not None) - (last is not None)
        middle = num_layers - (first or 0) - (last or 0)
        if stages < 0:
            return out + [
                Violation(
                    "layers_fit_pp_vp",
                    f"num_layers_in_first_pipeline_stage and "
                    f"num_layers_in_last_pipeline_stage are both set but PP = "
                    f"{pp} has a single stage",
                )
            ]
        if middle < 0:
            return out + [
                Violation(
                    "layers_fit_pp_vp",
                    f"num_layers_in_first/last_pipeline_stage ({first} + {last}) exceed num_layers {num_layers}",
                )
            ]
        if bool(middle) != bool(stages):
            return out + [
                Violation(
                    "layers_fit_pp_vp",
                    f"{middle} layers are left for {stages} middle pipeline "
                    f"stages (num_layers {num_layers}, first {first}, last "
                    f"{last}, PP = {pp})",
                )
            ]
        if stages:
            if middle % stages:
                out.append(
                    Violation(
                        "layers_fit_pp_vp",
                        f"{middle} middle layers are not divisible by the {stages} "
                        f"middle pipeline stages (num_layers {num_layers}, first "
                        f"{first}, last {last}, PP = {pp})",
                    )
                )
            elif vp is not None and (middle // stages) % vp:
                out.append(
                    Violation(
                        "layers_fit_pp_vp",
                        f"layers per middle pipeline stage {middle // stages} is not divisible by VP = {vp}",
                    )
                )
        return out
    extra = p.account_for_embedding_in_pipeline_split + p.account_for_loss_in_pipeline_split
    if extra:
        total = num_layers + extra
        if total % pp:
            return [
                Violation(
                    "layers_fit_pp_vp",
                    f"num_layers {num_layers} + {extra} (embedding/loss counted as "
                    f"layers) = {total} is not divisible by PP = {pp}",
                )
            ]
        if vp is not None and (total // pp) % vp:
            return [
                Violation(
                    "layers_fit_pp_vp",
                    f"layers per pipeline stage {total // pp} ((num_layers "
                    f"{num_layers} + {extra}) / PP {pp}) is not divisible by VP = "
                    f"{vp}",
                )
            ]
        return out
    if num_layers % pp:
        return [
            Violation(
                "layers_fit_pp_vp",
                f"num_layers {num_layers} is not divisible by PP = {pp} (even split; "
                f"an uneven one needs pipeline_model_parallel_layout, "
                f"num_layers_in_first/last_pipeline_stage or account_for_*)",
            )
        ]
    if vp is not None and pp > 1 and (num_layers // pp) % vp:
        return [
            Violation(
                "layers_fit_pp_vp",
                f"layers per pipeline stage {num_layers // pp} (num_layers "
                f"{num_layers} / PP {pp}) is not divisible by VP = {vp}",
            )
        ]
    return out


# ---------------------------------------------------------------------------------------------------- check
def check(p: Point) -> list[Violation]:
    """All rules broken by ``p`` (empty list = valid). Pure Python; see the module docstring for each rule's source."""
    for v in (
        p.num_gpus,
        p.num_layers,
        p.num_attention_heads,
        p.seq_length,
        p.gbs,
        p.mbs,
        p.gpus_per_node,
        p.tp,
        p.pp,
        p.cp,
        p.ep,
    ):
        if type(v) is not int or v < 1:
            return _slow_path(p)
    for v in (
        p.vp,
        p.etp,
        p.num_query_groups,
        p.num_moe_experts,
        p.num_layers_in_first_pipeline_stage,
        p.num_layers_in_last_pipeline_stage,
    ):
        if v is not None and (type(v) is not int or v < 1):
            return _slow_path(p)
    mtp = p.mtp_num_layers
    if mtp is None:
        mtp = 0
    elif type(mtp) is not int or mtp < 0:
        return _slow_path(p)

    out: list[Violation] = []
    n = p.num_gpus
    tp, pp, cp, ep = p.tp, p.pp, p.cp, p.ep
    etp = tp if p.etp is None else p.etp

    # world size = TP x PP x CP x DP
    model = tp * pp * cp
    dp = 0
    if n % model:
        out.append(
            Violation("world_size", f"world size {n} is not divisible by TP x PP x CP = {tp} x {pp} x {cp} = {model}")
        )
    else:
        dp = n // model

    gpn = p.gpus_per_node
    if n % gpn and (n > gpn or gpn % n):
        out.append(
            Violation(
                "gpus_per_node",
                f"num_gpus {n} is not a multiple of gpus_per_node {gpn} (nor a "
                f"divisor of it, for a single partial node)",
            )
        )

    # expert grid: ETP x EP x PP x expert-DP = world size
    egrid = etp * ep * pp
    if n % egrid:
        out.append(
            Violation(
                "expert_grid",
                f"world size {n} is not divisible by ETP x EP x PP = {etp} x {ep} x "
                f"{pp} = {egrid} (expert data-parallel size must be an integer)",
            )
        )
    experts = p.num_moe_experts
    if experts is None:
        if ep > 1:
            out.append(Violation("ep_needs_moe", f"EP = {ep} needs a MoE model (num_moe_experts is None)"))
    elif experts % ep:
        out.append(Violation("experts_divisible", f"num_moe_experts {experts} is not divisible by EP = {ep}"))

    heads = p.num_attention_heads
    if heads % tp:
        out.append(Violation("heads_divisible_tp", f"num_attention_heads {heads} is not divisible by TP = {tp}"))
    groups = p.num_query_groups or heads
    if groups % tp and tp % groups:
        out.append(
            Violation(
                "query_groups_divisible_tp",
                f"num_query_groups {groups} is neither a multiple nor a divisor of TP = {tp}",
            )
        )
    if p.sequence_parallel and tp == 1:
        out.append(Violation("sequence_parallel_needs_tp", "sequence_parallel needs TP > 1, TP = 1"))

    seq = p.seq_length
    if cp > 1 and seq % (2 * cp):
        out.append(Violation("seq_divisible_cp", f"seq_length {seq} is not divisible by 2 x CP = 2 x {cp} = {2 * cp}"))
    if p.sequence_parallel and tp > 1 and seq % (tp * cp):
        out.append(
            Violation(
                "seq_divisible_tp_sp",
                f"seq_length {seq} is not divisible by TP x CP = {tp} x {cp} "
                f"= {tp * cp} (sequence parallelism splits each CP rank's "
                f"tokens over TP)",
            )
        )

    # layers over PP x VP
    vp = p.vp
    layout = p.pipeline_model_parallel_layout
    if layout is not None and type(layout) is not str:
        return _slow_path(p)
    first, last = p.num_layers_in_first_pipeline_stage, p.num_layers_in_last_pipeline_stage
    account = p.account_for_embedding_in_pipeline_split or p.account_for_loss_in_pipeline_split
    if (first is not None or last is not None) and account:
        out.append(
            Violation(
                "pipeline_split_conflict",
                "num_layers_in_first/last_pipeline_stage cannot be set "
                "together with account_for_embedding/loss_in_pipeline_split",
            )
        )
    if layout is not None:
        if first is not None or last is not None or account:
            out.append(
                Violation(
                    "pipeline_split_conflict",
                    "pipeline_model_parallel_layout cannot be set together "
                    "with num_layers_in_first/last_pipeline_stage or "
                    "account_for_embedding/loss_in_pipeline_split",
                )
            )
        vp, found = _layout_violations(layout, pp, vp, p.num_layers, mtp)
        out.extend(found)
    else:
        out.extend(_split_violations(p, pp, vp, p.num_layers))
    if vp is not None and pp == 1:
        out.append(Violation("vp_needs_pp", f"VP = {vp} (interleaved schedule) needs PP > 1, PP = 1"))

    # batch
    if dp:
        mbs, gbs = p.mbs, p.gbs
        mdp = mbs * dp
        if gbs % mdp:
            out.append(
                Violation(
                    "gbs_divisible", f"global batch size {gbs} is not divisible by MBS x DP = {mbs} x {dp} = {mdp}"
                )
            )
        elif vp is not None and pp > 1 and (gbs // mdp) % pp:
            out.append(
                Violation(
                    "microbatches_interleaved",
                    f"{gbs // mdp} micro-batches (GBS {gbs} / (MBS {mbs} "
                    f"x DP {dp})) is not a multiple of PP = {pp}, as the "
                    f"interleaved schedule (VP = {vp}) needs",
                )
            )

    # optimizer and precision
    mxfp8 = "mxfp8" in p.precision
    if optimizer_family(p.optimizer) == "muon":
        on = [
            name
            for name, flag in (
                ("optimizer.use_distributed_optimizer", p.use_distributed_optimizer),
                ("ddp.use_distributed_optimizer", p.ddp_use_distributed_optimizer),
            )
            if flag
        ]
        if on:
            out.append(
                Violation(
                    "muon_dist_optimizer",
                    f"optimizer {p.optimizer!r} needs "
                    f"optimizer.use_distributed_optimizer = false and "
                    f"ddp.use_distributed_optimizer = false, but "
                    f"{' and '.join(on)} = true",
                )
            )
        if p.overlap_param_gather:
            out.append(
                Violation(
                    "muon_overlap_param_gather", f"optimizer {p.optimizer!r} needs ddp.overlap_param_gather = false"
                )
            )
        if mxfp8 and p.fp8_param_gather:
            out.append(
                Violation(
                    "muon_fp8_param_gather",
                    f"optimizer {p.optimizer!r} under {p.precision} needs mixed_precision.fp8_param_gather = false",
                )
            )
        if mxfp8 and p.reuse_grad_buf_for_mxfp8_param_ag:
            out.append(
                Violation(
                    "muon_reuse_grad_buf",
                    f"optimizer {p.optimizer!r} under {p.precision} needs "
                    f"mixed_precision.reuse_grad_buf_for_mxfp8_param_ag = false",
                )
            )
    if p.reuse_grad_buf_for_mxfp8_param_ag and not p.fp8_param_gather:
        out.append(
            Violation(
                "reuse_grad_buf_needs_fp8_param_gather",
                "reuse_grad_buf_for_mxfp8_param_ag = true needs fp8_param_gather = true",
            )
        )
    if p.fp8_param_gather:
        if "fp8" not in p.precision:
            out.append(
                Violation(
                    "fp8_param_gather_needs_fp8",
                    f"fp8_param_gather = true needs an FP8 precision, precision is {p.precision}",
                )
            )
        elif mxfp8 and not p.reuse_grad_buf_for_mxfp8_param_ag:
            out.append(
                Violation(
                    "mxfp8_param_gather_needs_reuse_grad_buf",
                    "under mxfp8, fp8_param_gather = true needs reuse_grad_buf_for_mxfp8_param_ag = true",
                )
            )
    out.extend(_system_violations(p))
    return out


def _system_violations(p: Point) -> list[Violation]:
    """GPU x precision x system: precision_needs_gpu and nvlink_env_matches_gpu (see :data:`RULES`)."""
    out = []
    cc, need = p.compute_capability, p.min_compute_capability
    if cc is not None and need is not None and float(cc) < float(need):
        out.append(
            Violation(
                "precision_needs_gpu",
                f"precision {p.precision} needs compute capability >= {float(need):.1f} ({_arch(float(need))}); "
                f"gpu {p.gpu or '?'} has {float(cc):.1f} ({_arch(float(cc))})",
            )
        )
    domain = p.nvlink_domain
    if domain is None:
        return out
    size, mnnvl, ranks = p.env_nvlink_domain_size, p.env_use_mnnvl, p.env_hybrid_ep_ranks_per_nvlink_domain
    for name, value in (
        ("NVLINK_DOMAIN_SIZE", size),
        ("USE_MNNVL", mnnvl),
        ("NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN", ranks),
    ):
        if value is not None and (type(value) is not int or value < 0):
            out.append(Violation("nvlink_env_matches_gpu", f"env {name}={value!r} is not a non-negative integer"))
    if type(size) is int and size != domain:
        out.append(
            Violation(
                "nvlink_env_matches_gpu",
                f"env NVLINK_DOMAIN_SIZE={size} but gpu {p.gpu or '?'} has an NVLink domain of {domain} GPUs",
            )
        )
    if mnnvl == 1 and domain <= p.gpus_per_node:
        out.append(
            Violation(
                "nvlink_env_matches_gpu",
                f"env USE_MNNVL=1 (multi-node NVLink) but gpu {p.gpu or '?'} has an NVLink domain of {domain} GPUs "
                f"= one node of {p.gpus_per_node}: only NVL72-class systems span nodes",
            )
        )
    if type(ranks) is int and ranks > domain:
        out.append(
            Violation(
                "nvlink_env_matches_gpu",
                f"env NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN={ranks} exceeds gpu {p.gpu or '?'}'s NVLink domain "
                f"of {domain} GPUs",
            )
        )
    return out


def _slow_path(p: Point) -> list[Violation]:
    bad, fixed = _size_violations(p)
    return bad if fixed is None else check(fixed)


def validate(p: Point) -> None:
    """Raise :class:`RuleError` listing every broken rule, or return None."""
    found = check(p)
    if found:
        raise RuleError(found)


def check_config(cfg: Any) -> list[Violation]:
    """:func:`check` of a composed config (``Point.from_config``)."""
    return check(Point.from_config(cfg))
