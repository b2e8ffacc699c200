"""bridgebench.results.compare_stats: published values as intervals, release steps, change points, own-run statistics.

Own-run tests use synthetic runs: per-run level (log-normal, CV ``run_cv``) times AR(1) per-iteration noise, the shape
of per-step times of real jobs (a job-level offset plus autocorrelated jitter).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from scipy import stats

from bridgebench.config.catalog import releases
from bridgebench.results import compare_stats as cs
from bridgebench.results.compare import same_flops_count
from bridgebench.results.records import load_published

QWEN = cs.ConfigKey(model="qwen3_30b_a3b", gpu="gb300", precision="mxfp8", num_gpus=8, optimizer="adamw")
KIMI = cs.ConfigKey(model="kimi_k2", gpu="gb300", precision="mxfp8", num_gpus=256, optimizer="muon")
FAST = {"n_resamples": 1000, "n_inner": 100}


@pytest.fixture(scope="module")
def published():
    return load_published()


def synth_side(
    n_runs: int,
    scale: float,
    rng: np.random.Generator,
    iters: int = 60,
    run_cv: float = 0.01,
    iter_cv: float = 0.01,
    phi: float = 0.5,
) -> list[np.ndarray]:
    runs = []
    for _ in range(n_runs):
        level = scale * math.exp(rng.normal(0, run_cv))
        e = np.zeros(iters)
        e[0] = rng.normal(0, iter_cv / math.sqrt(1 - phi**2))
        for i in range(1, iters):
            e[i] = phi * e[i - 1] + rng.normal(0, iter_cv)
        runs.append(level * np.exp(e))
    return runs


# ------------------------------------------------------------------------------------------------ rounding intervals


def test_rounding_rules_are_declared_per_release():
    facts = releases()
    rounded = {n for n, f in facts.items() if f["published_rounding"]["tokens_per_sec_per_gpu"] != "integer"}
    assert rounded == {"26.04.01", "26.06.01", "26.08"}
    assert all(f["published_rounding"]["model_tflops_per_gpu"] == "integer" for f in facts.values())
    assert list(facts) == sorted(facts, key=lambda r: tuple(int(x) for x in r.split(".")))


def test_intervals():
    iv = cs.rounding_interval(729, "integer")
    assert (iv.lo, iv.hi) == (728.5, 729.5)
    # Qwen3 30B-A3B 8xGB300 26.04.01: 31744 * 8 / 4096 = 62 sequences/s for the job, +-0.5 -> +-256 tokens/s/GPU
    iv = cs.rounding_interval(31744, "whole_sequences_per_job", num_gpus=8, seq_length=4096)
    assert (iv.lo, iv.hi) == (31488, 32000) and "seq_s=62" in iv.rule
    # Kimi K2 256xGB300 26.04.01: 5328 * 256 / 4096 = 333 sequences/s, +-8 tokens/s/GPU
    iv = cs.rounding_interval(5328, "whole_sequences_per_job", num_gpus=256, seq_length=4096)
    assert (iv.lo, iv.hi) == (5320, 5336)
    with pytest.raises(cs.CompareError, match="unknown rounding rule"):
        cs.rounding_interval(1, "bf16")


def test_declared_token_rule_explains_every_rounded_row_and_bf16_does_not(published):
    """The evidence behind configs/release published_rounding: whole sequences/s per job holds on every row of the
    three rounded releases and (almost) nowhere else; the 8-significant-bit reading misses rows."""
    for row in cs.token_rounding_consistency(published):
        if row["declared"] == "whole_sequences_per_job":
            assert row["whole_sequences_per_job"] == row["rows"] > 10
            assert row["bf16"] < row["rows"] and row["whole_sequences_per_gpu"] < row["rows"] / 4
        else:
            assert row["whole_sequences_per_job"] <= 2


# ------------------------------------------------------------------------------------------------ release steps


def _pt(rel, tf, tok, formula="v1", model="m", **recipe):
    base = {f: None for f in cs.LIKE_FOR_LIKE_FIELDS} | {
        "tp": 1,
        "pp": 1,
        "cp": 1,
        "ep": 8,
        "gbs": 512,
        "mbs": 8,
        "seq_length": 4096,
    }
    rule = releases()[rel]["published_rounding"]["tokens_per_sec_per_gpu"] if rel in releases() else "integer"
    return cs.SeriesPoint(
        release=rel,
        formula=formula,
        tflops=cs.rounding_interval(tf, "integer"),
        tokens=cs.rounding_interval(tok, rule, num_gpus=8, seq_length=4096),
        recipe=base | recipe,
        model_name=model,
        reference="t#1",
    )


def test_metric_tflops_within_formula_tokens_across_unless_the_count_is_the_same():
    s = cs.compare_step(_pt("26.04", 724, 31470), _pt("26.04.01", 729, 31744), threshold=0)
    assert s.metric == "tflops" and s.direction == "up"
    a, b = _pt("26.04.01", 729, 31744), _pt("26.06", 1041, 45275, formula="v2")
    s = cs.compare_step(a, b)
    assert s.metric == "tokens" and "v1 -> v2" in s.metric_reason
    assert s.ratio_lo == pytest.approx(45274.5 / 32000) and s.ratio_hi == pytest.approx(45275.5 / 31488)
    s = cs.compare_step(a, b, same_count=lambda *args: True)
    assert s.metric == "tflops" and "counts m the same" in s.metric_reason
    s = cs.compare_step(a, b, same_count=lambda *args: False)
    assert s.metric == "tokens"


def test_formula_equivalence_uses_the_flops_model():
    # the six shipped models count the same under v1 and v2 (SwiGLU, no output gate; analysis README)
    assert same_flops_count("qwen3_30b_a3b", 4096, 1, "v1", "v2") is True
    assert same_flops_count("not_a_model", 4096, 1, "v1", "v2") is None


def test_marks_rounding_threshold_and_like_for_like():
    s = cs.compare_step(_pt("26.02", 699, 30376), _pt("26.02.01", 700, 30411))
    assert s.direction == "within rounding" and s.mark == "="  # [698.5, 699.5] touches [699.5, 700.5]
    a, b = _pt("26.04", 1090, 5332), _pt("26.04.01", 1088, 5328)  # -0.18 %
    assert cs.compare_step(a, b, threshold=0).direction == "down"
    s = cs.compare_step(a, b, threshold=0.01)
    assert s.direction == "below threshold" and s.mark == "~" and not s.real_change
    s = cs.compare_step(_pt("26.02", 700, 30000), _pt("26.02.01", 760, 32400, tp=2, mbs=4))
    assert s.mark == "▲†" and s.changed_fields == {"tp": (1, 2), "mbs": (8, 4)} and not s.like_for_like
    s = cs.compare_step(_pt("26.02", 700, 30000, tp=None), _pt("26.02.01", 710, 30400))
    assert s.like_for_like and s.unknown_fields == ("tp",)
    with pytest.raises(cs.CompareError):
        cs.compare_step(a, b, threshold=-1)


def test_qwen3_30b_8xgb300_history(published):
    series = cs.published_series(published, QWEN)
    assert [p.release for p in series] == [
        "25.11",
        "26.02",
        "26.02.01",
        "26.04",
        "26.04.01",
        "26.06",
        "26.06.01",
        "26.08",
    ]
    assert [p.tflops.value for p in series][1:] == [699, 700, 724, 729, 1041, 1029, 1029]
    steps = cs.compare_adjacent(series, 0.01)
    assert [(s.release_b, s.mark) for s in steps] == [
        ("26.02", "▲†"),
        ("26.02.01", "="),
        ("26.04", "▲"),
        ("26.04.01", "~"),
        ("26.06", "▲"),
        ("26.06.01", "▼"),
        ("26.08", "="),
    ]
    assert steps[0].changed_fields == {"mbs": (4, 8)}
    assert steps[4].metric == "tokens"  # no FLOPs-equivalence callback: the v1 -> v2 step falls back to tokens/s
    # on tokens/s the 26.04 -> 26.04.01 step would be 5x less sharp: whole-sequence rounding there is +-0.8 %
    r, lo, hi = cs.ratio_interval(series[3].tokens, series[4].tokens)
    assert hi - lo > 5 * (steps[3].ratio_hi - steps[3].ratio_lo) and lo < 1.001


def test_kimi_k2_history(published):
    series = cs.published_series(published, KIMI)
    assert [p.release for p in series] == ["26.02.01", "26.04", "26.04.01", "26.06"]
    assert cs.published_series(published, dataclasses.replace(KIMI, optimizer="adamw")) == []  # every row is Muon
    steps = cs.compare_adjacent(series, 0.0)
    assert [s.direction for s in steps] == ["up", "down", "up"]
    assert [s.direction for s in cs.compare_adjacent(series, 0.01)] == ["up", "below threshold", "below threshold"]


def test_duplicate_rows_pick_the_matching_recipe(published):
    series = cs.published_series(
        published, cs.ConfigKey(model="deepseek_v3", gpu="gb300", precision="mxfp8", num_gpus=256, optimizer="adamw")
    )
    p = next(x for x in series if x.release == "26.06")
    assert len(p.alternates) == 1 and p.recipe["gbs"] == 4096 and p.reference.startswith("published_")


# ------------------------------------------------------------------------------------------------ change points


def _series(values):
    rels = list(releases())
    pts = [_pt(r, v, v * 40) for r, v in zip(rels, values)]
    return pts, cs.compare_adjacent(pts, 0)


def test_change_points():
    assert cs.detect_change_points(*_series([700, 701, 700, 760, 761, 759])).releases == ("26.02.01",)
    assert cs.detect_change_points(*_series([700, 701, 700, 702, 701])).indices == ()
    assert cs.detect_change_points(*_series([700, 701, 700, 701, 760])).indices == (4,)  # the newest release
    short = cs.detect_change_points(*_series([700, 800]))
    assert short.status.startswith("too short") and short.indices == ()
    s = _series([700, 701, 700, 712, 713, 712])  # +1.7 %: found at 0.5 % noise, not at 3 %
    assert cs.detect_change_points(*s, noise_cv=0.005).indices == (3,)
    assert cs.detect_change_points(*s, noise_cv=0.03).indices == ()


def test_change_points_on_qwen3(published):
    series = cs.published_series(published, QWEN)
    cp = cs.detect_change_points(series, cs.compare_adjacent(series))
    assert cp.releases == ("26.02", "26.04", "26.06") and cp.params["penalty"] > 0


# ------------------------------------------------------------------------------------------------ own runs


def test_same_distribution_gives_no_significant_change():
    """50 seeds, both sides from one distribution, 5 runs each: CI excludes 1 in about alpha of them."""
    excl, verdicts = 0, []
    for seed in range(50):
        rng = np.random.default_rng(1000 + seed)
        r = cs.compare_runs(synth_side(5, 1.0, rng), synth_side(5, 1.0, rng), seed=seed, **FAST)
        excl += r.ci_low > 1 or r.ci_high < 1
        verdicts.append(r.verdict)
    assert excl / 50 <= 0.12  # alpha 0.05; binomial sd over 50 seeds ~0.03
    assert verdicts.count("no significant change") >= 47


def test_ten_percent_shift_gives_a_verdict():
    rng = np.random.default_rng(7)
    a, b = synth_side(5, 1.0, rng), synth_side(5, 1.10, rng)
    r = cs.compare_runs(a, b, seed=1)
    assert r.verdict == "slower" and r.ci_low > 1.05 and r.ratio == pytest.approx(1.10, abs=0.03)
    assert r.mannwhitney_runs_p < 0.05 and r.params["mannwhitney_iterations_dependent"]
    assert cs.compare_runs(b, a, seed=1).verdict == "faster"
    # the same data as throughput (1/time): B higher is faster
    inv = lambda side: [1 / x for x in side]  # noqa: E731
    assert cs.compare_runs(inv(a), inv(b), kind="throughput", seed=1).verdict == "slower"


def test_threshold_blocks_tiny_changes():
    rng = np.random.default_rng(3)
    a = synth_side(10, 1.0, rng, run_cv=0.001, iter_cv=0.001)
    b = synth_side(10, 1.005, rng, run_cv=0.001, iter_cv=0.001)
    assert cs.compare_runs(a, b, threshold=0.0, **FAST).verdict == "slower"
    r = cs.compare_runs(a, b, threshold=0.01, **FAST)
    assert r.verdict == "no significant change" and r.ci_low > 1 and "threshold 1.0%" in r.reason


def test_too_few_runs_say_how_many_are_needed():
    rng = np.random.default_rng(5)
    r = cs.compare_runs(synth_side(2, 1.0, rng, run_cv=0.02), synth_side(2, 1.0, rng, run_cv=0.02))
    assert r.verdict == "insufficient" and r.ci_low is None
    z = stats.norm.ppf(0.975) + stats.norm.ppf(0.8)
    assert r.repeats_needed == max(3, math.ceil(2 * z**2 * (r.between_run_cv / 0.02) ** 2) + 1)
    assert f"need {r.repeats_needed} runs per side" in r.reason
    one = cs.compare_runs([[1.0, 1.01]], [[1.0, 1.02]], assumed_cv=0.03)
    assert one.verdict == "insufficient" and "assumed 3%" in one.reason and one.repeats_needed == 37


def test_repeats_needed():
    assert cs.repeats_needed(0.01, 0.02) == 5  # 2 (1.96 + 0.84)^2 0.25 = 3.9 -> 4, + 1
    assert cs.repeats_needed(0.02, 0.02) == 17
    assert cs.repeats_needed(0.001, 0.05, min_runs=5) == 5
    with pytest.raises(cs.CompareError):
        cs.repeats_needed(0.01, 0)


def test_deterministic_with_a_seed_and_parameters_recorded():
    rng = np.random.default_rng(11)
    a, b = synth_side(4, 1.0, rng), synth_side(4, 1.02, rng)
    r1, r2 = cs.compare_runs(a, b, seed=42, **FAST), cs.compare_runs(a, b, seed=42, **FAST)
    assert r1 == r2
    assert cs.compare_runs(a, b, seed=43, **FAST).ci_low != r1.ci_low
    for k in ("n_resamples", "block_length", "confidence", "threshold", "seed", "versions", "bootstrap"):
        assert k in r1.params
    assert r1.params["versions"]["arch"] != "not installed" and r1.params["versions"]["ruptures"] != "not installed"


def test_runs_of_one_value_and_bad_input():
    rng = np.random.default_rng(2)
    r = cs.compare_runs(
        synth_side(4, 1.0, rng), synth_side(4, 1.1, rng), stat="mean", bootstrap="moving", block_length=5, **FAST
    )
    assert r.verdict == "slower" and r.params["block_length"] == 5
    one = cs.compare_runs([[1.0], [1.01], [0.99], [1.0]], [[1.2], [1.21], [1.19], [1.2]], **FAST)
    assert one.verdict == "slower" and one.params["iterations_per_run"] == [[1] * 4, [1] * 4]
    with pytest.raises(cs.CompareError, match="positive finite"):
        cs.compare_runs([[1.0, -1.0]] * 3, [[1.0, 1.0]] * 3)
    with pytest.raises(cs.CompareError, match="no runs"):
        cs.compare_runs([], [[1.0]])
    with pytest.raises(cs.CompareError):
        cs.compare_runs([[1.0, 1.1]] * 3, [[1.0, 1.0]] * 3, stat="mode")


def test_fdr_across_many_comparisons():
    """80 comparisons, 60 null and 20 at +10 % (threshold 0): all 20 found, false discovery proportion <= 10 %,
    q-values = scipy's Benjamini-Hochberg; the 60 nulls alone give at most one discovery."""
    results, truth = [], []
    for i in range(80):
        rng = np.random.default_rng(500 + i)
        shift = 1.10 if i >= 60 else 1.0
        results.append(
            cs.compare_runs(synth_side(5, 1.0, rng), synth_side(5, shift, rng), seed=i, threshold=0.0, **FAST)
        )
        truth.append(shift > 1)
    adj = cs.apply_fdr(results, alpha=0.05)
    disc = [r.verdict != "no significant change" for r in adj]
    assert sum(d and t for d, t in zip(disc, truth)) == 20
    assert sum(d and not t for d, t in zip(disc, truth)) / max(1, sum(disc)) <= 0.10
    np.testing.assert_allclose([r.q_value for r in adj], stats.false_discovery_control([r.p_value for r in results]))
    assert sum(r.verdict != "no significant change" for r in cs.apply_fdr(results[:60])) <= 1
    ins = cs.compare_runs([[1.0, 1.1]], [[1.0, 1.1]])
    assert cs.apply_fdr([ins, results[-1]])[0] == ins


