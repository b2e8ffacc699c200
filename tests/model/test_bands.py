"""bridgebench.model.steptime.bands: the distance of a point from what was calibrated, conformal half-widths that
cover at their nominal level on held-out errors, bands that widen with the distance, and the shipped calibration's
bands (a model or GPU nobody measured says so and gets the widest band)."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

from bridgebench.config import calibration
from bridgebench.config.catalog import load_gpu
from bridgebench.model.steptime.bands import (
    BEYOND,
    LEVELS,
    TIERS,
    ConformalBands,
    HeldOut,
    Seen,
    conformal_bands,
    cross_conformal_coverage,
    describe,
    novelty,
)
from bridgebench.model.steptime.calibration import Calibration
from bridgebench.model.steptime.config import GpuFacts, TimeConfig, TimeModelError, config_key
from bridgebench.model.steptime.predict import predict_time
from bridgebench.model.steptime.release import release_index

GB300 = GpuFacts.from_mapping(load_gpu("gb300"))
H100 = GpuFacts.from_mapping(load_gpu("h100"))
H200 = GpuFacts.from_mapping(load_gpu("h200"))


def _seen(spec, cfg) -> Seen:
    return Seen(
        configurations=frozenset({config_key(spec, cfg)}),
        groups=frozenset({(spec.name, cfg.gpu.name, cfg.peak_key)}),
        gpus=frozenset({(cfg.gpu.name, cfg.precision_class)}),
    )


def test_each_distance_from_the_calibration_is_named(models):
    spec = models["llama3_70b"]
    cfg = TimeConfig.from_flat(gpu=GB300, peak_key="mxfp8", num_gpus=64, mbs=1, gbs=256, tp=1, pp=4, vp=5)
    seen = _seen(spec, cfg)
    assert novelty(seen, spec, cfg) == ("seen configuration",)
    assert novelty(seen, spec, dataclasses.replace(cfg, release="26.08")) == ("seen configuration",)
    assert novelty(seen, spec, cfg.with_dims(tp=2, pp=2, vp=None)) == ("new configuration",)
    assert novelty(seen, spec, dataclasses.replace(cfg, peak_key="nvfp4")) == ("new precision",)
    with_h100 = dataclasses.replace(seen, gpus=seen.gpus | {("h100", "fp8")})
    assert novelty(with_h100, spec, dataclasses.replace(cfg, gpu=H100, peak_key="fp8")) == ("new GPU",)
    other = dataclasses.replace(spec, name="my_dense_model")
    assert novelty(seen, other, cfg) == ("uncalibrated model",)
    assert novelty(seen, spec, dataclasses.replace(cfg, gpu=H200, peak_key="fp8")) == ("uncalibrated GPU",)
    both = novelty(seen, other, dataclasses.replace(cfg, gpu=H200, peak_key="fp8"))
    assert both == ("uncalibrated model", "uncalibrated GPU")
    assert describe(both) == "uncalibrated: nothing of this model/GPU was measured"
    assert describe(("new precision",)) == "conformal, new precision"


def _held(tier: str, sd: float, n: int, rng: random.Random, folds: int = 1) -> list[HeldOut]:
    return [HeldOut(row=i, log_error=rng.gauss(0.0, sd), tier=tier, fold=f"{tier}#{i // folds}") for i in range(n)]


def test_conformal_half_widths_cover_at_their_level_on_held_out_errors():
    """Normal log errors of known spread: the 68 % half-width is about one sd, the 90 % about 1.645 sd, and errors
    scored against the quantile of the OTHER folds are covered at the nominal rate."""
    rng = random.Random(7)
    held = _held("new configuration", 0.10, 400, rng, folds=4)
    cb = conformal_bands(held, Seen())
    q = cb.quantiles["new configuration"]
    assert q[68] == pytest.approx(0.10 * 0.994, rel=0.15)
    assert q[90] == pytest.approx(0.10 * 1.645, rel=0.15)
    assert q[50] < q[68] < q[90]
    cov = cross_conformal_coverage(held)
    for lv in LEVELS:
        assert abs(cov[lv] - lv / 100) < 0.06, (lv, cov[lv])
    assert cb.counts["new configuration"] == 400


def test_bands_widen_with_distance_and_empty_distances_borrow_the_wider_one():
    rng = random.Random(3)
    held = _held("seen configuration", 0.02, 200, rng) + _held("new configuration", 0.30, 200, rng)
    held += _held("new precision", 0.05, 200, rng) + _held("uncalibrated model", 0.5, 200, rng)
    cb = conformal_bands(held, Seen())
    for lv in LEVELS:
        widths = [cb.quantiles[t][lv] for t in TIERS[:4]]
        assert widths == sorted(widths), (lv, widths)  # a narrower measured spread never narrows a wider distance
        assert cb.quantiles["new precision"][lv] == cb.quantiles["new configuration"][lv]
        # nothing was held out as "new GPU" or "uncalibrated GPU": each takes the next wider measured distance
        assert cb.quantiles["new GPU"][lv] == pytest.approx(cb.quantiles["uncalibrated model"][lv])
        assert cb.quantiles["uncalibrated GPU"][lv] >= cb.quantiles["new GPU"][lv]
    both = cb.half_width(("uncalibrated model", "uncalibrated GPU"))
    qm, qg = cb.quantiles["uncalibrated model"][68], cb.quantiles["uncalibrated GPU"][68]
    qc = cb.quantiles["new configuration"][68]
    # each adds its own spread to the new-configuration spread both errors already hold (counted once, not twice)
    assert both == pytest.approx(math.exp(math.sqrt(qm * qm + qg * qg - qc * qc)) - 1)
    assert both < math.exp(math.hypot(qm, qg)) - 1
    assert both > max(cb.half_width(("uncalibrated model",)), cb.half_width(("uncalibrated GPU",)))
    with pytest.raises(TimeModelError, match="no conformal band"):
        cb.half_width(("new GPU",), level=95)


def test_conformal_bands_round_trip_through_the_calibration_yaml():
    cal = calibration.load().time
    assert cal.conformal is not None
    again = Calibration.from_mapping(cal.to_mapping())
    for t in TIERS:
        assert again.conformal.quantiles[t] == pytest.approx(cal.conformal.quantiles[t], abs=1e-6)
    assert again.conformal.seen == cal.conformal.seen and len(cal.conformal.seen.configurations) > 50
    bad = cal.to_mapping()
    bad["conformal"] = {"tiers": {"nearby": {"half_width": {68: 0.1}}}}
    with pytest.raises(TimeModelError, match="tier"):
        Calibration.from_mapping(bad)
    assert isinstance(cal.conformal, ConformalBands)


def test_shipped_bands_widen_from_a_published_point_to_a_model_nobody_measured(models):
    """The shipped calibration: NVIDIA's Kimi K2 configuration (published) gets the narrowest band; the same model
    at other sizes a wider one; a model brought through BRIDGEBENCH_CONFIG_DIR (nothing measured) the widest, named
    as uncalibrated -- never the GB300 group's band; every band's held-out coverage is near its level."""
    cal = calibration.load().time
    kimi = models["kimi_k2"]
    base = dict(gpu=GB300, peak_key="mxfp8", num_gpus=256, mbs=2, gbs=4096, pp=4, vp=4, ep=64, etp=1,
                pipeline_model_parallel_layout="Et*4|(t*4|)*14tL", flops_formula="v1", optimizer="dist_muon",
                moe_token_dispatcher_type="flex", moe_flex_dispatcher_backend="hybridep",
                use_distributed_optimizer=False, overlap_param_gather=False, release="26.02.01")  # fmt: skip
    published = predict_time(kimi, TimeConfig.from_flat(**base), cal)
    moved = predict_time(kimi, TimeConfig.from_flat(**{**base, "pp": 1, "vp": None, "ep": 128, "mbs": 1,
                                             "pipeline_model_parallel_layout": None}), cal)  # fmt: skip
    stranger = dataclasses.replace(models["mixtral_8x22b"] if "mixtral_8x22b" in models else kimi, name="my_moe")
    unknown = predict_time(stranger, TimeConfig.from_flat(**base), cal)
    assert published.novelty == ("seen configuration",) and moved.novelty == ("new configuration",)
    assert unknown.novelty == ("uncalibrated model",)
    assert unknown.band_source == "uncalibrated: nothing of this model was measured"
    assert published.band_pct < moved.band_pct < unknown.band_pct
    widest = max(cal.conformal.half_width((t,)) for t in TIERS[:5])
    assert unknown.band == pytest.approx(widest, rel=1e-6)
    for b in (published, moved, unknown):
        assert b.band_levels[50] < b.band_levels[68] < b.band_levels[90]
        assert b.band_levels[68] == pytest.approx(b.band_pct)
    for tier, cov in cal.conformal.coverage.items():
        for lv in LEVELS:
            assert abs(cov[lv] - lv / 100) < 0.1, (tier, lv, cov[lv])


def test_a_new_precision_takes_the_precision_shift_other_models_show_on_that_gpu():
    """An unpublished (model, GPU, precision) group with the model published on the GPU at another precision: that
    level plus the mean difference between the two precisions on this GPU over the other models published with
    both (a difference in differences); without such a model, the plain level."""
    from bridgebench.model.steptime.release import GroupLevel, LevelTable

    flat = lambda y: GroupLevel(family="dense", x=(150.0,), y=(y,), rows=1)  # noqa: E731
    table = LevelTable(groups={("a", "gb300", "mxfp8"): flat(0.3), ("a", "gb300", "nvfp4"): flat(0.0),
                        ("b", "gb300", "mxfp8"): flat(0.1)}, family_mean={"dense": 0.0})  # fmt: skip
    level, source = table.log_level(("b", "gb300", "nvfp4"), "dense", 150.0)
    assert source == "same model and GPU" and level == pytest.approx(0.1 - 0.3)
    alone = LevelTable(groups={("b", "gb300", "mxfp8"): flat(0.1)}, family_mean={"dense": 0.0})
    assert alone.log_level(("b", "gb300", "nvfp4"), "dense", 150.0) == (pytest.approx(0.1), "same model and GPU")
    # the same precision class (FP8-CS and MXFP8) is read as is, unshifted
    assert table.log_level(("b", "gb300", "fp8"), "dense", 150.0) == (
        pytest.approx(0.1),
        "same model, GPU and precision class",
    )


def test_a_group_read_outside_its_releases_takes_the_same_model_and_gpu_published_there():
    """A group asked for a release outside its own published range reads the same model on the same GPU in another
    precision published at that release, shifted by the mean precision difference on that GPU over the models with
    both (its own, read at its nearest release, among them), not its own flat edge; where no such group covers the
    release, inside its own range and without a release, its own level as before."""
    from bridgebench.model.steptime.release import AT_RELEASE, GroupLevel, LevelTable

    table = LevelTable(
        groups={
            ("a", "gb200", "fp8"): GroupLevel(family="dense", x=(150.0,), y=(-0.4,), rows=1),  # one early row
            ("a", "gb200", "mxfp8"): GroupLevel(family="dense", x=(154.0, 158.0), y=(0.1, 0.3), rows=4),
            ("b", "gb200", "fp8"): GroupLevel(family="dense", x=(154.0, 158.0), y=(0.2, 0.2), rows=2),
            ("b", "gb200", "mxfp8"): GroupLevel(family="dense", x=(154.0, 158.0), y=(0.1, 0.1), rows=2),
        },
        family_mean={"dense": 0.0},
    )
    level, source = table.log_level(("a", "gb200", "fp8"), "dense", 156.0)
    # a's MXFP8 at 156 (0.2) + the mean FP8 - MXFP8 on GB200: a's own (-0.4 - 0.2) and b's (+0.1)
    assert source == AT_RELEASE and level == pytest.approx(0.2 + (-0.6 + 0.1) / 2)
    assert table.log_level(("a", "gb200", "fp8"), "dense", 150.0) == (pytest.approx(-0.4), "group")
    # past every relative's range too: the group's own nearest level (flat), as before
    assert table.log_level(("a", "gb200", "fp8"), "dense", 160.0) == (pytest.approx(-0.4), "group")
    # no release given: the group's own level at its origin
    assert table.log_level(("a", "gb200", "fp8"), "dense", None) == (pytest.approx(-0.4), "group")


def test_an_unmeasured_model_on_an_unmeasured_gpu_counts_the_shared_configuration_spread_once():
    """Two uncalibrated distances: sum of their variances less the new-configuration variance both hold, never
    narrower than the wider of the two (hand-set quantiles, log half-widths)."""
    q = {t: {lv: 0.0 for lv in LEVELS} for t in TIERS}
    q["new configuration"] = {50: 0.1, 68: 0.15, 90: 0.3}
    q["uncalibrated model"] = {50: 0.12, 68: 0.2, 90: 0.4}
    q["uncalibrated GPU"] = {50: 0.15, 68: 0.25, 90: 0.5}
    cb = ConformalBands(quantiles=q)
    assert cb.half_width(("uncalibrated model", "uncalibrated GPU")) == pytest.approx(
        math.exp(math.sqrt(0.2**2 + 0.25**2 - 0.15**2)) - 1
    )
    assert cb.half_width(("uncalibrated model",)) == pytest.approx(math.exp(0.2) - 1)
    q["new configuration"][68] = 0.3  # a shared spread wider than either's own: the wider single band, not less
    assert cb.half_width(("uncalibrated model", "uncalibrated GPU")) == pytest.approx(math.exp(0.25) - 1)


def test_the_release_beyond_spread_is_the_edge_releases_spread_over_the_inner_ones():
    """Held out by release, the first and last release are read one release beyond their fold, the others between
    two: the added spread is sqrt(q_edge^2 - q_inside^2) of their conformal quantiles, none below three releases."""
    from bridgebench.model.steptime.bands import _conformal_q, beyond_release_spread

    rng = random.Random(3)
    releases = [float(x) for x in (1, 2, 3, 4) for _ in range(30)]
    errors = [rng.gauss(0, 0.12 if x in (1.0, 4.0) else 0.03) for x in releases]
    spread, counts = beyond_release_spread(releases, errors)
    assert counts == (60, 60) and set(spread) == set(LEVELS)
    edge = [e for x, e in zip(releases, errors) if x in (1.0, 4.0)]
    inside = [e for x, e in zip(releases, errors) if x in (2.0, 3.0)]
    for lv in LEVELS:
        q_e, q_i = _conformal_q(edge, lv), _conformal_q(inside, lv)
        assert spread[lv] == pytest.approx(math.sqrt(q_e**2 - q_i**2)) and 0 < spread[lv] < q_e
    assert beyond_release_spread([1.0, 2.0] * 10, [0.1] * 20) == ({}, (0, 0))
    assert beyond_release_spread([1.0, None, 3.0], [0.1, 0.2, None]) == ({}, (0, 0))


def test_a_point_beyond_the_calibrated_releases_adds_the_release_spread_and_says_so(models):
    spec = models["llama3_70b"]
    cfg = TimeConfig.from_flat(gpu=GB300, peak_key="mxfp8", num_gpus=64, mbs=1, gbs=256, tp=1, pp=4, vp=5)
    q = {t: {lv: 0.05 * (i + 1) for lv in LEVELS} for i, t in enumerate(TIERS)}
    seen = dataclasses.replace(_seen(spec, cfg), releases=(release_index("25.09"), release_index("26.08")))
    cb = ConformalBands(quantiles=q, seen=seen, beyond={lv: 0.1 for lv in LEVELS}, beyond_counts=(27, 156))
    inside = cb.band(spec, dataclasses.replace(cfg, release="26.04"))
    after = cb.band(spec, dataclasses.replace(cfg, release="26.10"))
    before = cb.band(spec, dataclasses.replace(cfg, release="24.12"))
    assert inside == (pytest.approx(math.exp(0.05) - 1), "conformal, seen configuration", ("seen configuration",))
    assert after[2] == before[2] == ("seen configuration", BEYOND)
    assert after[0] == pytest.approx(math.exp(math.hypot(0.05, 0.1)) - 1)
    assert after[1] == "conformal, seen configuration, release beyond the calibration"
    assert cb.band(spec, cfg)[2] == ("seen configuration",)  # no release: the group's mean level, not a reading
    stranger = dataclasses.replace(spec, name="my_dense_model")
    assert describe(cb.band(stranger, dataclasses.replace(cfg, release="26.10"))[2]) == (
        "uncalibrated: nothing of this model was measured, release beyond the calibration"
    )
    again = ConformalBands.from_mapping(cb.to_mapping(), seen.groups, seen.gpus)
    assert again.beyond == pytest.approx(cb.beyond) and again.seen.releases == seen.releases
    assert again.beyond_counts == (27, 156)
    bad = cb.to_mapping()
    bad["release_beyond"]["half_width"] = {68: -0.1}
    with pytest.raises(TimeModelError, match="release_beyond"):
        ConformalBands.from_mapping(bad, seen.groups, seen.gpus)
    assert "release_beyond" not in ConformalBands(quantiles=q, seen=seen).to_mapping()
