"""The FLOPs model: exact, term by term, versioned."""

from __future__ import annotations

from fractions import Fraction

import pytest

from bridgebench.model.flops import FORMULA_VERSIONS, UnsupportedModelError, model_flops, model_flops_per_token
from bridgebench.model.spec import ModelSpec

TINY = dict(
    name="tiny",
    num_layers=2,
    hidden_size=64,
    ffn_hidden_size=256,
    num_attention_heads=4,
    num_query_groups=2,
    kv_channels=16,
    vocab_size=1000,
    seq_length=32,
    make_vocab_size_divisible_by=128,
)


def test_tiny_dense_gqa_by_hand():
    m = ModelSpec.from_mapping(TINY)
    h, s, L, n, g, d, ffn, v = 64, 32, 2, 4, 2, 16, 256, 1024  # vocab padded to 1024
    q = n * d
    per_token = 6 * L * (h * q + 2 * h * g * d + q * h) + 6 * L * q * s + 6 * L * 3 * h * ffn + 6 * h * v
    for formula in FORMULA_VERSIONS:
        assert model_flops_per_token(m, formula=formula) == per_token


def test_breakdown_sums_to_total_and_is_exact(models):
    for m in models.values():
        br = model_flops(m, 3)
        assert br.total == sum(br.terms.values())
        assert isinstance(br.total, Fraction)
        assert br.per_token * br.tokens == br.total
        assert br.tokens == 3 * m.seq_length


def test_mtp_adds_a_layer_and_logits(models):
    d = models["deepseek_v3"]
    with_mtp, without = model_flops(d), model_flops(d.replace(mtp_num_layers=0))
    assert with_mtp.logits == 2 * without.logits
    assert with_mtp.mtp_projections > 0 == without.mtp_projections
    # DeepSeek's last layer is MoE, so the MTP layer adds routed-expert FLOPs
    assert with_mtp.mlp_routed_experts * 58 == without.mlp_routed_experts * 59


def test_tp_pads_the_vocabulary_only(models):
    q = models["qwen3_30b_a3b"]
    a, b = model_flops(q, tensor_model_parallel_size=1), model_flops(q, tensor_model_parallel_size=2)
    assert b.logits / a.logits == Fraction(152064, 151936)
    assert (a.total - a.logits) == (b.total - b.logits)


def test_versions_differ_where_upstream_changed():
    gelu = ModelSpec.from_mapping({**TINY, "activation_func": "gelu"})
    v1, v2 = model_flops(gelu, formula="v1"), model_flops(gelu, formula="v2")
    # v1 (MB <= 0.4): GLU counted 3/2 only with silu -> 2 projections; v2 (MB >= 0.5): 3 projections for any GLU
    assert v2.mlp_dense / v1.mlp_dense == Fraction(3, 2)
    gated = ModelSpec.from_mapping({**TINY, "attention_output_gate": True})
    with pytest.raises(UnsupportedModelError, match="attention_output_gate"):
        model_flops(gated, formula="v1")
    assert (
        model_flops(gated, formula="v2").attention_projections
        > model_flops(ModelSpec.from_mapping(TINY), formula="v2").attention_projections
    )


def test_bad_arguments():
    m = ModelSpec.from_mapping(TINY)
    with pytest.raises(ValueError, match="unknown FLOPs formula"):
        model_flops(m, formula="v9")
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        model_flops(m, 0)
