"""What the step-time model assumes where nothing was calibrated, and the software the ablation rows state: the
GPU x precision-class efficiency prior (bridgebench.model.steptime.calibration) and the materialized attention core
of Megatron-LM before FlashAttention (``attention_backend=local``, bridgebench.model.steptime.gemm / .elementwise),
checked against Korthikanti et al. 2022 Table 4's measured selective-recompute overhead."""

from __future__ import annotations

import dataclasses
import math

import pytest

from bridgebench.config import calibration
from bridgebench.config.catalog import load_gpu
from bridgebench.config.time_knobs import time_knobs
from bridgebench.model.spec import ModelSpec
from bridgebench.model.steptime.calibration import Calibration
from bridgebench.model.steptime.config import GpuFacts, TimeConfig, TimeModelError
from bridgebench.model.steptime.predict import layer_time, predict_time

A100 = GpuFacts.from_mapping(load_gpu("a100"))
#: two GPUs fitted at BF16 and FP8 (ratio 1.5 and 1.2), a third at FP8 only
CAL = Calibration(
    efficiency={("gb200", "bf16"): 0.6, ("gb200", "fp8"): 0.4, ("gb300", "bf16"): 0.6, ("gb300", "fp8"): 0.5,
                ("h100", "fp8"): 0.3}
)  # fmt: skip


def test_a_class_not_fitted_on_a_fitted_gpu_takes_the_class_ratio_measured_elsewhere():
    e, src = CAL.efficiency_of("h100", "bf16")
    assert src == "gpu x class"
    assert e == pytest.approx(0.3 * math.sqrt(1.5 * 1.2))  # geometric mean of the two GPUs' BF16 / FP8 ratios
    assert CAL.class_shift("fp8", "bf16") == pytest.approx(math.log(math.sqrt(1.5 * 1.2)))
    assert CAL.efficiency_of("h100", "fp8") == (0.3, "fitted")


def test_a_gpu_never_fitted_takes_the_same_class_on_the_calibrated_gpus():
    e, src = CAL.efficiency_of("a100", "bf16")
    assert src == "sibling mean" and e == pytest.approx(0.6)
    e8, src8 = CAL.efficiency_of("a100", "fp8")
    assert src8 == "sibling mean" and e8 == pytest.approx((0.4 * 0.5 * 0.3) ** (1 / 3))


def test_a_class_no_gpu_was_fitted_at_scales_by_the_peak_ratio_or_takes_the_default():
    lone = Calibration(efficiency={("gb300", "fp8"): 0.4})
    e, src = lone.efficiency_of("gb300", "bf16", lambda c: {"bf16": 2500.0, "fp8": 5000.0}[c])
    assert src == "other precision" and e == pytest.approx(0.4 * math.sqrt(2))
    assert lone.efficiency_of("gb300", "bf16") == (lone.default_efficiency, "default")


def test_a_class_measured_on_the_gpu_takes_the_measured_ratio_before_other_gpus_ratio():
    measured = dataclasses.replace(CAL, measured_rates={("h100", "bf16"): 0.76, ("h100", "fp8"): 0.69})
    e, src = measured.efficiency_of("h100", "bf16")
    assert src == "gpu x measured class ratio" and e == pytest.approx(0.3 * 0.76 / 0.69)
    assert e < CAL.efficiency_of("h100", "bf16")[0]  # Blackwell's fitted ratio (1.5, 1.2) is not Hopper's 1.10
    assert measured.efficiency_of("h100", "fp8") == (0.3, "fitted")
    # a GPU measured at one class only, or not at all, keeps the other GPUs' ratio
    assert dataclasses.replace(CAL, measured_rates={("h100", "fp8"): 0.69}).efficiency_of("h100", "bf16")[1] == (
        "gpu x class"
    )
    assert Calibration.from_mapping(measured.to_mapping()).measured_rates == measured.measured_rates
    shipped = calibration.load().time
    assert shipped.efficiency_of("h100", "bf16")[1] == "gpu x measured class ratio"
    assert 1.0 < shipped.measured_rates[("h100", "bf16")] / shipped.measured_rates[("h100", "fp8")] < 1.2


