"""bridgebench.model.refit: the conjugate refit shrinks towards the prior in proportion to the evidence, the choice
rule starts at the best predicted point and follows expected improvement plus the expected information about the
other points, the stop rule fires when the best measured
point beats every optimistic band edge, and bad measurements are refused."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from bridgebench.model import refit


def _cands(n=6, band=5.0):
    # point i: predicted step 1 s + 0.1 s per index, half compute and half scale-out at i = n - 1
    out = []
    for i in range(n):
        comm = 0.1 * i
        out.append(
            refit.Candidate(
                point_id=f"p{i}",
                step_s=1.0 + comm,
                flops=1e15,
                num_gpus=8,
                band_pct=band,
                group="h100/bf16",
                terms={"compute": 1.0, "dp_comm": comm},
            )  # fmt: skip
        )
    return out


def test_no_run_is_the_prior_and_one_run_moves_the_level_by_its_weight():
    c = _cands()
    prior = refit.Prior(factor_sd=1e-9, group_sd=1e-9)  # the level alone: a closed form to check against
    post0 = refit.refit(c, {}, prior)
    assert post0.step(c[0])[0] == pytest.approx(c[0].step_s)
    assert post0.step(c[0])[1] == pytest.approx(math.sqrt(0.2**2 + 0.05**2 + 0.01**2), rel=1e-6)
    y = math.log(1.2)
    post1 = refit.refit(c, {"p0": 1.2}, prior)
    w = 1 / (0.05**2 + 0.01**2)
    expect = w * y / (w + 1 / 0.2**2)  # Gaussian shrinkage: data weight against the prior's
    assert post1.coefficients()["level"][0] == pytest.approx(expect, rel=1e-4)
    assert 0 < expect < y
    post3 = refit.refit(c, {"p0": 1.2, "p1": 1.1 * 1.2, "p2": 1.2 * 1.2}, prior)
    assert abs(post3.coefficients()["level"][0] - y) < abs(expect - y)  # more evidence, less shrinkage
    assert post3.step(c[5])[1] < post1.step(c[5])[1] < post0.step(c[5])[1]  # bands narrow as runs accumulate


def test_a_term_factor_is_learned_where_the_shares_differ():
    c = _cands()
    truth = {x.point_id: x.terms["compute"] + 2.0 * x.terms["dp_comm"] for x in c}  # scale-out twice as slow
    post = refit.refit(c, {p: truth[p] for p in ("p0", "p2", "p5")})
    assert post.coefficients()["factor:scale_out"][0] > 0.2
    err = abs(post.step(c[4])[0] / truth["p4"] - 1)
    err0 = abs(c[4].step_s / truth["p4"] - 1)
    assert err < err0 / 2


def test_choose_then_stop():
    c = _cands()
    post = refit.refit(c, {})
    first = refit.choose(c, post)
    assert first[0].point_id == "p0" and "best predicted" in first[0].reason
    assert refit.stop_reason(c, post, spent=0, budget=6) is None
    # p0 measured much faster than predicted: nothing else can beat it within one band -> converged
    post = refit.refit(c, {"p0": 0.5}, refit.Prior(factor_sd=1e-9, group_sd=1e-9, level_sd=1e-9))
    assert refit.stop_reason(c, post, spent=1, budget=6) == "converged"
    post = refit.refit(c, {"p0": 1.0})
    nxt = refit.choose(c, post, k=2)
    assert "expected improvement" in nxt[0].reason and "off the others' mean error" in nxt[0].reason
    best = math.log(refit.measured_tflops(c[0], 1.0))
    todo = c[1:]
    ei = {x.point_id: refit.expected_improvement(*refit._log_tput(x, post), best) for x in todo}
    info = {x.point_id: refit.information(post, x, todo) for x in todo}
    score = sorted(todo, key=lambda x: -(ei[x.point_id] + info[x.point_id]))
    assert [x.point_id for x in nxt] == [x.point_id for x in score[:2]]
    # improvement alone would take p1 (predicted fastest after p0); p0 taught the level, and a run with a larger
    # scale-out share teaches the scale-out factor the others' errors depend on: the rule takes one of those
    assert max(ei, key=ei.get) == "p1" and nxt[0].point_id in ("p3", "p4", "p5")
    assert info[nxt[0].point_id] > info["p1"] > 0
    assert refit.information(post, c[1], [c[1]]) == 0.0  # no other point: nothing to teach
    assert refit.stop_reason(c, post, spent=6, budget=6) in ("budget", "converged")


def test_leave_one_run_out_and_bad_input():
    c = _cands()
    meas = {"p0": 1.1, "p1": 1.21, "p3": 1.43}
    loo = refit.leave_one_run_out(c, meas)
    assert [r["point_id"] for r in loo] == list(meas)
    for r in loo:
        assert abs(r["error_pct"]) < 10 and r["inside"]
    with pytest.raises(refit.RefitError, match="positive"):
        refit.refit(c, {"p0": 0.0})
    with pytest.raises(refit.RefitError, match="not in the space"):
        refit.refit(c, {"nope": 1.0})
    assert np.all(np.linalg.eigvalsh(refit.refit(c, meas).cov) > 0)


def test_a_wide_band_is_mostly_level_so_a_run_weighs_by_the_residual_not_the_band():
    c = _cands(band=40.0)  # an uncalibrated GPU's band: NVIDIA's calibration may miss this cluster by 40 %
    prior = refit.Prior(factor_sd=1e-9, group_sd=1e-9)
    post0 = refit.refit(c, {}, prior)
    assert post0.step(c[0])[1] == pytest.approx(math.sqrt(0.2**2 + 0.07**2 + 0.01**2), rel=1e-6)
    post1 = refit.refit(c, {"p0": 1.3}, prior)
    w = 1 / (0.07**2 + 0.01**2)  # the run's residual: the band capped at resid_sd, not the 40 % band
    expect = w * math.log(1.3) / (w + 1 / 0.2**2)
    assert post1.coefficients()["level"][0] == pytest.approx(expect, rel=1e-4)
    assert expect > 0.85 * math.log(1.3)  # one run of this cluster carries most of its level to the others


def test_information_is_the_conjugate_update_of_the_others_errors():
    """What choose() credits a run with equals what measuring it does to the other points' posterior sd (same band
    scale): the expected absolute error sqrt(2/pi) sd, averaged over the others."""
    c = _cands()
    prior = refit.Prior()
    post = refit._fit(c, {"p0": 1.1}, prior, 1.0)
    todo = c[1:]
    for pick in (c[1], c[5]):
        after = refit._fit(c, {"p0": 1.1, pick.point_id: 1.7}, prior, 1.0)  # the value does not move a variance
        others = [o for o in todo if o.point_id != pick.point_id]
        drop = [post.log_ratio(o)[1] - after.log_ratio(o)[1] for o in others]
        expect = math.sqrt(2 / math.pi) * sum(drop) / len(others)
        assert refit.information(post, pick, todo) == pytest.approx(expect, rel=1e-9)
    # the point whose scale-out share differs most from p0's teaches the others more than p0's neighbour does
    assert refit.information(post, c[5], todo) > refit.information(post, c[1], todo)


def test_runs_of_one_model_carry_more_to_its_own_configurations_than_to_another_models():
    c = [dataclasses.replace(x, model="a" if i < 3 else "b") for i, x in enumerate(_cands())]
    post = refit.refit(c, {"p0": 1.3, "p1": 1.1 * 1.3})  # model a runs 30 % slower than predicted
    moved_a = math.log(post.step(c[2])[0] / c[2].step_s)
    moved_b = math.log(post.step(c[3])[0] / c[3].step_s)
    assert 0 < moved_b < moved_a < math.log(1.3)  # b borrows the cluster level, a its own level too
    assert post.step(c[3])[1] > post.step(c[2])[1]  # and b stays less certain
    assert "model:a" in post.names and "model:b" in post.names
    assert "model:a" not in refit.refit(_cands(), {}).names  # candidates without a model: no per-model level
