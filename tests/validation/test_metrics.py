"""bridgebench.validation.metrics: the figures every validator prints, against hand-computed values and scipy."""

from __future__ import annotations

import math

import pytest

from bridgebench.validation import metrics


def test_errors_and_their_summaries():
    errs = metrics.rel_errors([110.0, 90.0, 100.0, 80.0], [100.0, 100.0, 100.0, 100.0])
    assert errs == pytest.approx([0.1, -0.1, 0.0, -0.2])
    assert metrics.mape(errs) == pytest.approx(0.1)
    assert metrics.median_abs(errs) == pytest.approx(0.1)
    assert metrics.max_abs(errs) == pytest.approx(0.2)
    assert metrics.mape([None, float("nan"), 0.3]) == pytest.approx(0.3)
    assert math.isnan(metrics.mape([])) and math.isnan(metrics.median_abs([None]))
    # geometric RMS of +10 % and -1/11 (the same log distance either way) is 10 %
    assert metrics.geometric_rms([0.1, 1 / 1.1 - 1]) == pytest.approx(0.1)
    with pytest.raises(ValueError):
        metrics.rel_errors([1.0], [1.0, 2.0])


def test_coverage_counts_rows_within_their_band():
    assert metrics.coverage([0.05, -0.2, None, 0.1], [0.1, 0.1, 0.1, 0.1]) == (2, 3)
    assert not metrics.within_band(float("nan"), 1.0)


def test_rank_correlation_is_spearmans():
    from scipy.stats import spearmanr

    p, y = [1.0, 2.0, 3.0, 4.0, 5.0], [2.0, 1.0, 4.0, 3.0, 6.0]
    assert metrics.rank_correlation(p, y) == pytest.approx(spearmanr(p, y).statistic)
    assert metrics.rank_correlation(p, [5.0, 4.0, 3.0, 2.0, 1.0]) == pytest.approx(-1.0)
    assert math.isnan(metrics.rank_correlation([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]))


def test_pair_ratios():
    r = metrics.pair_ratio(measured_a=10.0, measured_b=11.0, predicted_a=9.0, predicted_b=9.9)
    assert r.measured == pytest.approx(1.1) and r.predicted == pytest.approx(1.1) and r.same_direction
    anchored = metrics.pair_ratio(measured_a=10.0, measured_b=11.0, predicted_a=9.0, predicted_b=9.5, anchored=True)
    assert anchored.predicted == pytest.approx(1.05) and anchored.error == pytest.approx(1.05 / 1.1 - 1)
    assert not metrics.pair_ratio(measured_a=1.0, measured_b=2.0, predicted_a=2.0, predicted_b=1.0).same_direction


def test_level_factor_is_fitted_on_the_other_rows_of_the_cell():
    scaled = metrics.level_factor_loo([1.0, 2.0, 4.0], [2.0, 4.0, 4.0], ["a", "a", "b"])
    assert scaled[0] == pytest.approx(2.0) and scaled[1] == pytest.approx(4.0) and scaled[2] is None


def test_coverage_fraction_reads_bands_as_ratios():
    """A +-10 % band covers a prediction 10 % high and one 1/1.1 - 1 = -9.1 % low (symmetric in log space), not one
    10 % low; missing errors and bands are not scored."""
    band = [0.1 + 1e-12] * 3 + [0.1]
    assert metrics.coverage_fraction([0.10, 1 / 1.1 - 1, -0.10, None], band) == pytest.approx(2 / 3)
    assert math.isnan(metrics.coverage_fraction([None], [0.1]))
    with pytest.raises(ValueError, match="coverage_fraction"):
        metrics.coverage_fraction([0.1], [])