def test_the_measured_rates_are_the_shipped_law_on_the_h100_shapes():
    from bridgebench.validation.gemm_fit import SHIPPED_LAW, gemm_law_fits, measured_gemm_rates

    rates = measured_gemm_rates()
    fits = {f.precision: f.rate for f in gemm_law_fits() if f.law == SHIPPED_LAW}
    assert rates == {("h100", p): pytest.approx(fits[p]) for p in ("bf16", "fp8")}
    assert 0.6 < rates[("h100", "fp8")] < rates[("h100", "bf16")] < 0.85


def test_the_fit_ties_the_systems_of_one_chip(models):
    """Two systems of one chip share one fitted efficiency (a fraction of each one's own peak), and their rows'
    levels are centred together (bridgebench.model.steptime.fit.chip_of)."""
    from bridgebench.model.steptime.fit import Row, calibrate, chip_of

    gb300, b300 = (GpuFacts.from_mapping(load_gpu(n)) for n in ("gb300", "b300"))
    assert chip_of(gb300) == chip_of(b300) == "cc 10.3" and chip_of(A100) == "cc 8"
    spec = models["qwen3_30b_a3b"]
    point = dict(peak_key="mxfp8", num_gpus=8, gbs=512, mbs=8, ep=8, etp=1)
    rows = [
        Row(spec=spec, cfg=TimeConfig.from_flat(gpu=g, **point), tflops=t, release="26.02")
        for g, t in ((gb300, 699.0), (b300, 679.0))
    ]
    cal = calibrate(rows, c_grid=(0.0,), host_grid=(0.0,), expert_grid=(0.0,))
    assert cal.efficiency[("gb300", "fp8")] == cal.efficiency[("b300", "fp8")]
    # fitted on GB300 alone, HGX B300 is not given GB300's efficiency but the sibling mean (efficiency_of)
    alone = calibrate(rows[:1], c_grid=(0.0,), host_grid=(0.0,), expert_grid=(0.0,))
    assert alone.efficiency_of("b300", "fp8")[1] == "sibling mean"
    # one level each, centred on 0 together: the faster system above, the slower below
    (g_lvl,) = cal.groups[("qwen3_30b_a3b", "gb300", "mxfp8")].y
    (b_lvl,) = cal.groups[("qwen3_30b_a3b", "b300", "mxfp8")].y
    assert g_lvl + b_lvl == pytest.approx(0.0, abs=2e-4)
    assert (g_lvl > 0) != (b_lvl > 0)


#: Korthikanti et al. 2022 (arXiv 2205.05198) Table 4: GPT 22B (h 6144, 64 heads, s 2048, MBS 4), one layer on 8
#: A100 80 GB at TP 8
GPT22B = ModelSpec(
    name="ablation_gpt_22b", num_layers=48, hidden_size=6144, ffn_hidden_size=24576, num_attention_heads=64,
    num_query_groups=64, vocab_size=51200, seq_length=2048, gated_linear_unit=False, activation_func="gelu",
)  # fmt: skip


def _layer_ms(backend: str, recompute: str | None) -> float:
    cfg = TimeConfig.from_flat(
        gpu=A100, peak_key="bf16", num_gpus=8, mbs=4, gbs=4, tp=8, sequence_parallel=True,
        recompute_granularity=recompute, recompute_modules=("core_attn",) if recompute else (),
        attention_backend=backend, overlap_grad_reduce=False, use_distributed_optimizer=False,
    )  # fmt: skip
    return 1e3 * sum(layer_time(GPT22B, cfg, calibration.load().time).values())  # what predict uses


def test_materialized_attention_prices_korthikantis_selective_recompute_overhead():
    """Table 4: selective recompute (the attention core's forward again) costs 13.1 - 11.8 = 1.3 ms per layer with
    SP. The shipped calibration with the materialized core (scores through HBM) gives that within 25 %; a flash
    kernel would make it ~10x less."""
    local = _layer_ms("local", "selective") - _layer_ms("local", None)
    flash = _layer_ms("flash", "selective") - _layer_ms("flash", None)
    assert 0.75 * 1.3 < local < 1.25 * 1.3
    assert flash < 0.3
    assert _layer_ms("unfused", None) == pytest.approx(_layer_ms("local", None))
    assert _layer_ms("auto", None) == pytest.approx(_layer_ms("flash", None))


