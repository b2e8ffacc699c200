"""Model FLOPs per token and per step, counted exactly as Megatron-Bridge counts them.

The published "Model TFLOP/s/GPU" of NVIDIA's performance tables is
``num_floating_point_operations(cfg, batch_size=GBS) / step_time / num_gpus`` with the function from
Megatron-Bridge ``src/megatron/bridge/training/utils/flop_utils.py``. This module re-states that formula for
decoder-only GQA/MLA dense and MoE transformers, term by term, in exact rational arithmetic, and tags it with a
formula version so that a later change upstream never silently moves a past number:

``v1``  Megatron-Bridge v0.2.0 ... v0.4.2 (NeMo 25.11 ... 26.04.01). SwiGLU counted as 3/2 of a plain MLP only when
        ``gated_linear_unit`` and ``activation_func == silu`` (else 1x); GQA attention written as
        ``12 L h^2 (1 + g/n + s/(2h)) (n d / h)``.
``v2``  Megatron-Bridge v0.5.0 ... v0.6.x (NeMo 26.06 ...). Any gated linear unit counts 3 projections (no
        activation check); GQA written per projection and adds the attention output gate
        (``attention_output_gate``) as one more ``h x (n d)`` projection.

For the six models shipped in ``configs/model`` (SwiGLU, no output gate) the two versions give the same number; the
tests check both against the real Megatron-Bridge code (0.6.2 installed, 0.3.1's ``flop_utils.py`` from its wheel).

Common to both (source: the files above; 3x = forward + two backward GEMMs, 2 FLOPs per multiply-add, see
"APPENDIX: FLOATING-POINT OPERATIONS" of Narayanan et al. 2021, arXiv:2104.04473):

- MLP: ``6 h (ffn * f * dense_layers + moe_ffn * topk * f * moe_layers + shared_ffn * f * moe_layers)`` per token,
  ``f`` = 3 projections for SwiGLU, 2 otherwise; MTP layers count as one more layer of the last layer's kind.
- GQA attention: ``6 (L + mtp) (h (q + 2 g d) + q h + q s)`` per token with ``q = n d``; the core term is
  ``q s`` = (QK^T + AV) halved for the causal mask.
- MLA attention: ``6 (L + mtp) (q_term + kv_lora (h + n (qk + v) + 1) + h rope + n v h + s n (qk + rope) / 2
  + s n v / 2)`` with ``q_term = q_lora (h + n (qk + rope) + 1)`` (or ``h n (qk + rope)`` without q LoRA).
- MTP: ``6 mtp (3 h + 2 h^2)`` (norms and the ``eh_proj``).
- Logits: ``6 h V_pad (mtp + 1)``, ``V_pad`` = vocab padded to ``make_vocab_size_divisible_by * TP``.

Not covered (raise :class:`UnsupportedModelError`): hybrid Mamba / GDN / sliding-window / DeepSeek-V4 / MoE latent /
ViT paths and LoRA finetuning special cases that later Megatron-Bridge versions add; none of the six models uses them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from fractions import Fraction

from bridgebench.errors import BridgebenchError
from bridgebench.model.spec import ModelSpec

#: Formula versions and the Megatron-Bridge releases whose ``flop_utils.py`` they reproduce.
FORMULA_VERSIONS: dict[str, str] = {
    "v1": "Megatron-Bridge v0.2.0-v0.4.2 src/megatron/bridge/training/utils/flop_utils.py",
    "v2": "Megatron-Bridge v0.5.0-v0.6.2 src/megatron/bridge/training/utils/flop_utils.py",
}
DEFAULT_FORMULA = "v1"  # NeMo 26.02 / 26.02.01 (Megatron-Bridge 0.3.x): the blog's release


class UnsupportedModelError(BridgebenchError):
    """The model uses a feature this FLOPs model does not count."""


#: the fields of :class:`FlopsBreakdown` that are not FLOPs terms
_NOT_TERMS = ("formula", "batch_size", "seq_length")


@dataclass(frozen=True, kw_only=True)
class FlopsBreakdown:
    """Model FLOPs of one training step, forward + backward (3x), split by term.

    All values are FLOPs for ``batch_size`` sequences of ``seq_length`` tokens. ``per_token`` divides by
    ``batch_size * seq_length``. Values are exact rationals (``fractions.Fraction``).
    """

    formula: str
    batch_size: int
    seq_length: int
    attention_projections: Fraction
    attention_core: Fraction
    mlp_dense: Fraction
    mlp_routed_experts: Fraction
    mlp_shared_experts: Fraction
    mtp_projections: Fraction
    logits: Fraction

    @property
    def terms(self) -> dict[str, Fraction]:
        """FLOPs per step by term: every field after ``formula``, ``batch_size`` and ``seq_length``, in order."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _NOT_TERMS}

    @property
    def total(self) -> Fraction:
        """FLOPs per step (``batch_size`` sequences)."""
        return sum(self.terms.values(), Fraction(0))

    @property
    def tokens(self) -> int:
        return self.batch_size * self.seq_length

    @property
    def per_token(self) -> Fraction:
        """FLOPs per token."""
        return self.total / self.tokens


