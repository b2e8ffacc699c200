"""bridgebench.model.timing: the step-time terms, the Muon per-GPU loads against the Newton-Schulz counter, the Muon
cost model, and the calibration (synthetic recovery; the shipped file reproduced from the shipped published table)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from bridgebench.config import calibration
from bridgebench.config.catalog import load_gpu
from bridgebench.model.flops import model_flops
from bridgebench.model.newton_schulz import NSPolicy, Parallelism, ns_load
from bridgebench.model.timing import (
    Calibration,
    GpuFacts,
    Row,
    TimeConfig,
    TimeModelError,
    a2a_seconds,
    calibrate,
    fit_group_levels,
    muon_cost,
    muon_rank_loads,
    predict_time,
    recompute_flops,
)

GB300 = GpuFacts.from_mapping(load_gpu("gb300"))
H100 = GpuFacts.from_mapping(load_gpu("h100"))
KIMI = dict(gpu=GB300, peak_key="mxfp8", num_gpus=256, mbs=2, gbs=4096, pp=4, vp=4, ep=64, etp=1,
            pipeline_model_parallel_layout="Et*4|(t*4|)*14tL", flops_formula="v1")  # fmt: skip


def test_gpu_facts_come_from_configs_gpu():
    assert GB300.hbm_bytes == 288e9 and GB300.hbm_bandwidth == 8e12 and GB300.nvlink_domain == 72
    assert H100.peak("bf16") == pytest.approx(989.4e12)
    with pytest.raises(TimeModelError, match="no mxfp8"):
        H100.peak("mxfp8")


def test_bubble_overhead_and_tflops(models):
    spec = models["llama3_70b"]
    cal = Calibration(efficiency={("h100", "fp8", "dense"): 0.4}, c_layer=1e-4)
    inter = predict_time(spec, TimeConfig(H100, "fp8", 64, 1, 256, tp=4, pp=8, vp=5), cal)
    plain = predict_time(spec, TimeConfig(H100, "fp8", 64, 1, 256, tp=4, pp=8), cal)
    m = 256 // 2  # GBS / (MBS x DP), DP = 64 / 32
    assert inter.bubble == pytest.approx(inter.compute * 7 / (5 * m))
    assert plain.bubble == pytest.approx(plain.compute * 7 / m)
    assert inter.overhead == pytest.approx(1e-4 * m * 10)  # 80 layers / PP 8
    assert inter.tflops_per_gpu == pytest.approx(inter.flops / inter.total / 64 / 1e12)
    assert inter.efficiency_source == "fitted"
    other = predict_time(spec, TimeConfig(GB300, "fp8", 64, 1, 256, tp=4, pp=8), cal)
    assert (other.efficiency, other.efficiency_source) == (0.4, "sibling mean")  # H100's, the only FP8 dense one
    assert predict_time(spec, TimeConfig(GB300, "bf16", 64, 1, 256, tp=4), cal).efficiency_source == "default"


@pytest.mark.parametrize(
    "model, par",
    [
        ("kimi_k2", Parallelism(256, 1, 4, 4, 1, 64, 1, "Et*4|(t*4|)*14tL")),
        ("kimi_k2", Parallelism(256, 2, 4, None, 1, 8, 1, "Et*16|t*16|t*16|t*13L")),
        ("qwen3_30b_a3b", Parallelism(8, 1, 1, None, 1, 8, 1)),
        ("qwen3_30b_a3b", Parallelism(32, 1, 2, 2, 1, 4, 2)),
        ("deepseek_v3", Parallelism(256, 1, 8, None, 1, 32, 1)),
        ("llama3_70b", Parallelism(64, 4, 4, 5, 1, 1, None)),
    ],
)
@pytest.mark.parametrize(
    "policy", [NSPolicy(), NSPolicy(layer_wise=False), NSPolicy(tp_mode="distributed"), NSPolicy(kernel="syrk")]
)
def test_muon_rank_loads_equal_the_newton_schulz_counter(models, model, par, policy):
    """The per-layer, run-length deal gives exactly ns_load's busiest GPU and total (Megatron-Core's ping-pong)."""
    ref = ns_load(models[model], par, policy)
    loads = muon_rank_loads(models[model], par, policy)
    assert max(loads.ns_flops) == ref.per_gpu_max
    assert sum(loads.ns_flops) == ref.total


def test_cost_balanced_assignment_is_never_worse(models):
    for model, par in (("qwen3_30b_a3b", Parallelism(16, 1, 2, None, 1, 4, 1)), ("llama3_70b", Parallelism(64, 8))):
        ping = muon_rank_loads(models[model], par)
        balanced = muon_rank_loads(models[model], par, assignment="cost_balanced")
        assert sum(balanced.ns_flops) == sum(ping.ns_flops)
        assert max(balanced.ns_flops) <= max(ping.ns_flops)


def test_muon_is_slower_than_adamw_and_the_cost_model_adds_up(models):
    cal = calibration.load().time
    cost = muon_cost(models["kimi_k2"], TimeConfig(**KIMI, optimizer="dist_muon"), cal)
    assert cost.muon.total > cost.adam.total
    assert cost.muon.ns == pytest.approx(cost.muon.busiest_ns_flops / cost.ns_rate)
    assert cost.muon.ns + cost.muon.per_matrix == pytest.approx(cost.busiest_s(cost.ping_pong))
    assert cost.balanced_step_s <= cost.muon.total
    assert cost.muon.compute == cost.adam.compute and cost.muon.bubble == cost.adam.bubble
    assert cost.allgather_bytes > 0 and cost.muon.allgather > 0
    # EDP = 256 / (1 x 64 x 4) = 1: every GPU orthogonalizes all of its own experts, nothing to balance there
    assert max(cost.ping_pong.ns_flops) == max(cost.balanced.ns_flops) or cost.balanced_step_s < cost.muon.total


def test_calibration_recovers_a_known_efficiency(models):
    spec = models["llama3_70b"]
    truth = Calibration(efficiency={("gb200", "fp8", "dense"): 0.37}, c_layer=1e-4)
    gb200 = GpuFacts.from_mapping(load_gpu("gb200"))
    rows = []
    for tp, pp, vp in ((1, 1, None), (2, 4, 5), (4, 4, None), (1, 4, 5)):
        cfg = TimeConfig(gb200, "fp8", 64, 1, 256, tp=tp, pp=pp, vp=vp)
        rows.append(Row(spec, cfg, predict_time(spec, cfg, truth).tflops_per_gpu))
    cal = calibrate(rows)
    assert cal.efficiency[("gb200", "fp8", "dense")] == pytest.approx(0.37, rel=1e-9)
    assert cal.c_layer == pytest.approx(1e-4)


def _group_rows(spec, gpu, slope_of_key, releases=(150.0, 151.0, 152.0, 153.0)):
    """Rows of one model whose efficiency over the family's grows by ``exp(slope (x - 151.5))`` per peak key (one
    published group each), at two configurations per release."""
    rows = []
    for key, slope in slope_of_key.items():
        pclass = TimeConfig(gpu, key, 64, 1, 256).precision_class
        for x in releases:
            truth = Calibration(efficiency={(gpu.name, pclass, "dense"): 0.37 * math.exp(slope * (x - 151.5))})
            truth.c_layer = 1e-4
            for tp, pp, vp in ((1, 1, None), (2, 4, 5)):
                cfg = TimeConfig(gpu, key, 64, 1, 256, tp=tp, pp=pp, vp=vp, release_index=x)
                rows.append(Row(spec, cfg, predict_time(spec, cfg, truth).tflops_per_gpu))
    return rows


def test_group_levels_recover_a_release_trend_and_leave_the_physics_alone(models):
    gb200 = GpuFacts.from_mapping(load_gpu("gb200"))
    rows = _group_rows(models["llama3_70b"], gb200, {"fp8": 0.05})
    plain, grouped = calibrate(rows, groups=False), calibrate(rows)
    assert (grouped.c_layer, grouped.efficiency) == (plain.c_layer, plain.efficiency)  # grid choice unchanged
    level = grouped.groups[("llama3_70b", "gb200", "fp8")]
    assert (level.origin, level.rows) == (151.5, 8)
    assert level.slope == pytest.approx(0.05, rel=1e-6) and grouped.group_slope == pytest.approx(0.05, rel=1e-6)
    for r in rows:  # the published figure back at every release; the physics alone misses the ends
        assert predict_time(r.spec, r.cfg, grouped).tflops_per_gpu == pytest.approx(r.tflops, rel=1e-6)
    assert predict_time(rows[0].spec, rows[0].cfg, plain).tflops_per_gpu > rows[0].tflops * 1.05
    # a point without a release index sits at the group's origin; the group factor never reorders two configs
    a, b = (dataclasses.replace(r.cfg, release_index=None) for r in rows[:2])
    ga, gb = (predict_time(rows[0].spec, c, grouped) for c in (a, b))
    pa, pb = (predict_time(rows[0].spec, c, plain) for c in (a, b))
    assert ga.efficiency_source == "fitted + group" and pa.efficiency_source == "fitted"
    assert ga.total / gb.total == pytest.approx(pa.total / pb.total, rel=1e-3)


def test_group_slopes_are_shrunk_towards_the_pooled_slope(models):
    gb200 = GpuFacts.from_mapping(load_gpu("gb200"))
    spec = models["llama3_70b"]
    rows = _group_rows(spec, gb200, {"fp8": 0.10, "nvfp4": 0.0})
    base = calibrate(rows, groups=False)
    fast, flat = ("llama3_70b", "gb200", "fp8"), ("llama3_70b", "gb200", "nvfp4")
    own, b0, k = fit_group_levels(rows, base, 0.0)
    assert own[fast].slope == pytest.approx(0.10, abs=2e-3) and own[flat].slope == pytest.approx(0.0, abs=2e-3)
    pooled, b0, _ = fit_group_levels(rows, base, math.inf)
    assert pooled[fast].slope == pooled[flat].slope == pytest.approx(b0) == pytest.approx(0.05, abs=2e-3)
    shrunk, _, _ = fit_group_levels(rows, base, 5.0)  # Sxx = 2 x 5 = 10 per group: half way to b0
    assert shrunk[fast].slope == pytest.approx((10 * 0.10 + 5 * b0) / 15, abs=2e-3)
    # exact lines: no scatter about each group's own slope, so the estimated prior weight keeps them (k = 0)
    _, _, k = fit_group_levels(rows, base)
    assert k == pytest.approx(0.0, abs=1e-6)


def test_calibration_file_round_trip():
    cal = calibration.load().time
    again = Calibration.from_mapping(cal.to_mapping())
    assert again.efficiency == pytest.approx(cal.efficiency, rel=1e-5)
    assert (again.c_layer, again.kappa, again.ns_efficiency) == (cal.c_layer, cal.kappa, cal.ns_efficiency)
    assert again.groups == cal.groups and cal.groups and again.group_shrinkage == cal.group_shrinkage
    with pytest.raises(TimeModelError, match="positive"):
        Calibration.from_mapping({**cal.to_mapping(), "kappa_s": 0})


def test_shipped_calibration_is_the_fit_of_the_shipped_published_table():
    """configs/calibration/default.yaml's time node equals a refit on results/reference (no stale numbers)."""
    from bridgebench.results.time_calibration import fit

    shipped = calibration.load().time
    refit = fit()
    assert refit.c_layer == shipped.c_layer
    assert set(refit.efficiency) == set(shipped.efficiency)
    for key, value in refit.efficiency.items():
        assert shipped.efficiency[key] == pytest.approx(value, abs=1e-6), key
        assert shipped.rows[key] == refit.rows[key]
    assert set(refit.groups) == set(shipped.groups)
    for key, level in refit.groups.items():
        got = shipped.groups[key]
        assert (got.origin, got.rows) == (level.origin, level.rows), key
        assert (got.level, got.slope) == pytest.approx((level.level, level.slope), abs=1e-6), key