def test_materialized_attention_weighs_more_on_small_hidden_sizes():
    """The score traffic grows as heads x s^2, the GEMMs as s h^2: a 2304-wide model (Narayanan et al. 2021 Table 1,
    GPT 1.7B) pays a larger share of its step for it than the 22B."""

    def share(spec: ModelSpec, tp: int) -> float:
        cfg = TimeConfig.from_flat(gpu=A100, peak_key="bf16", num_gpus=tp, mbs=1, gbs=1, tp=tp)
        cal = Calibration(efficiency={("a100", "bf16"): 0.6})
        local = predict_time(spec, dataclasses.replace(cfg, attention_backend="local"), cal).total
        return local / predict_time(spec, cfg, cal).total - 1

    small = dataclasses.replace(GPT22B, name="ablation_gpt_1_7b", num_layers=24, hidden_size=2304,
                                ffn_hidden_size=9216, num_attention_heads=24, num_query_groups=24)  # fmt: skip
    assert share(small, 1) > 1.5 * share(GPT22B, 8) > 0


def test_attention_backend_is_megatron_cores_enum():
    with pytest.raises(TimeModelError, match="attention_backend"):
        TimeConfig.from_flat(gpu=A100, peak_key="bf16", num_gpus=8, mbs=1, gbs=8, attention_backend="flash2")
    assert time_knobs({"attention_backend": "AttnBackend.local"})["attention_backend"] == "local"
    assert time_knobs({})["attention_backend"] == "auto"


def test_a_board_power_limit_lowers_the_tensor_rate_between_the_datasheet_anchors():
    """H100 SXM5 at 700 W prints 989.4 TFLOP/s BF16, the H100 NVL (same die) at 400 W 835: torchtitan's 500 W H100s
    get two thirds of the way down to the SXM rate; HBM is unchanged; a GPU without anchors is refused."""
    h100 = GpuFacts.from_mapping(load_gpu("h100"))
    capped = h100.at_power_limit(500)
    assert capped.peak("bf16") / h100.peak("bf16") == pytest.approx(1 - (1 - 835 / 989.4) * 2 / 3)
    assert capped.peak("fp8") / h100.peak("fp8") == pytest.approx(capped.peak("bf16") / h100.peak("bf16"))
    assert capped.hbm_bandwidth == h100.hbm_bandwidth and capped.name == "h100"
    assert h100.at_power_limit(700).peak("bf16") == h100.peak("bf16")
    assert h100.at_power_limit(400).peak("bf16") == pytest.approx(835e12)
    with pytest.raises(TimeModelError, match="power limit"):
        h100.at_power_limit(300)
    with pytest.raises(TimeModelError, match="a100"):
        A100.at_power_limit(250)


def test_torch_sdpa_runs_the_attention_core_at_flashattention2_rates():
    """torchtitan's SDPA (torch 2.5-2.6 on Hopper: FlashAttention-2, cuDNN opt-in) against Megatron's fused kernel:
    the attention core's forward at 329 / 631 of its time, the backward at 322 / 561; the GEMMs unchanged."""
    from bridgebench.model.steptime.gemm import LayerShape, attention_core_seconds, layer_gemm_seconds
    from bridgebench.model.steptime.registry import handle

    h100 = GpuFacts.from_mapping(load_gpu("h100"))
    spec = dataclasses.replace(GPT22B, seq_length=32768)
    fused = LayerShape(tp=1, cp=1, ep=1, etp=1, mbs=1, sp=False, peak_key="bf16")
    sdpa = dataclasses.replace(fused, attention_backend="sdpa")
    (ff, fb), (sf, sb) = attention_core_seconds(spec, fused, h100), attention_core_seconds(spec, sdpa, h100)
    assert sf / ff == pytest.approx(631 / 329) and sb / fb == pytest.approx(561 / 322)
    gemms = {k: v for k, v in layer_gemm_seconds(handle(spec), handle(h100), "dense", sdpa) if "core" not in k}
    assert gemms == {k: v for k, v in layer_gemm_seconds(handle(spec), handle(h100), "dense", fused) if "core" not in k}
