"""Structured-config schemas (dataclasses) for the Hydra tree, so a misspelled key or a wrong type fails at compose
time, before anything is built or submitted.

The sections named in :data:`MB_SECTIONS` are Megatron-Bridge 0.6.2 ``ConfigContainer`` sections (``model`` = the
GPT/MLA model provider, i.e. Megatron-Core ``TransformerConfig`` + ``ModelParallelConfig`` fields; ``train``,
``optimizer``, ``scheduler``, ``ddp``, ``mixed_precision``, ``comm_overlap``, ``checkpoint``, ``logger``,
``tokenizer`` ...), so an override reads the same in both tools. In those sections:

- the fields bridgebench's own code reads are declared here, typed, always present (:data:`SECTION_SCHEMAS`);
- any other key must be a field of that Megatron-Bridge section (``mbridge_fields.json``, the installed
  Megatron-Bridge's dataclass fields, written by ``bridgebench recipes fields``), and a value of a plain type is
  checked against the field's type. A key that is present is set on the ``ConfigContainer`` (``null`` included); an
  absent key keeps the Megatron-Bridge recipe's value (:mod:`bridgebench.mbridge.build`).

``check_sections`` applies both rules after Hydra has composed (``bridgebench.config.compose``). ``register()``
stores the root schema in Hydra's ConfigStore; each group's YAMLs name their schema in their defaults list.
"""

import dataclasses
import difflib
import functools
import json
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from omegaconf import MISSING

from bridgebench.config.containers import plain_dict
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
    # parallelism (Megatron-Core ModelParallelConfig): read by the validity rules, FLOPs and NS accounting
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


@dataclass
class DDPSchema:
    use_distributed_optimizer: bool = True
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True


@dataclass
class MixedPrecisionSchema:
    fp8_param_gather: bool = False
    reuse_grad_buf_for_mxfp8_param_ag: bool = False


#: Megatron-Bridge ``ConfigContainer`` sections a bridgebench config may set, in the order they are applied.
MB_SECTIONS = (
    "model",
    "train",
    "validation",
    "optimizer",
    "scheduler",
    "ddp",
    "mixed_precision",
    "comm_overlap",
    "checkpoint",
    "logger",
    "tokenizer",
    "dataset",
    "rng",
    "dist",
    "rerun_state_machine",
    "profiling",
)


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
    published_system: Optional[str] = None  # system name in NVIDIA's tables (DGX-H100); None: none published
    gpus_per_node: int = MISSING
    compute_capability: Optional[float] = None  # CUDA compute capability (9.0 Hopper, 10.0 / 10.3 Blackwell)
    nvlink_domain: int = MISSING
    # how the scheduler fills NVLink domains (bridgebench.model.placement.SEGMENT_POLICIES): nvidia_launcher =
    # sbatch --segment as Megatron-Bridge's launcher sets it, packed = whole domains in order, node = one node
    segment_policy: str = "node"
    peak_tflops: Dict[str, Optional[float]] = field(default_factory=dict)
    hbm_gb: float = MISSING  # HBM capacity per GPU, GB (1e9 B), as the datasheet prints it
    hbm_total_mib: Optional[int] = None  # total memory the driver reports (nvidia-smi), MiB; the pruner's capacity
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
    # a table without a Precision column (25.09): the precision bridgebench infers for its rows, by cell half
    # (outside_parentheses, in_parentheses), and why (note); bridgebench.results.records.load_published
    published_precision: Dict[str, str] = field(default_factory=dict)


@dataclass
class AccountingSchema:
    flops_formula: str = MISSING
    ns_kernel: str = "gemm"
    muon_assignment: str = (
        "ping_pong"  # ping_pong (Megatron-Core 0.19.2) | cost_balanced (Megatron-LM PR #6379 what-if)
    )


