"""The BF16 work of a low-precision point -- the attention core (unless ``fp8_dot_product_attention``), the router,
the output layer (unless quantized) -- runs the BF16 kernels of a BF16 run, so it takes the GPU's BF16 efficiency
(Calibration.bf16_gain), not the FP8 class's."""

from __future__ import annotations

import dataclasses

import pytest

from bridgebench.config.catalog import load_gpu
from bridgebench.model.steptime import registry
from bridgebench.model.steptime.calibration import Calibration
from bridgebench.model.steptime.config import GpuFacts, TimeConfig
from bridgebench.model.steptime.gemm import layer_gemm_seconds
from bridgebench.model.steptime.predict import evaluate, layer_shape

RATES = {("h100", "bf16"): 0.7626, ("h100", "fp8"): 0.6937}


def test_the_gain_is_the_gpus_bf16_over_its_class_efficiency():
    cal = Calibration(efficiency={("h100", "fp8"): 0.4, ("gb300", "fp8"): 0.5, ("gb300", "bf16"): 0.62},
                      measured_rates=dict(RATES))  # fmt: skip
    assert cal.bf16_gain("h100", "fp8") == pytest.approx(0.7626 / 0.6937)  # the measured class ratio
    assert cal.bf16_gain("gb300", "fp8") == pytest.approx(0.62 / 0.5)  # both classes fitted
    assert cal.bf16_gain("gb300", "bf16") == 1.0


@pytest.mark.parametrize("fp8_attention", [False, True])
def test_only_the_bf16_work_speeds_up_with_the_gain(models, fp8_attention):
    spec, gpu = models["qwen3_30b_a3b"], GpuFacts.from_mapping(load_gpu("h100"))
    cfg = TimeConfig.from_flat(gpu=gpu, peak_key="fp8", num_gpus=8, ep=8, mbs=1, gbs=16,
                               fp8_dot_product_attention=fp8_attention)  # fmt: skip
    rate = 0.4

    def compute(gain: float) -> float:
        return evaluate(spec, cfg, rate, 0.0, 1e-4, 0.5, bf16_gain=gain)[0]["compute"]

    sh = layer_shape(cfg)
    sid, gid = registry.handle(spec), registry.handle(gpu)
    layer = dict(layer_gemm_seconds(sid, gid, "moe", sh))
    bf16_layer = layer["router"] + (0.0 if fp8_attention else layer["core_attn_fwd"] + layer["core_attn_bwd"])
    logits = sum(v for _, v in layer_gemm_seconds(sid, gid, "logits", sh))
    bf16_step = cfg.num_microbatches * (spec.num_layers * bf16_layer + logits) / rate
    assert compute(1.0) - compute(2.0) == pytest.approx(bf16_step / 2, rel=1e-9)
    quantized = dataclasses.replace(cfg, peak_key="mxfp8", fp8_output_proj=True)
    assert quantized.output_proj_quantized


def test_the_fit_reads_each_rows_gain_through_the_same_priors():
    from bridgebench.model.steptime.fit import Row, _bf16_gains, chip_of

    h100, gb300 = (GpuFacts.from_mapping(load_gpu(g)) for g in ("h100", "gb300"))
    rows = [Row(spec=None, cfg=TimeConfig.from_flat(gpu=g, peak_key=p, num_gpus=8, mbs=1, gbs=8), tflops=1.0)
            for g, p in ((h100, "fp8"), (gb300, "mxfp8"), (gb300, "bf16"))]  # fmt: skip
    hopper, blackwell = chip_of(h100), chip_of(gb300)
    log_eff = {(hopper, "fp8"): -0.9, (blackwell, "fp8"): -0.7, (blackwell, "bf16"): -0.5}
    gains = _bf16_gains(rows, log_eff, RATES)
    assert gains[0] == pytest.approx(0.7626 / 0.6937)
    assert gains[1] == pytest.approx(2.718281828459045**0.2)
    assert gains[2] == 1.0
