"""Build a real Megatron-Bridge ``ConfigContainer`` from a composed bridgebench config, validate it with
Megatron-Bridge's own ``ConfigContainer.validate()``, and dump it.

Order: Megatron-Bridge's pretrain recipe for the model (``recipes/compat.py``; it builds the provider from the
shipped Hugging Face config, ``recipes/hf_cache.py``) -> bridgebench's model fields (architecture from
``configs/model``, parallelism and performance settings from the preset and overrides) -> train / optimizer / ddp /
mixed-precision / comm-overlap fields -> ``validate()`` with ``WORLD_SIZE`` = the run's GPU count.

Importing this module imports no megatron; :func:`build` calls :func:`bridgebench.mbridge.setup` and imports it
(seconds).
Planning without a GPU or Transformer Engine works through :mod:`bridgebench.mbridge.te_stub`. Nothing here builds
a model.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

from omegaconf import DictConfig, OmegaConf

from bridgebench.config.hashing import config_hash  # noqa: F401  (re-exported: bridgebench.mbridge.build.config_hash)
from bridgebench.errors import BridgebenchError
from bridgebench.mbridge import compat, setup, te_stub

#: Keys of ``cfg.model`` that are bridgebench bookkeeping, not Megatron-Bridge provider fields.
NOT_PROVIDER_FIELDS = {"name", "display_name", "hf_model_id", "published_name", "activation_func"}
MLA_ONLY_FIELDS = {"q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"}

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
    ("optimizer", "use_precision_aware_optimizer", False, "needs Transformer Engine's FusedAdam"),
    ("model", "moe_token_dispatcher_type", "alltoall", "the flex dispatcher queries the GPU's properties"),
    ("model", "moe_flex_dispatcher_backend", None, "the flex dispatcher queries the GPU's properties"),
]


class BuildError(BridgebenchError):
    """Megatron-Bridge rejected the configuration (its message is kept) or a field does not exist there."""


@contextmanager
def _world_size(n: int) -> Iterator[None]:
    old = os.environ.get("WORLD_SIZE")
    os.environ["WORLD_SIZE"] = str(n)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("WORLD_SIZE", None)
        else:
            os.environ["WORLD_SIZE"] = old


def _set(obj: Any, section: str, key: str, value: Any) -> None:
    if not hasattr(obj, key):
        raise BuildError(f"{section}.{key} is not a field of Megatron-Bridge's {type(obj).__name__}")
    setattr(obj, key, value)


def build(cfg: DictConfig, *, validate: bool = True, api_name: str | None = None):
    """A validated Megatron-Bridge ``ConfigContainer`` for one composed run.

    Args:
        cfg: composed bridgebench config (``bridgebench.config.compose``).
        validate: run ``ConfigContainer.validate()`` (with ``WORLD_SIZE`` = ``cfg.num_gpus``).
        api_name: Megatron-Bridge API to translate optimizer field names for; defaults to the installed version's.

    Raises:
        BuildError: a field Megatron-Bridge does not have, or Megatron-Bridge's validation failing (message kept).
        compat.CompatError: a setting the target API cannot express.
    """
    setup()
    import megatron.bridge
    from megatron.bridge.training.comm_overlap import CommOverlapConfig
    from megatron.bridge.training.mixed_precision import get_mixed_precision_config

    api_name = api_name or compat.api_of_version(megatron.bridge.__version__)
    container = compat.recipe(str(cfg.model.name))()

    model = OmegaConf.to_container(cfg.model, resolve=True)
    for key, value in model.items():
        if key in NOT_PROVIDER_FIELDS or value is None:
            continue
        if key in MLA_ONLY_FIELDS and not model["multi_latent_attention"]:
            continue
        if key == "attention_output_gate" and not value:
            continue
        if key == "mtp_num_layers" and value == 0:
            value = None
        _set(container.model, "model", key, value)
    from bridgebench.mbridge.provider import ACTIVATIONS

    container.model.activation_func = ACTIVATIONS[model["activation_func"]]
    if hasattr(container, "dataset") and container.dataset is not None:
        for name in ("seq_length", "sequence_length"):
            if hasattr(container.dataset, name):
                setattr(container.dataset, name, model["seq_length"])

    for key, value in OmegaConf.to_container(cfg.train, resolve=True).items():
        if value is not None:
            _set(container.train, "train", key, value)

    opt = OmegaConf.to_container(cfg.optimizer, resolve=True)
    for key, value in compat.optimizer_fields(opt, api_name).items():
        _set(container.optimizer, "optimizer", key, value)

    container.mixed_precision = get_mixed_precision_config(str(cfg.precision.mixed_precision_recipe))
    for key, value in OmegaConf.to_container(cfg.mixed_precision, resolve=True).items():
        _set(container.mixed_precision, "mixed_precision", key, value)
    for key, value in OmegaConf.to_container(cfg.ddp, resolve=True).items():
        _set(container.ddp, "ddp", key, value)

    overlap = OmegaConf.to_container(cfg.comm_overlap, resolve=True)
    if container.comm_overlap is None:
        container.comm_overlap = CommOverlapConfig(tp_comm_overlap=overlap["tp_comm_overlap"])
    for key, value in overlap.items():
        _set(container.comm_overlap, "comm_overlap", key, value)

    # TensorBoard events inside the job directory (launch/submit.py exports BRIDGEBENCH_OUT_DIR; collect reads them)
    container.logger.tensorboard_dir = os.path.join(os.environ.get("BRIDGEBENCH_OUT_DIR", "out"), "tensorboard")
    if hasattr(container, "env_vars"):
        container.env_vars = {
            **(getattr(container, "env_vars", None) or {}),
            **OmegaConf.to_container(cfg.env_vars, resolve=True),
        }
    skipped: list[str] = []
    if validate:
        import copy

        checked = copy.deepcopy(container)
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
        with _world_size(int(cfg.num_gpus)):
            try:
                checked.validate()
            except (AssertionError, ValueError, TypeError, RuntimeError) as err:
                raise BuildError(f"Megatron-Bridge rejected the configuration: {err}") from err
        container.data_parallel_size = checked.data_parallel_size
    return BuildResult(container, api_name, skipped)


@dataclass
class BuildResult:
    """A built ``ConfigContainer`` and how it was checked."""

    container: Any
    api: str
    skipped_checks: list[str]


def dump(container, path) -> None:
    """Write the ``ConfigContainer`` as YAML (Megatron's own ``to_yaml``)."""
    container.to_yaml(str(path))
