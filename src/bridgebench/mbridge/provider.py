"""Megatron-Bridge model providers built from ``configs/model`` (the one source of truth for architecture).

:func:`provider_kwargs` maps a :class:`bridgebench.model.spec.ModelSpec` onto Megatron-Bridge provider fields
(Megatron-Core ``TransformerConfig`` names, megatron-bridge 0.6.2); :func:`build_provider` instantiates the real
``GPTModelProvider`` / ``MLAModelProvider`` (calling :func:`bridgebench.mbridge.setup` first).
"""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F

from bridgebench.mbridge import setup
from bridgebench.mbridge.errors import BuildError
from bridgebench.model.spec import ModelSpec


def _squared_relu():
    from megatron.core.activations import squared_relu

    return squared_relu


#: ``activation_func`` name (:data:`bridgebench.model.spec.ACTIVATIONS`) -> the function Megatron-Core calls.
ACTIVATIONS = {"silu": F.silu, "gelu": F.gelu, "relu": F.relu, "squared_relu": _squared_relu}
MLA_FIELDS = ("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim")
ARCH_FIELDS = (
    "num_layers",
    "hidden_size",
    "ffn_hidden_size",
    "num_attention_heads",
    "num_query_groups",
    "kv_channels",
    "gated_linear_unit",
    "add_bias_linear",
    "num_moe_experts",
    "moe_ffn_hidden_size",
    "moe_shared_expert_intermediate_size",
    "moe_router_topk",
    "moe_layer_freq",
    "vocab_size",
    "make_vocab_size_divisible_by",
    "seq_length",
    "share_embeddings_and_output_weights",
)


def activation(name: str):
    """The activation function for an ``activation_func`` name (Megatron-Core's own ``squared_relu``)."""
    fn = ACTIVATIONS[name]
    return fn() if fn is _squared_relu else fn


def provider_kwargs(model: ModelSpec) -> dict[str, Any]:
    """Provider constructor fields for ``model`` (architecture only; parallelism is set separately).

    Raises:
        BuildError: an activation Megatron-Bridge providers are not given here (known: silu, gelu, relu).
    """
    if model.activation_func not in ACTIVATIONS:
        raise BuildError(
            f"{model.name}: unknown activation_func {model.activation_func!r}; known: {sorted(ACTIVATIONS)}"
        )
    kw: dict[str, Any] = {name: getattr(model, name) for name in ARCH_FIELDS}
    kw["activation_func"] = activation(model.activation_func)
    kw["mtp_num_layers"] = model.mtp_num_layers or None
    if model.attention_output_gate:
        kw["attention_output_gate"] = True
    if model.multi_latent_attention:
        kw["multi_latent_attention"] = True
        kw.update({name: getattr(model, name) for name in MLA_FIELDS})
    if not model.is_moe:
        for name in (
            "num_moe_experts",
            "moe_ffn_hidden_size",
            "moe_shared_expert_intermediate_size",
            "moe_router_topk",
            "moe_layer_freq",
        ):
            kw.pop(name)
    return kw


def build_provider(model: ModelSpec, **parallel: Any):
    """A real Megatron-Bridge provider (``MLAModelProvider`` for MLA models, else ``GPTModelProvider``).

    Args:
        model: architecture.
        **parallel: Megatron-Core parallel fields (``tensor_model_parallel_size`` ...), passed through.

    Raises:
        Whatever Megatron-Core's ``TransformerConfig.__post_init__`` raises for an invalid combination.
    """
    setup()
    if model.multi_latent_attention:
        from megatron.bridge.models.mla_provider import MLAModelProvider as cls
    else:
        from megatron.bridge.models.gpt_provider import GPTModelProvider as cls
    return cls(**provider_kwargs(model), **parallel)


def generic_container(model: ModelSpec):
    """A Megatron-Bridge ``ConfigContainer`` for a model without a Megatron-Bridge recipe (bring your own model).

    Megatron-Bridge 0.6.2 ``recipes/common.py::_pretrain_common`` (the template its recipes start from: distributed
    fused Adam with cosine annealing, DDP with the distributed optimizer and overlapped collectives, mock GPT data,
    BF16 mixed precision) with :func:`build_provider`'s ``GPTModelProvider`` / ``MLAModelProvider`` (dense, GQA, MLA,
    MoE with shared experts and ``moe_layer_freq``, non-GLU activations) as the model and Megatron's ``NullTokenizer``
    with the model's vocabulary (mock data needs no tokenizer files). The composed config is then applied over it
    exactly as over a recipe (:func:`bridgebench.mbridge.build.apply_config`).

    Raises:
        BuildError: an activation Megatron-Bridge providers are not given here.
        Whatever Megatron-Core's ``TransformerConfig.__post_init__`` raises for the architecture.
    """
    setup()
    from megatron.bridge.recipes.common import _pretrain_common

    cfg = _pretrain_common()
    cfg.model = build_provider(model)
    cfg.tokenizer.tokenizer_type = "NullTokenizer"
    cfg.tokenizer.tokenizer_model = None
    cfg.tokenizer.vocab_size = model.vocab_size
    cfg.tokenizer.use_tokenizer_vocab_size = False
    cfg.dataset.seq_length = model.seq_length
    return cfg
