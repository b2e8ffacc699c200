"""The level of a model with no published group, read from its non-GEMM share
(bridgebench.model.steptime.predict.non_gemm_share, bridgebench.model.steptime.release.ShareLevel,
bridgebench.model.steptime.fit.fit_share_level): fitted on the rows, kept through the calibration YAML, and what
moves a MoE model of few wide experts towards the dense level."""

from __future__ import annotations

import dataclasses
import math

import pytest

from bridgebench.config import calibration
from bridgebench.config.catalog import load_gpu
from bridgebench.model.steptime.calibration import Calibration
from bridgebench.model.steptime.config import GpuFacts, TimeConfig, TimeModelError
from bridgebench.model.steptime.fit import Row, fit_share_level
from bridgebench.model.steptime.predict import LAYER_TERMS, non_gemm_share, predict_time
from bridgebench.model.steptime.release import ShareLevel

H100 = GpuFacts.from_mapping(load_gpu("h100"))
EFF = 0.45
CAL = Calibration(efficiency={("h100", "bf16"): EFF}, family_level={"dense": 0.2, "moe": -0.1})


def _wide_moe(models):
    """A Grok-1-like MoE: 8 experts of 32,768 (top 2), one per GPU at EP 8, under a name no calibration knows."""
    return dataclasses.replace(
        models["qwen3_30b_a3b"],
        name="wide_moe",
        hidden_size=6144,
        num_attention_heads=48,
        num_query_groups=8,
        kv_channels=128,
        num_moe_experts=8,
        moe_router_topk=2,
        moe_ffn_hidden_size=32768,
        ffn_hidden_size=32768,
        num_layers=8,
    )


def _points(models):
    """(spec, config) pairs whose non-GEMM shares differ: a dense model, a fine-grained MoE at MBS 1 and 4 and the
    wide MoE; none of them is a published group under CAL (CAL has no groups)."""
    fine = dataclasses.replace(models["qwen3_30b_a3b"], name="fine_moe")
    dense = dataclasses.replace(models["llama3_70b"], name="dense_model")
    return [
        (dense, TimeConfig.from_flat(gpu=H100, peak_key="bf16", num_gpus=64, tp=4, pp=4, vp=5, mbs=1, gbs=256)),
        (fine, TimeConfig.from_flat(gpu=H100, peak_key="bf16", num_gpus=16, ep=8, etp=1, mbs=1, gbs=512)),
        (fine, TimeConfig.from_flat(gpu=H100, peak_key="bf16", num_gpus=16, ep=8, etp=1, mbs=4, gbs=512)),
        (_wide_moe(models), TimeConfig.from_flat(gpu=H100, peak_key="bf16", num_gpus=32, tp=4, ep=8, mbs=1, gbs=256)),
    ]


def test_the_share_is_the_step_outside_gemms(models):
    shares = [non_gemm_share(s, c, EFF, CAL) for s, c in _points(models)]
    assert all(0.0 < v < 1.0 for v in shares)
    dense, fine1, fine4, wide = shares
    # the fine-grained MoE spends more of its step outside the GEMMs than the wide one, and more at MBS 1 (its
    # permutations and all-to-all grow with the tokens as the GEMMs do, but its GEMMs are small) than a dense model
    assert fine1 > wide and fine4 > wide and fine1 > dense
    spec, cfg = _points(models)[1]
    assert predict_time(spec, cfg, CAL).level_source == "family mean"  # no share fit: the family mean, as before
    b = predict_time(spec, cfg, dataclasses.replace(CAL, family_level={}))  # no level at all: level 1
    parts = b.terms["ep_a2a"] + b.terms["overhead"] + b.terms["elementwise"]
    layers = sum(b.terms[k] for k in LAYER_TERMS)
    assert b.level == 1.0 and parts / layers == pytest.approx(fine1, rel=1e-6)  # read off the same terms
    assert layers < b.total  # the bubble, DP exposure and optimizer step are not in it


def test_the_line_is_fitted_on_the_rows_and_read_for_an_unpublished_model(models):
    pts = _points(models)
    a, slope = 0.25, -1.1
    shares = [non_gemm_share(s, c, EFF, CAL) for s, c in pts]
    rows = [Row(spec=s, cfg=c, tflops=1.0) for s, c in pts]
    fitted = fit_share_level(CAL, rows, [a + slope * v for v in shares])
    assert fitted is not None and fitted.rows == 4
    assert (fitted.intercept, fitted.slope) == (pytest.approx(a, abs=1e-9), pytest.approx(slope, abs=1e-9))
    assert fit_share_level(CAL, rows[:2], [0.0, 0.1]) is None  # fewer than three rows: no line

    cal = dataclasses.replace(CAL, level_share=fitted)
    fine = predict_time(*pts[1], cal)
    wide = predict_time(*pts[3], cal)
    assert fine.level_source == wide.level_source == "non-GEMM share"
    assert fine.level == pytest.approx(math.exp(a + slope * shares[1]), rel=1e-9)
    # a falling line: the wide MoE runs at a higher level than the fine-grained one (nearer a dense model's)
    assert wide.level > fine.level
    assert wide.level == pytest.approx(math.exp(a + slope * shares[3]), rel=1e-9)


def test_the_line_round_trips_the_calibration_yaml():
    cal = dataclasses.replace(CAL, level_share=ShareLevel(intercept=0.2, slope=-1.0, slope_stderr=0.1, rows=183))
    back = Calibration.from_mapping(cal.to_mapping())
    assert back.level_share == cal.level_share
    assert Calibration.from_mapping(CAL.to_mapping()).level_share is None
    with pytest.raises(Exception, match="level_by_share"):
        CAL.share_level(0.1)
    assert ShareLevel(intercept=0.1, slope=-1.0).log_level(2.0) == pytest.approx(-0.9)  # the share is clipped to 1


def test_a_malformed_line_or_measured_rate_is_refused_by_name():
    good = dataclasses.replace(
        CAL,
        level_share=ShareLevel(intercept=0.2, slope=-1.0),
        measured_rates={("h100", "bf16"): 0.76, ("h100", "fp8"): 0.69},
    ).to_mapping()
    no_slope = dict(good, level_by_share={"intercept": 0.2})
    with pytest.raises(TimeModelError, match="malformed time calibration.*slope"):
        Calibration.from_mapping(no_slope)
    not_a_number = dict(good, level_by_share={"intercept": 0.2, "slope": "steep"})
    with pytest.raises(TimeModelError, match="malformed time calibration"):
        Calibration.from_mapping(not_a_number)
    zero_rate = dict(good, measured_gemm_rate={"h100": {"bf16": 0.0, "fp8": 0.69}})
    with pytest.raises(TimeModelError, match="must be positive.*measured_gemm_rate.*'h100', 'bf16'"):
        Calibration.from_mapping(zero_rate)


def test_the_shipped_line_falls_and_is_measured():
    line = calibration.load().time.level_share
    assert line is not None and line.rows >= 150
    # the slope is negative, more than three standard errors from 0: the published rows carry it
    assert line.slope < -3 * line.slope_stderr < 0