@dataclass
class TunnelSchema:
    type: str = "local"  # local | ssh
    job_dir: str = MISSING
    host: Optional[str] = None
    user: Optional[str] = None
    port: Optional[int] = None  # ssh: the login node's port (None: 22, or ~/.ssh/config)
    identity: Optional[str] = None  # ssh: private key file on the submit side (None: ssh-agent / ~/.ssh defaults)
    # ssh: the known_hosts file the login node's host key is checked against (None: ~/.ssh/known_hosts, as OpenSSH);
    # an unknown or different key is refused (launch/tunnel.py)
    known_hosts: Optional[str] = None
    # ssh: pin an unknown host key into known_hosts on first use (OpenSSH StrictHostKeyChecking=accept-new), saying so;
    # a key different from the pinned one is still refused
    accept_new_host_key: bool = False


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
class RecipeMetaSchema:
    """Where a recipe's values come from (written by ``bridgebench recipes generate``; empty without a recipe)."""

    entry: Optional[str] = None  # set by the recipe's entry file recipes/<recipe>.yaml
    name: Optional[str] = None  # set by the release values recipes/<recipe>/<release>.yaml
    release: Optional[str] = None
    megatron_bridge: Optional[str] = None  # the upstream version the values were taken from
    source: Optional[str] = None  # upstream files / functions (and tag) the values come from
    upstream_optimizers: List[str] = field(default_factory=list)  # optimizer families upstream ships for it
    sources: Dict[str, str] = field(default_factory=dict)  # per upstream optimizer family: its own source
    generated_by: Optional[str] = None


@dataclass
class OptimizerVariantSchema:
    """The optimizer switch applied over a recipe (``recipes/optimizer_switch/<release>/<optimizer>.yaml``)."""

    name: Optional[str] = None
    source: Optional[str] = None


@dataclass
class ReplaySchema:
    """The replay payload (``job.type: replay``, bridgebench.payloads.replay): which table of measurements it
    replays, the noise it adds and how many iterations it logs; ``row`` is filled when the run is planned
    (bridgebench.launch.replay) -- the table's row for this configuration, or null when it has none."""

    table: Optional[str] = None  # an ablation set id (paths.ablations/<table>.csv)
    noise_pct: float = 1.0  # sd of the multiplicative log-normal noise on each step time, % (seeded)
    seed: int = 0  # noise seed (mixed with the config hash and the attempt's SLURM job id)
    steps: int = 20  # iterations logged (the log parser skips the first 10 as warm-up)
    sleep_s: float = 0.0  # seconds the job sleeps per logged iteration (tests interrupt running sweeps)
    row: Optional[Any] = None  # the table row (set by plan; a mapping) or null


@dataclass
class JobSchema:
    type: str = "pretrain"  # pretrain (payloads.pretrain) | optstep (payloads.optstep) | replay (payloads.replay)
    # run policies (bridgebench.mbridge.build.apply_policies): the only deliberate departures from upstream recipes
    tensorboard_subdir: Optional[str] = "tensorboard"  # TensorBoard events: <attempt out dir>/<this>; null: off
    offline_tokenizer: bool = True  # HuggingFaceTokenizer -> NullTokenizer(model vocab) (offline, mock data)
    layers: int = 1  # optstep: decoder layers whose matrices are timed
    experts: int = 2  # optstep: experts per MoE layer
    repeats: int = 5  # optstep: timed repeats
    replay: ReplaySchema = field(default_factory=ReplaySchema)  # replay: the table and its noise
    # argv run in front of the payload command (numactl, nsys profile ..., or a test's fault injector); each item is
    # shell-quoted. Any: a List[str] node would turn `job.wrapper=[true]` into "True" silently; launch/shellsafe.py
    # refuses any item that is not a string (rule shell_safe_value)
    wrapper: List[Any] = field(default_factory=list)


@dataclass
class PathsSchema:
    plans: str = MISSING
    ledger: str = MISSING
    results: str = MISSING
    reference: str = MISSING
    golden: str = MISSING
    shared_reference: str = MISSING
    ablations: str = MISSING
    tables: str = MISSING
    hf_cache: str = MISSING
    job_dir: str = MISSING
    sweeps: str = MISSING
    site: str = MISSING
    cache: str = MISSING
    debug_log: str = MISSING


