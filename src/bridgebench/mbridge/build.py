"""Build a real Megatron-Bridge ``ConfigContainer`` from a composed bridgebench config, validate it with
Megatron-Bridge's own ``ConfigContainer.validate()``, and dump it.

Order: Megatron-Bridge's pretrain recipe for the model (:mod:`bridgebench.mbridge.compat`; it builds the provider
from the shipped Hugging Face config, :mod:`bridgebench.mbridge.hf_cache`) -> the mixed-precision recipe named by
``precision.mixed_precision_recipe`` -> every key of every ``ConfigContainer`` section present in the composed
config (:data:`SECTIONS`; a key that is present is set, ``null`` included; an absent key keeps the recipe's value)
-> ``env_vars`` -> bridgebench's run policies (:func:`apply_policies`) -> ``validate()`` with ``WORLD_SIZE`` = the
run's GPU count.

A recipe (``recipes/<recipe>/<release>.yaml``) lists exactly the fields where that release's upstream perf recipe
differs from this start, so the built container equals the upstream one field by field except where a policy or
the user says otherwise (``tests/mbridge/test_fidelity.py`` names each difference).

Importing this module imports no megatron; :func:`build` calls :func:`bridgebench.mbridge.setup` and imports it
(seconds).
Planning without a GPU or Transformer Engine works through :mod:`bridgebench.mbridge.te_stub`. Nothing here builds
a model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from bridgebench.config.hashing import config_hash  # noqa: F401  (re-exported: bridgebench.mbridge.build.config_hash)
from bridgebench.config.schema import MB_SECTIONS
from bridgebench.mbridge import compat, setup, te_stub
from bridgebench.mbridge.errors import BuildError  # noqa: F401  (re-exported: bridgebench.mbridge.build.BuildError)
from bridgebench.paths import environ_set

#: Keys of ``cfg.model`` that are bridgebench bookkeeping, not Megatron-Bridge provider fields.
NOT_PROVIDER_FIELDS = {"name", "display_name", "hf_model_id", "published_name", "activation_func"}
MLA_ONLY_FIELDS = {"q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"}
#: ``ConfigContainer`` sections set from the composed config, in order (``model`` first: ``dataset`` follows it).
SECTIONS = MB_SECTIONS
#: The environment variable that tells the compute node its attempt's output folder as the node sees it:
#: ``<job folder>/out`` (``/nemo_run/out`` in a container; :mod:`bridgebench.launch.nodepaths`), exported by
#: :func:`bridgebench.launch.jobspec.build_job` (the plan builds with the first attempt's). TensorBoard events go to
#: ``<out dir>/<job.tensorboard_subdir>``, where ``collect`` reads them (:mod:`bridgebench.launch.run_metrics`).
OUT_DIR_ENV = "BRIDGEBENCH_OUT_DIR"
#: The output folder when the caller names none (diff-config, fidelity tests, recipe generation): relative to the
#: working directory, as the payload resolves it without ``BRIDGEBENCH_OUT_DIR``.
DEFAULT_OUT_DIR = "out"
#: Settings whose validation needs the compute node itself: Transformer Engine's kernels importable (Megatron-Core
#: checks that the fused functions exist, not only the config) or a GPU to query. Off-GPU, ``build`` validates a copy
#: with these switched to the given values and reports them in ``BuildResult.skipped_checks``; the returned and
#: dumped container keeps the real values. Found by trial against megatron-core 0.19.2 / megatron-bridge 0.6.2:
#: ``TransformerConfig.__post_init__`` (fused permute / router kernels), ``OptimizerConfig.__post_init__``
#: (TE FusedAdam for the precision-aware optimizer), ``flex_dispatcher_backend.validate_flex_dispatcher_backend``
#: (``torch.cuda.get_device_properties``).
NODE_ONLY_SETTINGS = [
    ("model", "moe_permute_fusion", False, "needs Transformer Engine's fused permute kernels"),
    ("model", "moe_router_fusion", False, "needs Transformer Engine's fused router kernels"),
    ("model", "apply_rope_fusion", False, "needs Transformer Engine's fused RoPE kernel"),
    # validate() checks it against the model's FP8 mode, which runtime_config_update() copies from mixed_precision on
    # the node -- and that step needs Transformer Engine >= 1.7 for MoE FP8 (megatron-core 0.19.2 TransformerConfig)
    ("model", "fp8_output_proj", False, "checked against the FP8 mode runtime_config_update sets on the node"),
    ("optimizer", "use_precision_aware_optimizer", False, "needs Transformer Engine's FusedAdam"),
    ("model", "moe_token_dispatcher_type", "alltoall", "the flex dispatcher queries the GPU's properties"),
    ("model", "moe_flex_dispatcher_backend", None, "the flex dispatcher queries the GPU's properties"),
    ("model", "moe_expert_rank_capacity_factor", None, "needs the flex dispatcher (hybridep / ncclep)"),
    ("model", "moe_paged_stash", False, "needs moe_expert_rank_capacity_factor, i.e. the flex dispatcher"),
]


def _set(obj: Any, section: str, key: str, value: Any) -> None:
    if obj is None:
        raise BuildError(f"{section}.{key}: this Megatron-Bridge recipe has no {section} section")
    if not hasattr(obj, key):
        raise BuildError(f"{section}.{key} is not a field of Megatron-Bridge's {type(obj).__name__}")
    setattr(obj, key, _coerce(obj, key, value))


def _coerce(obj: Any, key: str, value: Any) -> Any:
    """Configs write dtypes as ``"torch.bfloat16"`` and enum members as ``"AttnBackend.auto"``
    (:mod:`bridgebench.mbridge.flatten`); turn them back into the objects the field holds."""
    import enum
    import re

    if not isinstance(value, str):
        return value
    current = getattr(obj, key)
    if value.startswith("torch.") and (current is None or type(current).__name__ == "dtype"):
        import torch

        if isinstance(getattr(torch, value.removeprefix("torch."), None), torch.dtype):
            return getattr(torch, value.removeprefix("torch."))
    m = re.fullmatch(r"([A-Z]\w*)\.(\w+)", value)
    if m:
        import typing

        classes = [type(current)] if isinstance(current, enum.Enum) else []
        if not classes:
            try:
                hint = typing.get_type_hints(type(obj)).get(key)
            except Exception:  # noqa: BLE001  (unresolvable annotations: leave the string)
                hint = None
            classes = [
                a for a in (typing.get_args(hint) or (hint,)) if isinstance(a, type) and issubclass(a, enum.Enum)
            ]
        for cls in classes:
            if cls.__name__ == m.group(1) and m.group(2) in cls.__members__:
                return cls[m.group(2)]
    return value


def _model_fields(cfg: DictConfig) -> dict[str, Any]:
    model = OmegaConf.to_container(cfg.model, resolve=True)
    out = {}
    for key, value in model.items():
        if key in NOT_PROVIDER_FIELDS:
            continue
        if key in MLA_ONLY_FIELDS and not model["multi_latent_attention"]:
            continue
        if key == "attention_output_gate" and not value:
            continue
        out[key] = value
    return out


def apply_config(container: Any, cfg: DictConfig, api_name: str) -> None:
    """Set every ``ConfigContainer`` field present in ``cfg`` on ``container`` (in place).

    Raises:
        BuildError: a field Megatron-Bridge does not have.
        compat.CompatError: a setting the target API cannot express.
    """
    from megatron.bridge.training.comm_overlap import CommOverlapConfig
    from megatron.bridge.training.mixed_precision import get_mixed_precision_config

    from bridgebench.mbridge.provider import activation

    container.mixed_precision = get_mixed_precision_config(str(cfg.precision.mixed_precision_recipe))
    for section in SECTIONS:
        if section not in cfg:
            continue
        fields = _model_fields(cfg) if section == "model" else OmegaConf.to_container(cfg[section], resolve=True)
        if section == "comm_overlap" and fields and container.comm_overlap is None:
            container.comm_overlap = CommOverlapConfig(tp_comm_overlap=bool(fields.get("tp_comm_overlap", False)))
        obj = getattr(container, section, None)
        for key, value in compat.section_fields(section, fields, api_name).items():
            if section == "model" and key == "mtp_num_layers" and value == 0 and getattr(obj, key, 0) is None:
                continue  # 0 and None both mean "no MTP" (configs/model writes 0): keep the recipe's own encoding
            _set(obj, section, key, value)
        if section == "model":
            container.model.activation_func = activation(str(cfg.model.activation_func))
            if getattr(container, "dataset", None) is not None:
                for name in ("seq_length", "sequence_length"):
                    if hasattr(container.dataset, name):
                        setattr(container.dataset, name, cfg.model.seq_length)
    env = OmegaConf.to_container(cfg.env_vars, resolve=True)
    if env:  # a recipe's env_vars are the run's whole environment, as upstream perf recipes assign cfg.env_vars
        container.env_vars = {str(k): str(v) for k, v in env.items()}


def apply_policies(container: Any, cfg: DictConfig, out_dir: str = DEFAULT_OUT_DIR) -> list[str]:
    """bridgebench's run policies, the only places a built container departs from the upstream recipe on purpose
    (each switched by a ``job.*`` field; ``tests/mbridge/test_fidelity.py`` allow-lists exactly these):

    - ``job.tensorboard_subdir`` (not null): ``logger.tensorboard_dir = <out_dir>/<subdir>`` -- TensorBoard events in
      the attempt's output folder (:data:`OUT_DIR_ENV`), where ``collect`` reads them. Upstream perf recipes leave it
      ``None``.
    - ``job.offline_tokenizer``: a ``HuggingFaceTokenizer`` becomes Megatron's ``NullTokenizer`` with the model's
      vocabulary size (Megatron-Bridge 0.6.2 ``training/tokenizers/config.py``), so the run needs no hub and no
      tokenizer files. With mock data the tokenizer only supplies the vocabulary size and the EOD id, and
      ``tokenizer.use_tokenizer_vocab_size`` False (as upstream) keeps the model's vocabulary -- FLOPs unchanged.

    Returns the policies applied, as ``field: reason`` lines (for the plan).
    """
    applied = []
    subdir = cfg.job.get("tensorboard_subdir")
    if subdir:
        container.logger.tensorboard_dir = f"{str(out_dir).rstrip('/')}/{subdir}"
        applied.append(
            f"logger.tensorboard_dir = {container.logger.tensorboard_dir} (TensorBoard events in the job's out dir)"
        )
    tok = container.tokenizer
    if cfg.job.get("offline_tokenizer") and getattr(tok, "tokenizer_type", None) == "HuggingFaceTokenizer":
        upstream = f"{tok.tokenizer_model}"
        tok.tokenizer_type = "NullTokenizer"
        tok.tokenizer_model = None
        tok.vocab_size = int(container.model.vocab_size)
        tok.hf_tokenizer_kwargs = {}
        applied.append(
            f"tokenizer = NullTokenizer(vocab_size={tok.vocab_size}) in place of HuggingFaceTokenizer {upstream} "
            f"(offline; mock data)"
        )
    return applied


def _unify_sm_knobs(checked: Any) -> list[str]:
    """Recipes of Megatron-Bridge 0.3-0.5 set both per-backend SM counts (``moe_deepep_num_sms`` 20,
    ``moe_hybridep_num_sms`` 32); Megatron-Core 0.19 (``transformer_config.py``) merged them into
    ``moe_flex_dispatcher_num_sms`` and rejects two different values. On the validation copy only, the merged knob
    gets the active backend's count (what that release used); the container keeps the release's own fields."""
    m = checked.model
    deepep, hybridep = getattr(m, "moe_deepep_num_sms", None), getattr(m, "moe_hybridep_num_sms", None)
    if None in (deepep, hybridep) or deepep == hybridep or getattr(m, "moe_flex_dispatcher_num_sms", 0) is not None:
        return []
    backend = getattr(m, "moe_flex_dispatcher_backend", None)
    m.moe_flex_dispatcher_num_sms = hybridep if backend == "hybridep" else deepep
    return [
        f"model.moe_flex_dispatcher_num_sms={m.moe_flex_dispatcher_num_sms} on the validation copy (this release's "
        f"recipe sets both per-backend SM counts, which the installed Megatron-Core merged into one)"
    ]


def start_container(cfg: DictConfig, api_name: str):
    """The container a build starts from: Megatron-Bridge's pretrain recipe of the model
    (:func:`bridgebench.mbridge.compat.recipe`) or, for a model Megatron-Bridge has no recipe for (one brought in
    through ``$BRIDGEBENCH_CONFIG_DIR``), the generic provider's
    (:func:`bridgebench.mbridge.provider.generic_container`).

    Raises:
        BuildError: the generic provider cannot express the model (its message names what is missing).
    """
    name = str(cfg.model.name)
    if name in compat.RECIPES:
        return compat.recipe(name, api_name)()
    from bridgebench.config.compose import model_spec
    from bridgebench.mbridge.provider import generic_container

    try:
        return generic_container(model_spec(cfg))
    except (AssertionError, ValueError, TypeError) as err:
        raise BuildError(
            f"model {name} has no Megatron-Bridge recipe and the generic GPTModelProvider / MLAModelProvider cannot "
            f"express it: {err}"
        ) from err


def build(
    cfg: DictConfig,
    *,
    validate: bool = True,
    api_name: str | None = None,
    out_dir: str = DEFAULT_OUT_DIR,
    policies: bool = True,
):
    """A validated Megatron-Bridge ``ConfigContainer`` for one composed run.

    Args:
        cfg: composed bridgebench config (``bridgebench.config.compose``).
        validate: run ``ConfigContainer.validate()`` (with ``WORLD_SIZE`` = ``cfg.num_gpus``) on a copy.
        api_name: Megatron-Bridge API to translate field names for; defaults to the installed version's.
        out_dir: the attempt's output folder as the compute node sees it (:data:`OUT_DIR_ENV`; TensorBoard events
            go under it).
        policies: apply bridgebench's run policies (:func:`apply_policies`); False gives the plain translation of
            the config (what ``bridgebench recipes generate`` diffs upstream against).

    Raises:
        BuildError: a field Megatron-Bridge does not have, or Megatron-Bridge's validation failing (message kept).
        compat.CompatError: a setting the target API cannot express.
    """
    setup()
    import megatron.bridge

    from bridgebench.debuglog import captured

    with captured():  # the recipe's notes (transformers' torch_dtype, trust_remote_code) go to the debug log
        return _build(cfg, validate, api_name or compat.api_of_version(megatron.bridge.__version__), out_dir, policies)


def _build(cfg: DictConfig, validate: bool, api_name: str, out_dir: str, policies: bool) -> BuildResult:
    container = start_container(cfg, api_name)
    apply_config(container, cfg, api_name)
    applied = apply_policies(container, cfg, out_dir) if policies else []
    skipped: list[str] = []
    if validate:
        import copy

        checked = copy.deepcopy(container)
        skipped += _unify_sm_knobs(checked)
        if not te_stub.te_available():
            for section, key, off, why in NODE_ONLY_SETTINGS:
                obj = getattr(checked, section)
                if getattr(obj, key, off) != off:
                    setattr(obj, key, off)
                    skipped.append(f"{section}.{key} ({why})")
            if not checked.optimizer.use_precision_aware_optimizer:
                # without the precision-aware optimizer Megatron-Core requires FP32 optimizer dtypes
                import torch

                for name in ("main_grads_dtype", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"):
                    if hasattr(checked.optimizer, name):
                        setattr(checked.optimizer, name, torch.float32)
        with environ_set("WORLD_SIZE", str(int(cfg.num_gpus))):
            try:
                checked.validate()
            except (AssertionError, ValueError, TypeError, RuntimeError) as err:
                raise BuildError(f"Megatron-Bridge rejected the configuration: {err}") from err
        container.data_parallel_size = checked.data_parallel_size
    return BuildResult(container=container, api=api_name, skipped_checks=skipped, policies=applied)


@dataclass(kw_only=True)
class BuildResult:
    """A built ``ConfigContainer`` and how it was checked."""

    container: Any
    api: str
    skipped_checks: list[str]
    #: bridgebench run policies applied (:func:`apply_policies`), ``field = value (why)``
    policies: list[str] = dataclasses.field(default_factory=list)


def dump(container, path) -> None:
    """Write the ``ConfigContainer`` as YAML (Megatron's own ``to_yaml``)."""
    container.to_yaml(str(path))
