"""The optimizer-step benchmark's set-up: which layers and matrices it times (:func:`selected_layers`,
:func:`select_matrices`, grouped as :class:`ParamSpec`), and the Muon / AdamW settings and job defaults it reads from
the composed config (:func:`load_config`, :func:`muon_settings`, :func:`adamw_settings`). The timing and the result
are :mod:`bridgebench.payloads.optstep`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from bridgebench.errors import BridgebenchError

#: Families in report order (``bridgebench.model.newton_schulz.MuonMatrix.family``; ``mtp`` is never selected).
FAMILY_ORDER = ("attention", "mlp_dense", "router", "expert", "shared_expert")


class OptstepError(BridgebenchError):
    """A bad config or subset for the optimizer-step benchmark; the message says which rule."""


@dataclass(kw_only=True)
class ParamSpec:
    """One optimizer parameter of the subset: the Muon matrices (pieces) it is made of, stacked along rows.

    A fused QKV parameter with ``muon_split_qkv`` has several pieces (Q, [gate,] K, V); every other one has one.
    """

    name: str
    family: str
    pieces: list = field(default_factory=list)  # list[bridgebench.model.newton_schulz.MuonMatrix]

    @property
    def rows(self) -> int:
        return sum(m.rows for m in self.pieces)

    @property
    def cols(self) -> int:
        return self.pieces[0].cols

    @property
    def is_qkv(self) -> bool:
        return len(self.pieces) > 1


# ---------------------------------------------------------------------------------------------------- selection
def selected_layers(model, layers: int) -> list[int]:
    """Decoder layer indices of the subset: the first ``layers`` dense-MLP layers and the first ``layers`` MoE
    layers (as many as the model has of each kind), ascending.

    Raises:
        OptstepError: ``layers`` < 1.
    """
    if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
        raise OptstepError(f"layers must be a positive integer, got {layers!r}")
    pattern = model.moe_layer_pattern
    dense = [i for i, moe in enumerate(pattern) if not moe][:layers]
    moe = [i for i, is_moe in enumerate(pattern) if is_moe][:layers]
    return sorted(dense + moe)


def select_matrices(
    model, *, layers: int = 1, experts: int = 2, split_qkv: bool = True, families: Optional[Sequence[str]] = None
) -> list:
    """Muon matrices of the subset (:func:`bridgebench.model.newton_schulz.muon_matrices` order, full shapes).

    Args:
        model: :class:`bridgebench.model.spec.ModelSpec`.
        layers: decoder layers of each MLP kind (see :func:`selected_layers`).
        experts: routed experts kept per MoE layer (the first ``experts``); ignored for dense models.
        split_qkv: ``muon_split_qkv`` (fused QKV -> Q, [gate,] K, V pieces).
        families: keep only these families (default: all but ``mtp``).

    Raises:
        OptstepError: non-positive sizes, more experts than the model has, an unknown family, or an empty subset.
    """
    from bridgebench.model.newton_schulz import muon_matrices

    if isinstance(experts, bool) or not isinstance(experts, int) or experts < 1:
        raise OptstepError(f"experts must be a positive integer, got {experts!r}")
    if model.is_moe and experts > model.num_moe_experts:
        raise OptstepError(f"experts={experts} exceeds the model's num_moe_experts={model.num_moe_experts}")
    if families is not None:
        unknown = sorted(set(families) - set(FAMILY_ORDER))
        if unknown:
            raise OptstepError(f"unknown families {unknown}; known: {list(FAMILY_ORDER)}")
    keep_layers = set(selected_layers(model, layers))
    out = []
    for m in muon_matrices(model, split_qkv=split_qkv):
        if m.layer not in keep_layers or m.family == "mtp":
            continue
        if m.is_expert and int(m.name.rsplit("weight", 1)[1]) >= experts:
            continue
        if families is not None and m.family not in families:
            continue
        out.append(m)
    if not out:
        raise OptstepError(
            f"no Muon matrices in the subset (layers={layers}, experts={experts}, "
            f"families={list(families) if families else 'all'})"
        )
    return out


def group_params(mats: Sequence) -> list[ParamSpec]:
    """Group Muon matrices into optimizer parameters by ``MuonMatrix.param`` (split QKV pieces -> one fused
    parameter, pieces in ``muon_matrices`` order: Q, [gate,] K, V)."""
    by_param: dict[str, ParamSpec] = {}
    for m in mats:
        spec = by_param.setdefault(m.param, ParamSpec(name=m.param, family=m.family))
        if spec.pieces and spec.pieces[0].cols != m.cols:
            raise OptstepError(f"{m.param}: pieces with different column counts")
        spec.pieces.append(m)
    return list(by_param.values())


# ---------------------------------------------------------------------------------------------------- config
def load_config(path: Path):
    """Read a composed bridgebench config (``OmegaConf.save`` / ``bridgebench plan`` output).

    Raises:
        OptstepError: unreadable YAML, or no ``model`` / ``optimizer`` sections.
    """
    from omegaconf import DictConfig, OmegaConf

    try:
        cfg = OmegaConf.load(path)
    except Exception as err:  # yaml.YAMLError, OSError, OmegaConf errors
        raise OptstepError(f"cannot read config {path}: {err}") from err
    if not isinstance(cfg, DictConfig) or "model" not in cfg or "optimizer" not in cfg:
        raise OptstepError(f"{path} is not a composed bridgebench config (needs 'model' and 'optimizer' sections)")
    return cfg


def job_default(cfg, key: str, fallback: int) -> int:
    job = cfg.get("job") if hasattr(cfg, "get") else None
    value = job.get(key) if job is not None else None
    return fallback if value is None else int(value)


def muon_settings(optimizer: dict[str, Any], model) -> dict[str, Any]:
    """``TensorParallelMuon`` kwargs for the run, made by Megatron-Core 0.19.2's own ``_muon_config_to_kwargs``
    from a Megatron-Core ``OptimizerConfig`` carrying the run's ``optimizer.*`` values (unset ``muon_*`` keys keep
    Megatron-Core's defaults). ``qkv_split_shapes`` come from the model (``_get_qkv_split_shapes``);
    ``pg_collection`` is None (single process).

    Raises:
        OptstepError: a coefficient type the installed emerging-optimizers does not know.
    """
    import dataclasses
    import types

    from megatron.core.optimizer import emerging_optimizers as mcore_eopt
    from megatron.core.optimizer.optimizer_config import OptimizerConfig

    names = {f.name for f in dataclasses.fields(OptimizerConfig)}
    values = {
        k: v
        for k, v in optimizer.items()
        if k in names
        and v is not None
        and k not in ("optimizer", "use_distributed_optimizer", "use_precision_aware_optimizer")
    }
    import torch

    for k, v in values.items():  # configs write dtypes as "torch.float32" (bridgebench.mbridge.flatten)
        if isinstance(v, str) and isinstance(getattr(torch, v.removeprefix("torch."), None), torch.dtype):
            values[k] = getattr(torch, v.removeprefix("torch."))
    config = OptimizerConfig(
        optimizer="muon", use_distributed_optimizer=False, use_precision_aware_optimizer=False, **values
    )
    try:
        mcore_eopt.validate_coefficient_type(config.muon_coefficient_type)
    except ValueError as err:
        raise OptstepError(str(err)) from err
    model_cfg = types.SimpleNamespace(
        num_attention_heads=model.num_attention_heads,
        num_query_groups=model.query_groups,
        kv_channels=model.head_dim,
        attention_output_gate=model.attention_output_gate,
    )
    kwargs = mcore_eopt._muon_config_to_kwargs(config, [types.SimpleNamespace(config=model_cfg)], None)
    return kwargs


def adamw_settings(optimizer: dict[str, Any]) -> dict[str, Any]:
    """``torch.optim.AdamW`` kwargs from the run's ``optimizer.*`` (lr, betas, eps, weight decay)."""
    return {
        "lr": float(optimizer.get("lr") or 3e-4),
        "betas": (float(optimizer.get("adam_beta1") or 0.9), float(optimizer.get("adam_beta2") or 0.999)),
        "eps": float(optimizer.get("adam_eps") or 1e-8),
        "weight_decay": float(optimizer.get("weight_decay") or 0.0),
    }