def test_summarize_runs():
    value, lo, hi = cs.summarize_runs([[10.0, 10.2], [10.4, 10.6], [9.8, 10.0], [10.1, 10.1]], seed=0)
    assert value == pytest.approx(10.15) and lo < value < hi
    assert cs.summarize_runs([[1.0], [2.0]])[1:] == (None, None)


def test_zero_spread_samples_are_not_tested():
    """Issue 17: identical values on both sides gave p = 0 and a `slower` verdict; no spread means no test."""
    from bridgebench.results.compare_stats import NO_SPREAD, apply_fdr, compare_runs

    r = compare_runs([[2.0] * 5] * 3, [[3.0] * 5] * 3)
    assert r.verdict == NO_SPREAD == "no spread: cannot test"
    assert r.p_value is None and r.ci_low is None and r.ci_high is None and r.ratio == 1.5
    assert "no spread" in r.reason
    same = compare_runs([[2.0] * 5] * 3, [[2.0] * 5] * 3)
    assert same.verdict == NO_SPREAD and same.p_value is None
    assert apply_fdr([r, same]) == [r, same]  # nothing to adjust: they carry no p-value
    one_side = compare_runs([[2.0, 2.1, 2.05]] * 3, [[2.0] * 5] * 3)  # spread on one side: a real test
    assert one_side.verdict != NO_SPREAD and one_side.p_value is not None and one_side.p_value > 0
