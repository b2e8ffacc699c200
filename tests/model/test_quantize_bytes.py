"""The bytes that quantizing a low-precision layer's GEMM operands moves (bridgebench.model.steptime.quantize): every
forward input that is not a norm's quantized output, every backward output gradient, each with a row-wise and a
column-wise copy; sequence-parallel gathers quantized on the shard; BF16 GEMMs (router, output layer) none."""

from __future__ import annotations

import dataclasses

import pytest

from bridgebench.model.steptime import registry
from bridgebench.model.steptime.gemm import LayerShape, tokens
from bridgebench.model.steptime.quantize import BYTES_PER_ELEMENT, quantize_bytes


def test_a_dense_layer_quantizes_the_unfused_inputs_and_every_output_gradient(models):
    spec = models["llama3_70b"]
    sh = LayerShape(tp=4, cp=2, ep=1, etp=1, mbs=1, sp=True, peak_key="fp8")
    t, tsp = tokens(spec, sh)
    h, f, d = spec.hidden_size, spec.ffn_hidden_size, spec.head_dim
    qkv_out = (spec.num_attention_heads + 2 * spec.query_groups) * d / 4
    fwd, bwd = quantize_bytes(registry.handle(spec), "dense", sh)
    # forward: the output projection's and fc2's inputs (qkv and fc1 read their norm's quantized output)
    assert fwd == pytest.approx(6.0 * t * (spec.num_attention_heads * d / 4 + f / 4))
    # backward: qkv and fc1 gradients on every token, proj and fc2 (row parallel) on the sequence shard
    assert bwd == pytest.approx(6.0 * (t * (qkv_out + 2 * f / 4) + tsp * 2 * h))
    assert BYTES_PER_ELEMENT["fp8"] == 6.0  # amax read, cast read, row-wise and column-wise 1-byte writes


def test_bf16_quantizes_nothing_and_mxfp8_moves_its_own_bytes_per_element(models):
    spec = models["llama3_70b"]
    sh = LayerShape(tp=4, cp=1, ep=1, etp=1, mbs=1, sp=True, peak_key="fp8")
    sid = registry.handle(spec)
    assert quantize_bytes(sid, "dense", dataclasses.replace(sh, peak_key="bf16")) == (0.0, 0.0)
    assert quantize_bytes(sid, "logits", sh) == (0.0, 0.0)
    fp8 = sum(quantize_bytes(sid, "dense", sh))
    mx = sum(quantize_bytes(sid, "dense", dataclasses.replace(sh, peak_key="mxfp8")))
    assert mx / fp8 == pytest.approx((4 + 2 / 32) / 6)


def test_a_moe_layer_quantizes_each_routed_copy_and_not_the_bf16_router(models):
    spec = models["qwen3_30b_a3b"]
    sh = LayerShape(tp=1, cp=1, ep=8, etp=1, mbs=2, sp=False, peak_key="mxfp8", dispatcher="hybridep")
    t, _ = tokens(spec, sh)
    h, fe, d, n = spec.hidden_size, spec.moe_ffn_hidden_size, spec.head_dim, spec.num_attention_heads
    copies = t * spec.moe_router_topk
    per = BYTES_PER_ELEMENT["mxfp8"]
    fwd, bwd = quantize_bytes(registry.handle(spec), "moe", sh)
    assert fwd == pytest.approx(per * (t * n * d + copies * (h + fe)))
    qkv_out = (n + 2 * spec.query_groups) * d
    assert bwd == pytest.approx(per * (t * (qkv_out + h) + copies * (2 * fe + h)))
