"""The output layer's GEMM runs in BF16 in an FP8, MXFP8 or NVFP4 run unless ``fp8_output_proj`` under MXFP8
(megatron-core 0.19.2 ``models/gpt/gpt_model.py``: the output layer is Transformer Engine's
``TELMHeadColumnParallelLinear`` only when ``fp8_utils.is_mxfp8_output_proj_active``, else Megatron-Core's own
``ColumnParallelLinear`` outside the FP8 autocast), and the sweep reads the knob from the recipe that sets it."""

from __future__ import annotations

import dataclasses

import pytest

from bridgebench.config.catalog import load_gpu
from bridgebench.config.time_knobs import TIME_KEYS, time_knobs
from bridgebench.model.steptime import registry
from bridgebench.model.steptime.config import GpuFacts, TimeConfig
from bridgebench.model.steptime.gemm import LayerShape, layer_gemm_seconds, logits_gemms


def _logits_s(spec, gpu, sh: LayerShape) -> float:
    return sum(v for _, v in layer_gemm_seconds(registry.handle(spec), registry.handle(gpu), "logits", sh))


@pytest.mark.parametrize("peak_key", ["fp8", "mxfp8", "nvfp4"])
def test_the_logits_run_in_bf16_in_a_low_precision_run(models, peak_key):
    spec, gpu = models["qwen3_30b_a3b"], GpuFacts.from_mapping(load_gpu("gb300"))
    bf16 = LayerShape(tp=1, cp=1, ep=8, etp=1, mbs=1, sp=False, peak_key="bf16")
    low = dataclasses.replace(bf16, peak_key=peak_key)
    assert [g.peak_key for g in logits_gemms(spec, low)] == ["bf16"]
    assert _logits_s(spec, gpu, low) == pytest.approx(_logits_s(spec, gpu, bf16), rel=1e-12)


def test_fp8_output_proj_quantizes_the_logits_only_under_mxfp8(models):
    spec, gpu = models["deepseek_v3"], GpuFacts.from_mapping(load_gpu("gb300"))
    cfg = TimeConfig.from_flat(gpu=gpu, peak_key="mxfp8", num_gpus=8, ep=8, mbs=1, gbs=8, fp8_output_proj=True)
    assert cfg.output_proj_quantized
    assert not dataclasses.replace(cfg, peak_key="fp8").output_proj_quantized  # TransformerConfig refuses it there
    assert not dataclasses.replace(cfg, fp8_output_proj=False).output_proj_quantized
    sh = LayerShape(tp=1, cp=1, ep=8, etp=1, mbs=1, sp=False, peak_key="mxfp8", output_proj_quantized=True)
    bf16 = dataclasses.replace(sh, output_proj_quantized=False)
    # the same GEMMs (main head and the MTP head) at the MXFP8 peak instead of the BF16 one
    assert [g.peak_key for g in logits_gemms(spec, sh)] == ["mxfp8"]
    ratio = _logits_s(spec, gpu, bf16) / _logits_s(spec, gpu, sh)
    assert ratio == pytest.approx(gpu.peak("mxfp8") / gpu.peak("bf16"), rel=1e-12)
    assert ratio > 1.5


def test_the_knob_reaches_the_time_model_from_the_recipe_that_sets_it():
    """Megatron-Bridge 0.6.2's DeepSeek V3 GB300 MXFP8 perf recipe of 26.08 sets ``model.fp8_output_proj``; the
    sweep's point reads it; unset, it is Megatron-Core's default (off)."""
    from bridgebench import sweep as engine

    assert TIME_KEYS["fp8_output_proj"] == "model.fp8_output_proj"
    assert time_knobs({})["fp8_output_proj"] is False
    base = engine.base_of(["recipe=deepseek_v3_gb300_mxfp8", "release=26.08"])
    cfg = engine.time_config(engine.effective(base, {}), base.gpu, base.spec)
    assert cfg.fp8_output_proj and cfg.output_proj_quantized
    kimi = engine.base_of(["recipe=kimi_k2_gb300_mxfp8", "release=26.08"])
    assert not engine.time_config(engine.effective(kimi, {}), kimi.gpu, kimi.spec).output_proj_quantized