def model_flops(
    model: ModelSpec,
    batch_size: int = 1,
    *,
    tensor_model_parallel_size: int = 1,
    formula: str = DEFAULT_FORMULA,
) -> FlopsBreakdown:
    """Model FLOPs for ``batch_size`` sequences of ``model.seq_length`` tokens (forward + backward).

    Args:
        model: architecture (``configs/model``).
        batch_size: sequences per step, i.e. GBS for a whole step (Megatron-Bridge passes
            ``global_batch_size`` when it logs throughput).
        tensor_model_parallel_size: TP; only pads the vocabulary (``make_vocab_size_divisible_by * TP``).
        formula: ``"v1"`` or ``"v2"``, see :data:`FORMULA_VERSIONS`.

    Returns:
        :class:`FlopsBreakdown` in FLOPs per step.

    Raises:
        UnsupportedModelError: unknown formula, non-positive batch size or TP.
        UnsupportedModelError: a feature the formula version does not cover.

    Source: Megatron-Bridge v0.3.1 / v0.6.0 ``src/megatron/bridge/training/utils/flop_utils.py::
    num_floating_point_operations`` (``transformer_flops``); see the module docstring for the terms.
    """
    if formula not in FORMULA_VERSIONS:
        raise UnsupportedModelError(f"unknown FLOPs formula {formula!r}; known: {sorted(FORMULA_VERSIONS)}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
        raise UnsupportedModelError(f"batch_size must be a positive integer, got {batch_size!r}")
    if model.attention_output_gate and formula == "v1":
        raise UnsupportedModelError(f"{model.name}: attention_output_gate is only counted by formula v2")

    F = Fraction
    h, s = model.hidden_size, model.seq_length
    mtp = model.mtp_layers
    mlp_dense, mlp_routed, mlp_shared = _mlp_per_token(model, formula)
    attn_proj, attn_core = _attention_per_token(model, formula)

    mtp_proj = F(6 * mtp * (3 * h + 2 * h * h))
    logits = F(6 * h * model.padded_vocab_size(tensor_model_parallel_size) * (mtp + 1))

    tokens = batch_size * s
    return FlopsBreakdown(
        formula=formula,
        batch_size=batch_size,
        seq_length=s,
        attention_projections=attn_proj * tokens,
        attention_core=attn_core * tokens,
        mlp_dense=mlp_dense * tokens,
        mlp_routed_experts=mlp_routed * tokens,
        mlp_shared_experts=mlp_shared * tokens,
        mtp_projections=mtp_proj * tokens,
        logits=logits * tokens,
    )


def _mlp_per_token(model: ModelSpec, formula: str) -> tuple[Fraction, Fraction, Fraction]:
    """MLP FLOPs per token (forward + backward): dense layers, routed experts (top-k), shared experts.

    MTP layers copy the last decoder layer's kind.  Source: as :func:`model_flops` (the MLP terms of
    ``transformer_flops``; v1: ``expansion_factor`` 3*2*2 times the gated-linear multiplier 3/2 for SwiGLU).
    """
    F = Fraction
    h, mtp = model.hidden_size, model.mtp_layers
    layers = model.num_layers + mtp
    pattern = model.moe_layer_pattern
    moe_layers = sum(pattern) + pattern[-1] * mtp
    dense_layers = layers - moe_layers
    topk = model.moe_router_topk if model.is_moe else 0
    moe_ffn = model.moe_ffn_hidden_size or model.ffn_hidden_size
    shared_ffn = model.moe_shared_expert_intermediate_size or 0
    if formula == "v1":
        glu = F(3, 2) if (model.gated_linear_unit and model.activation_func == "silu") else F(1)
        mlp_coeff = 12 * glu  # expansion_factor (3*2*2) * gated_linear_multiplier
    else:
        mlp_coeff = F(6 * (3 if model.gated_linear_unit else 2))
    return (
        mlp_coeff * h * model.ffn_hidden_size * dense_layers,
        mlp_coeff * h * moe_ffn * topk * moe_layers,
        mlp_coeff * h * shared_ffn * moe_layers,
    )


def _attention_per_token(model: ModelSpec, formula: str) -> tuple[Fraction, Fraction]:
    """Attention FLOPs per token (forward + backward) over all layers (MTP included): projections, core.

    Multi-latent attention (DeepSeek-V3 / Kimi K2) counts the low-rank Q and KV projections; otherwise GQA with
    ``query_groups`` KV heads (v2: plus the output gate).  Source: as :func:`model_flops` (the attention terms of
    ``transformer_flops``).
    """
    F = Fraction
    h, s = model.hidden_size, model.seq_length
    n, g, d = model.num_attention_heads, model.query_groups, model.head_dim
    layers = model.num_layers + model.mtp_layers
    if model.multi_latent_attention:
        qk, rope, v = model.qk_head_dim, model.qk_pos_emb_head_dim, model.v_head_dim
        if model.q_lora_rank is None:
            q_term = h * n * (qk + rope)
        else:
            q_term = model.q_lora_rank * (h + n * (qk + rope) + 1)
        proj = q_term + model.kv_lora_rank * (h + n * (qk + v) + 1) + h * rope + n * v * h
        return F(6 * layers * proj), 6 * layers * (F(s * n * (qk + rope), 2) + F(s * n * v, 2))
    q = n * d
    if formula == "v1":
        # 12 L h^2 ((1 + g/n) (q/h)) and 12 L h^2 (s/(2h)) (q/h), as written upstream.
        return 12 * layers * F(h * h) * (1 + F(g, n)) * F(q, h), 12 * layers * F(h * h) * F(s, 2 * h) * F(q, h)
    gate = q if model.attention_output_gate else 0
    return F(6 * layers * (h * (q + 2 * d * g + gate) + q * h)), F(6 * layers * q * s)


def model_flops_per_token(
    model: ModelSpec, *, tensor_model_parallel_size: int = 1, formula: str = DEFAULT_FORMULA
) -> Fraction:
    """Model FLOPs per token (forward + backward) at ``model.seq_length``; see :func:`model_flops`."""
    return model_flops(model, 1, tensor_model_parallel_size=tensor_model_parallel_size, formula=formula).per_token