def test_unknown_optimizer_is_refused(models):
    cfg = dataclasses.replace(TimeConfig(**KIMI), optimizer="sgd")
    with pytest.raises(TimeModelError, match="unknown optimizer"):
        predict_time(models["kimi_k2"], cfg, calibration.load().time)


def test_recompute_repeats_the_forward_of_what_it_recomputes(models):
    spec = models["kimi_k2"]
    cfg = TimeConfig(**KIMI)
    f = model_flops(spec, cfg.gbs, formula="v1")
    full = dataclasses.replace(cfg, recompute_granularity="full", recompute_method="uniform")
    layers = f.total - f.logits - f.mtp_projections
    assert recompute_flops(spec, full) == pytest.approx(float(layers) / 3)
    sel = lambda *m: dataclasses.replace(cfg, recompute_granularity="selective", recompute_modules=m)  # noqa: E731
    assert recompute_flops(spec, sel("moe_act", "layernorm")) == 0.0
    assert 0 < recompute_flops(spec, sel("mla_up_proj")) < recompute_flops(spec, sel("mla_up_proj", "moe"))
    assert recompute_flops(spec, cfg) == 0.0
    cal = calibration.load().time
    base, up = predict_time(spec, cfg, cal), predict_time(spec, sel("mla_up_proj"), cal)
    assert up.total > base.total and up.recompute == pytest.approx(
        recompute_flops(spec, sel("mla_up_proj")) / 256 / (5000e12 * up.efficiency)
    )


def test_expert_all_to_all_leaves_nvlink_when_the_expert_group_leaves_the_domain(models):
    spec = models["kimi_k2"]
    inside = TimeConfig(**{**KIMI, "pp": 4, "ep": 64})
    outside = TimeConfig(**{**KIMI, "pp": 1, "vp": None, "pipeline_model_parallel_layout": None, "ep": 128, "etp": 2})
    assert a2a_seconds(spec, dataclasses.replace(inside, ep=1)) == 0.0
    per_layer_mb = lambda c: a2a_seconds(spec, c) / c.microbatches  # noqa: E731
    tokens = 2 * 4096
    volume = 4 * tokens * 8 * spec.hidden_size * 2.0
    assert per_layer_mb(inside) == pytest.approx(volume * 63 / 64 / GB300.nvlink_bandwidth * 16)  # 16 MoE layers
    assert per_layer_mb(outside) == pytest.approx(volume * 127 / 128 / GB300.network_bandwidth * 60)
