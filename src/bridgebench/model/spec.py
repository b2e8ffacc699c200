"""The architecture facts of one model, read from ``configs/model/<name>.yaml``.

Field names are Megatron-Core ``TransformerConfig`` / ``MLATransformerConfig`` names (megatron-core 0.19.2,
``megatron/core/transformer/transformer_config.py``), so the same YAML feeds the FLOPs model here and the
Megatron-Bridge provider in ``recipes/``. This module has no torch or megatron import: the ``flops`` command
must start fast.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from bridgebench.errors import BridgebenchError


class ModelSpecError(BridgebenchError):
    """A model config breaks a rule; the message names the field and the rule."""


#: ``activation_func`` values: Megatron-Core 0.19.2 ``torch.nn.functional`` activations and
#: ``megatron/core/activations.py::squared_relu`` (Nemotron-4's non-GLU MLP).
ACTIVATIONS = ("silu", "gelu", "relu", "squared_relu")


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """Architecture of one decoder-only transformer (dense or MoE, GQA or MLA).

    Sizes are counts (layers, heads, experts) or widths (elements); ``seq_length`` is in tokens.
    Defaults follow Megatron-Core 0.19.2 ``TransformerConfig`` where one exists.
    """

    name: str
    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    vocab_size: int
    seq_length: int
    display_name: str = ""
    hf_model_id: str | None = None
    published_name: str | None = None
    num_query_groups: int | None = None
    kv_channels: int | None = None
    gated_linear_unit: bool = True
    activation_func: str = "silu"
    add_bias_linear: bool = False
    attention_output_gate: bool = False
    multi_latent_attention: bool = False
    q_lora_rank: int | None = None
    kv_lora_rank: int = 512
    qk_head_dim: int = 128
    qk_pos_emb_head_dim: int = 64
    v_head_dim: int = 128
    num_moe_experts: int | None = None
    moe_ffn_hidden_size: int | None = None
    moe_shared_expert_intermediate_size: int | None = None
    moe_router_topk: int = 2
    moe_router_num_groups: int | None = None
    moe_router_group_topk: int | None = None
    moe_layer_freq: int | list[int] = 1
    mtp_num_layers: int | None = None
    make_vocab_size_divisible_by: int = 128
    share_embeddings_and_output_weights: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> ModelSpec:
        """Build and validate a spec from a plain mapping (a composed Hydra ``model`` node).

        Raises:
            ModelSpecError: unknown field, missing required field, or a value that breaks a rule
                (see :meth:`validate`).
        """
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ModelSpecError(f"model config has unknown field(s) {unknown}; known fields: {sorted(known)}")
        required = [
            f.name
            for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
        missing = [k for k in required if data.get(k) is None]
        if missing:
            raise ModelSpecError(f"model config is missing required field(s) {missing}")
        values = dict(data)
        if isinstance(values.get("moe_layer_freq"), (list, tuple)):
            values["moe_layer_freq"] = [int(v) for v in values["moe_layer_freq"]]
        spec = cls(**values)
        spec.validate()
        return spec

    def validate(self) -> None:
        """Check the rules every FLOPs and NS count relies on.

        Raises:
            ModelSpecError: naming the field and the rule, e.g. ``hidden_size must be a positive integer, got 0``.
        """
        positive = [
            "num_layers",
            "hidden_size",
            "ffn_hidden_size",
            "num_attention_heads",
            "vocab_size",
            "seq_length",
            "make_vocab_size_divisible_by",
            "moe_router_topk",
        ]
        optional_positive = [
            "num_query_groups",
            "kv_channels",
            "q_lora_rank",
            "num_moe_experts",
            "moe_ffn_hidden_size",
            "moe_shared_expert_intermediate_size",
            "moe_router_num_groups",
            "moe_router_group_topk",
        ]
        if self.multi_latent_attention:
            positive += ["kv_lora_rank", "qk_head_dim", "v_head_dim"]
        for name in positive + [n for n in optional_positive if getattr(self, n) is not None]:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ModelSpecError(f"{self.name}: {name} must be a positive integer, got {value!r}")
        for name in ["mtp_num_layers", "qk_pos_emb_head_dim"]:
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ModelSpecError(f"{self.name}: {name} must be a non-negative integer, got {value!r}")
        if self.activation_func not in ACTIVATIONS:
            raise ModelSpecError(
                f"{self.name}: activation_func must be one of {list(ACTIVATIONS)}, got {self.activation_func!r}"
            )
        if self.num_attention_heads % self.query_groups:
            raise ModelSpecError(
                f"{self.name}: num_attention_heads ({self.num_attention_heads}) must be divisible by "
                f"num_query_groups ({self.query_groups})"
            )
        if self.num_moe_experts is not None:
            if self.moe_router_topk > self.num_moe_experts:
                raise ModelSpecError(
                    f"{self.name}: moe_router_topk ({self.moe_router_topk}) exceeds num_moe_experts "
                    f"({self.num_moe_experts})"
                )
            self._validate_group_routing()
            pattern = self.moe_layer_pattern  # raises on a bad moe_layer_freq
            if not any(pattern):
                raise ModelSpecError(f"{self.name}: moe_layer_freq gives no MoE layer")
        elif self.moe_ffn_hidden_size is not None or self.moe_shared_expert_intermediate_size is not None:
            raise ModelSpecError(
                f"{self.name}: moe_ffn_hidden_size / moe_shared_expert_intermediate_size need num_moe_experts "
                f"(a dense model has no experts)"
            )

    def _validate_group_routing(self) -> None:
        """Megatron-Core's node-limited routing (``moe_router_num_groups`` / ``moe_router_group_topk``, megatron-core
        0.19.2 ``transformer/moe/moe_utils.py::group_limited_topk``): both set or neither, the groups divide the
        experts, ``group_topk <= num_groups``.

        Raises:
            ModelSpecError: naming the rule.
        """
        groups, pick = self.moe_router_num_groups, self.moe_router_group_topk
        if (groups is None) != (pick is None):
            raise ModelSpecError(f"{self.name}: moe_router_num_groups and moe_router_group_topk are set together")
        if groups is not None and pick is not None:
            if (self.num_moe_experts or 0) % groups or pick > groups:
                raise ModelSpecError(
                    f"{self.name}: moe_router_num_groups ({groups}) must divide num_moe_experts "
                    f"({self.num_moe_experts}) and be >= moe_router_group_topk ({pick})"
                )

    # ------------------------------------------------------------------ derived facts
    @property
    def query_groups(self) -> int:
        """``num_query_groups``, or ``num_attention_heads`` when unset (MHA), as Megatron-Core does."""
        return self.num_query_groups or self.num_attention_heads

    @property
    def head_dim(self) -> int:
        """``kv_channels``, or ``hidden_size // num_attention_heads`` when unset (Megatron-Core default)."""
        return self.kv_channels or self.hidden_size // self.num_attention_heads

    @property
    def is_moe(self) -> bool:
        return self.num_moe_experts is not None

    def local_experts(self, ep: int) -> int:
        """Routed experts one GPU holds at expert-parallel size ``ep`` (``num_moe_experts / EP``; 0 for a dense
        model). Megatron-Core requires EP to divide the experts (rule ``expert_grid``)."""
        return self.num_moe_experts // ep if self.num_moe_experts is not None else 0

    @property
    def mtp_layers(self) -> int:
        return self.mtp_num_layers or 0

    @property
    def moe_layer_pattern(self) -> list[int]:
        """One 0/1 per decoder layer: 1 = MoE MLP, 0 = dense MLP.

        Source: Megatron-Bridge v0.3.1 ``training/utils/flop_utils.py`` (int freq ``f`` -> layer ``i`` is MoE
        when ``i % f == 0``; a list is taken as is and must have ``num_layers`` entries).

        Raises:
            ModelSpecError: a list of the wrong length or with values other than 0/1, or a non-positive int.
        """
        if not self.is_moe:
            return [0] * self.num_layers
        freq = self.moe_layer_freq
        if isinstance(freq, bool) or not isinstance(freq, (int, list)):
            raise ModelSpecError(f"{self.name}: moe_layer_freq must be an int or a list of 0/1, got {freq!r}")
        if isinstance(freq, int):
            if freq <= 0:
                raise ModelSpecError(f"{self.name}: moe_layer_freq must be positive, got {freq}")
            return [1 if i % freq == 0 else 0 for i in range(self.num_layers)]
        if len(freq) != self.num_layers or any(v not in (0, 1) for v in freq):
            raise ModelSpecError(
                f"{self.name}: moe_layer_freq list must hold num_layers={self.num_layers} values of 0/1, "
                f"got {len(freq)} values"
            )
        return list(freq)

    def padded_vocab_size(self, tensor_model_parallel_size: int = 1) -> int:
        """Vocabulary padded to a multiple of ``make_vocab_size_divisible_by * TP`` (tokens).

        Source: Megatron-Bridge v0.3.1 ``utils/vocab_utils.py::calculate_padded_vocab_size``.
        """
        if tensor_model_parallel_size <= 0:
            raise ModelSpecError(f"tensor_model_parallel_size must be positive, got {tensor_model_parallel_size}")
        multiple = self.make_vocab_size_divisible_by * tensor_model_parallel_size
        return -(-self.vocab_size // multiple) * multiple

    def replace(self, **changes: Any) -> ModelSpec:
        """A validated copy with some fields changed."""
        spec = dataclasses.replace(self, **changes)
        spec.validate()
        return spec

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data.pop("extra")
        return data
