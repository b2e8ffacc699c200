"""The validation figures, computed one way everywhere: relative errors, MAPE, median / max |error|, geometric RMS,
band coverage, rank correlation (Spearman) and pair ratios (e.g. Muon over AdamW step time).

``bridgebench calibrate``, ``bridgebench check-published --models``, ``benchmarks/validate_*.py`` and the tests call
these functions; none of them computes a figure of its own. Errors are relative (0.05 = 5 %); an empty input gives
``nan`` (no figure), never an exception.

Sources: Spearman's rho is :func:`scipy.stats.spearmanr` (average ranks for ties); the geometric RMS is
``exp(sqrt(mean(log(1 + e)^2))) - 1``, the RMS of the log ratio predicted / measured, written back as a ratio.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

NAN = float("nan")


def rel_error(predicted: float, measured: float) -> float:
    """``predicted / measured - 1`` (dimensionless; 0.05 = the prediction is 5 % high).

    Raises:
        ZeroDivisionError: ``measured`` is 0.
    """
    return predicted / measured - 1


def rel_errors(predicted: Sequence[float], measured: Sequence[float]) -> list[float]:
    """:func:`rel_error` of each pair (same length; shape ``[n]``).

    Raises:
        ValueError: the sequences differ in length.
    """
    if len(predicted) != len(measured):
        raise ValueError(f"rel_errors: {len(predicted)} predictions for {len(measured)} measurements")
    return [rel_error(p, m) for p, m in zip(predicted, measured)]


def _abs(errors: Iterable[float | None]) -> np.ndarray:
    """|errors| as float64, ``None`` and ``nan`` left out."""
    a = np.asarray([e for e in errors if e is not None], dtype=float)
    return np.abs(a[~np.isnan(a)])


def mape(errors: Iterable[float | None]) -> float:
    """Mean absolute relative error of ``errors`` (``None`` / ``nan`` left out); ``nan`` when none is left."""
    a = _abs(errors)
    return float(a.mean()) if a.size else NAN


def median_abs(errors: Iterable[float | None]) -> float:
    """Median |error| (``None`` / ``nan`` left out); ``nan`` when none is left."""
    a = _abs(errors)
    return float(np.median(a)) if a.size else NAN


def max_abs(errors: Iterable[float | None]) -> float:
    """Largest |error| (``None`` / ``nan`` left out); ``nan`` when none is left."""
    a = _abs(errors)
    return float(a.max()) if a.size else NAN


def geometric_rms(errors: Iterable[float]) -> float:
    """``exp(sqrt(mean(log1p(e)^2))) - 1``: the RMS of log(predicted / measured) as a ratio; ``nan`` when empty.

    Raises:
        ValueError: an error is <= -1 (a prediction of zero or less has no log ratio).
    """
    logs = [math.log1p(e) for e in errors]
    if not logs:
        return NAN
    return math.exp(math.sqrt(statistics.mean(x * x for x in logs))) - 1


def within_band(error: float | None, band: float) -> bool:
    """Whether a relative error lies inside its symmetric band (``|error| <= band``); a missing error is not."""
    return error is not None and error == error and abs(error) <= band


def coverage(errors: Sequence[float | None], bands: Sequence[float]) -> tuple[int, int]:
    """(rows within their band, rows with an error): how many held-out errors the stated bands cover.

    Raises:
        ValueError: the sequences differ in length.
    """
    if len(errors) != len(bands):
        raise ValueError(f"coverage: {len(errors)} errors for {len(bands)} bands")
    scored = [(e, b) for e, b in zip(errors, bands) if e is not None and e == e]
    return sum(within_band(e, b) for e, b in scored), len(scored)


def coverage_fraction(errors: Sequence[float | None], bands: Sequence[float]) -> float:
    """Fraction of relative errors inside their band read as a ratio: ``|log(1 + error)| <= log(1 + band)`` (the
    conformal bands of :mod:`bridgebench.model.steptime.bands` are symmetric in log space); missing errors and bands
    are not scored; ``nan`` when nothing is.

    Raises:
        ValueError: the sequences differ in length.
    """
    if len(errors) != len(bands):
        raise ValueError(f"coverage_fraction: {len(errors)} errors for {len(bands)} bands")
    scored = [(e, b) for e, b in zip(errors, bands) if e is not None and e == e and b is not None and b == b]
    if not scored:
        return NAN
    return sum(abs(math.log1p(e)) <= math.log1p(b) for e, b in scored) / len(scored)


def rank_correlation(predicted: Sequence[float], measured: Sequence[float]) -> float:
    """Spearman's rho between predictions and measurements (:func:`scipy.stats.spearmanr`); ``nan`` with fewer than
    two pairs or when either side is constant (no ranking to compare).

    Raises:
        ValueError: the sequences differ in length.
    """
    if len(predicted) != len(measured):
        raise ValueError(f"rank_correlation: {len(predicted)} predictions for {len(measured)} measurements")
    if len(predicted) < 2 or len(set(predicted)) < 2 or len(set(measured)) < 2:
        return NAN
    from scipy.stats import spearmanr

    return float(spearmanr(predicted, measured).statistic)


@dataclass(frozen=True, kw_only=True)
class PairRatio:
    """One configuration (``b``) over another (``a``), measured and predicted (dimensionless ratios)."""

    measured: float
    predicted: float

    @property
    def error(self) -> float:
        """``predicted / measured - 1``."""
        return rel_error(self.predicted, self.measured)

    @property
    def same_direction(self) -> bool:
        """Whether the prediction moves the way the measurement does (both above 1 or both below)."""
        return (self.predicted - 1) * (self.measured - 1) > 0


def pair_ratio(
    *, measured_a: float, measured_b: float, predicted_a: float, predicted_b: float, anchored: bool = False
) -> PairRatio:
    """``b / a`` measured and predicted (e.g. a Muon step over its AdamW twin's, in s / s).

    ``anchored``: the predicted ratio is ``1 + (predicted_b - predicted_a) / measured_a`` -- the predicted difference
    put on the measured ``a`` (what a model of the difference alone claims), else ``predicted_b / predicted_a``.

    Raises:
        ZeroDivisionError: ``measured_a`` (or ``predicted_a`` unanchored) is 0.
    """
    predicted = 1 + (predicted_b - predicted_a) / measured_a if anchored else predicted_b / predicted_a
    return PairRatio(measured=measured_b / measured_a, predicted=predicted)


def level_factor_loo(
    predicted: Sequence[float], measured: Sequence[float], cells: Sequence[object]
) -> list[float | None]:
    """Leave-one-out level-factor predictions: each prediction scaled by the geometric mean of measured / predicted
    over the OTHER rows of its cell (``cells[i]``: any hashable key, e.g. (GPU, precision)); ``None`` for a row
    alone in its cell (no factor to fit).

    Raises:
        ValueError: the sequences differ in length.
    """
    if not len(predicted) == len(measured) == len(cells):
        raise ValueError("level_factor_loo: predicted, measured and cells differ in length")
    out: list[float | None] = []
    for i in range(len(predicted)):
        others = [
            math.log(measured[j] / predicted[j]) for j in range(len(predicted)) if j != i and cells[j] == cells[i]
        ]
        out.append(predicted[i] * math.exp(statistics.mean(others)) if others else None)
    return out