def _declared(schema: type) -> Any:
    """A default factory: the declared fields of a section schema with their defaults (``???`` when required), so
    Hydra's composed config has them and ``model.context_parallel_size=2`` needs no ``+``."""

    def make() -> dict[str, Any]:
        out = {}
        for f in dataclasses.fields(schema):
            if f.default is not dataclasses.MISSING:
                out[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                out[f.name] = f.default_factory()
            else:
                out[f.name] = MISSING
        return out

    return field(default_factory=make)


@dataclass
class RootSchema:
    num_gpus: int = MISSING
    # Megatron-Bridge sections (MB_SECTIONS): open maps here, checked by check_sections after composing
    model: Dict[str, Any] = _declared(ModelSchema)
    train: Dict[str, Any] = _declared(TrainSchema)
    validation: Dict[str, Any] = field(default_factory=dict)
    optimizer: Dict[str, Any] = _declared(OptimizerSchema)
    scheduler: Dict[str, Any] = field(default_factory=dict)
    ddp: Dict[str, Any] = _declared(DDPSchema)
    mixed_precision: Dict[str, Any] = _declared(MixedPrecisionSchema)
    comm_overlap: Dict[str, Any] = field(default_factory=dict)
    checkpoint: Dict[str, Any] = field(default_factory=dict)
    logger: Dict[str, Any] = field(default_factory=dict)
    tokenizer: Dict[str, Any] = field(default_factory=dict)
    dataset: Dict[str, Any] = field(default_factory=dict)
    rng: Dict[str, Any] = field(default_factory=dict)
    dist: Dict[str, Any] = field(default_factory=dict)
    rerun_state_machine: Dict[str, Any] = field(default_factory=dict)
    profiling: Dict[str, Any] = field(default_factory=dict)
    recipe_meta: RecipeMetaSchema = field(default_factory=RecipeMetaSchema)
    optimizer_variant: OptimizerVariantSchema = field(default_factory=OptimizerVariantSchema)
    precision: PrecisionSchema = field(default_factory=PrecisionSchema)
    gpu: GPUSchema = field(default_factory=GPUSchema)
    release: ReleaseSchema = field(default_factory=ReleaseSchema)
    accounting: AccountingSchema = field(default_factory=AccountingSchema)
    env_vars: Dict[str, str] = field(default_factory=dict)
    cluster: ClusterSchema = field(default_factory=ClusterSchema)
    job: JobSchema = field(default_factory=JobSchema)
    paths: PathsSchema = field(default_factory=PathsSchema)


#: Declared (typed, always present) fields per Megatron-Bridge section; other sections declare none.
SECTION_SCHEMAS = {
    "model": ModelSchema,
    "train": TrainSchema,
    "optimizer": OptimizerSchema,
    "ddp": DDPSchema,
    "mixed_precision": MixedPrecisionSchema,
}
#: bridgebench bookkeeping keys under ``model`` (not Megatron-Bridge provider fields; see ``configs/model``).
MODEL_BOOKKEEPING = {"name", "display_name", "hf_model_id", "published_name", "activation_func"}
FIELDS_FILE = Path(__file__).resolve().parent / "mbridge_fields.json"


class SectionError(ValueError):
    """A key or value in a Megatron-Bridge section breaks the schema; the message says which and why."""


@functools.cache
def mbridge_fields() -> dict[str, Any]:
    """The shipped catalogue of Megatron-Bridge fields: ``{"megatron_bridge": version, "sections": {section:
    {field: {"type": bool|int|float|str|list|dict|any, "nullable": bool}}}}`` (``mbridge_fields.json``)."""
    data: dict[str, Any] = json.loads(FIELDS_FILE.read_text())
    return data


#: Megatron-Core's recompute settings (the memory and time models read them)
RECOMPUTE_FIELDS = (
    "model.recompute_granularity",
    "model.recompute_method",
    "model.recompute_num_layers",
    "model.recompute_modules",
)
#: the memory model's (bridgebench.model.memory) activation settings: loss fusion, activation offloading
ACTIVATION_FIELDS = (
    "model.cross_entropy_loss_fusion",
    "model.cpu_offloading",
    "model.cpu_offloading_num_layers",
    "model.cpu_offloading_activations",
    "model.fine_grained_activation_offloading",
    "model.offload_modules",
)
#: the memory model's Megatron-FSDP settings
FSDP_FIELDS = ("ddp.use_megatron_fsdp", "ddp.data_parallel_sharding_strategy", "ddp.fsdp_double_buffer")
#: the memory model's optimizer-state settings: the precision-aware optimizer's dtypes, optimizer offloading
OPTIMIZER_STATE_FIELDS = (
    "optimizer.use_precision_aware_optimizer",
    "optimizer.main_params_dtype",
    "optimizer.exp_avg_dtype",
    "optimizer.exp_avg_sq_dtype",
    "optimizer.optimizer_cpu_offload",
    "optimizer.optimizer_offload_fraction",
)
#: the time model's MoE token dispatch: the dispatcher a base recipe sets (e.g. Megatron-Bridge 0.6.2
#: ``recipes/deepseek/h100/deepseek_v3.py`` sets the HybridEP backend and ``apply_flex_dispatcher_backend`` makes it
#: the flex dispatcher off-GPU), which a perf recipe that keeps it does not write again
DISPATCH_FIELDS = (
    "model.moe_token_dispatcher_type",
    "model.moe_flex_dispatcher_backend",
    "model.moe_expert_rank_capacity_factor",
)
#: Megatron-Bridge fields bridgebench's models read (the sweep engine's memory, time and Newton-Schulz stages) that
#: a composed config may leave out -- then the built ``ConfigContainer`` keeps what it started from: the model's base
#: recipe (``model.*``, ``ddp.*``, ``optimizer.*``) or the precision's mixed-precision recipe (``mixed_precision.*``).
START_FIELDS = (
    *RECOMPUTE_FIELDS,
    "ddp.grad_reduce_in_fp32",
    "mixed_precision.grad_reduce_in_fp32",
    "optimizer.muon_num_ns_steps",
    "optimizer.muon_tp_mode",
    "optimizer.muon_split_qkv",
    *ACTIVATION_FIELDS,
    *FSDP_FIELDS,
    *OPTIMIZER_STATE_FIELDS,
    *DISPATCH_FIELDS,
)
#: the ``mbridge_starts.json`` entry of a model without a Megatron-Bridge recipe: the generic provider's container
#: (``bridgebench.mbridge.provider.generic_container``).
GENERIC_START = "_generic"
STARTS_FILE = Path(__file__).resolve().parent / "mbridge_starts.json"
#: the installed Megatron-Bridge's perf recipes' settings (``bridgebench recipes fields``,
#: ``bridgebench.mbridge.catalogs.perf_catalog``).
PERF_FILE = Path(__file__).resolve().parent / "mbridge_perf.json"


@functools.cache
def mbridge_perf() -> dict[str, Any]:
    """The shipped perf-recipe settings (``mbridge_perf.json``): ``{"megatron_bridge": version, "recipes": {function:
    {"model", "num_gpus", "gpu", "precision", "variant", "source", "values": {dotted field: value}}}}``."""
    data: dict[str, Any] = json.loads(PERF_FILE.read_text())
    return data


@functools.cache
def mbridge_starts() -> dict[str, Any]:
    """The shipped start values of :data:`START_FIELDS` (``mbridge_starts.json``, written by ``bridgebench recipes
    fields`` from the installed Megatron-Bridge): ``{"megatron_bridge": version, "fields": [...], "model": {model
    name: {field: value}}, "mixed_precision": {mixed-precision recipe: {field: value}}}``."""
    data: dict[str, Any] = json.loads(STARTS_FILE.read_text())
    return data


def start_values(model: str, mixed_precision_recipe: str) -> dict[str, Any]:
    """What a built ``ConfigContainer`` holds in each of :data:`START_FIELDS` when the composed config does not set it:
    the value of Megatron-Bridge's base recipe for ``model`` (``bridgebench.mbridge.compat.recipe``) or of
    ``get_mixed_precision_config(mixed_precision_recipe)`` for ``mixed_precision.*`` -- the objects
    :func:`bridgebench.mbridge.build.build` starts from, as the installed release builds them.

    Raises:
        SectionError: no start values recorded for the model or the mixed-precision recipe.
    """
    starts = mbridge_starts()
    version = starts["megatron_bridge"]
    if model not in starts["model"] and GENERIC_START in starts["model"]:
        model = GENERIC_START  # no Megatron-Bridge recipe recorded: the build starts from the generic provider
    if model not in starts["model"]:
        raise SectionError(
            f"no Megatron-Bridge {version} base-recipe values recorded for model {model!r} in {STARTS_FILE.name} "
            f"(run bridgebench recipes fields); recorded: {sorted(starts['model'])}"
        )
    if mixed_precision_recipe not in starts["mixed_precision"]:
        raise SectionError(
            f"no Megatron-Bridge {version} values recorded for mixed-precision recipe {mixed_precision_recipe!r} in "
            f"{STARTS_FILE.name} (run bridgebench recipes fields); recorded: {sorted(starts['mixed_precision'])}"
        )
    return {**starts["model"][model], **starts["mixed_precision"][mixed_precision_recipe]}


_TYPES = {"bool": (bool,), "int": (int,), "float": (int, float), "str": (str,), "list": (list,), "dict": (dict,)}


def _type_ok(kind: str, nullable: bool, value: Any) -> bool:
    if value is None:
        return nullable or kind == "any"
    if isinstance(value, str) and value.startswith("${"):
        return True  # an interpolation: checked once resolved by Megatron-Bridge
    if kind not in _TYPES:
        return True
    if isinstance(value, bool) and kind != "bool":
        return False
    return isinstance(value, _TYPES[kind])


def check_sections(plain: dict[str, Any]) -> dict[str, Any]:
    """Check and complete the Megatron-Bridge sections of a composed config (plain, unresolved dict, changed in place).

    Declared fields are merged into their typed schema (defaults filled, types converted as OmegaConf does); every
    other key must be a field of the installed Megatron-Bridge section, with a value of the field's plain type.

    Raises:
        SectionError: an unknown key (with the closest known names), a value of the wrong type, or an enum value
            upstream does not have (rule ``enum_value``, with a did-you-mean:
            :func:`bridgebench.config.rules.upstream.enum_errors`).
    """
    from omegaconf import OmegaConf

    from bridgebench.config.rules.upstream import enum_errors

    catalog = mbridge_fields()
    version = catalog["megatron_bridge"]
    for section in MB_SECTIONS:
        values = dict(plain.get(section) or {})
        schema = SECTION_SCHEMAS.get(section)
        declared = {f.name for f in dataclasses.fields(schema)} if schema else set()
        known = catalog["sections"].get(section, {})
        for key, value in values.items():
            bad = enum_errors(f"{section}.{key}", value)
            if bad:
                raise SectionError(bad[0])
            if key in declared or (section == "model" and key in MODEL_BOOKKEEPING):
                continue
            if key not in known:
                close = difflib.get_close_matches(key, list(dict.fromkeys([*known, *sorted(declared)])), n=3)
                hint = f"; did you mean {', '.join(close)}?" if close else ""
                raise SectionError(
                    f"{section}.{key} is not a field of Megatron-Bridge {version}'s {section} section "
                    f"(nor a bridgebench field){hint}"
                )
            info = known[key]
            if not _type_ok(info["type"], info["nullable"], value):
                raise SectionError(
                    f"{section}.{key} = {value!r}: Megatron-Bridge {version} declares it "
                    f"{'Optional[' + info['type'] + ']' if info['nullable'] else info['type']}"
                )
        if schema is not None:
            from omegaconf.errors import OmegaConfBaseException

            typed = OmegaConf.structured(schema)
            for key in [k for k in values if k in declared]:
                try:
                    typed = OmegaConf.merge(typed, {key: values[key]})
                except OmegaConfBaseException as err:
                    msg = str(err).splitlines()[0]
                    raise SectionError(f"{section}.{key}={values[key]} -- {msg}") from err
            values.update(plain_dict(typed, resolve=False))
        plain[section] = values
    return plain


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
