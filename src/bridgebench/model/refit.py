"""Learn from measured runs: a Bayesian refit of the time model's predictions on a user's own cluster, and the rule
that chooses what to measure next and when to stop (``bridgebench sweep --adaptive``, ``bridgebench calibrate
--from-runs``, ``benchmarks/bench_adaptive.py`` -- one code path for all three).

**Model.** For a point ``i`` with predicted step time ``T_i`` (the time model, terms in seconds) and measured step
time ``M_i``, the log error ``y_i = log(M_i / T_i)`` is

    y_i = a + d_g(i) + m_m(i) + sum_k b_k s_ik + e_i,      e_i ~ N(0, sigma_i^2)

* ``a``: the cluster's level (one factor on every term), prior ``N(0, level_sd^2)``;
* ``d_g``: a level per (GPU, precision) group ``g`` on top of it, prior ``N(0, group_sd^2)`` (hierarchical: a group
  with no run borrows ``a`` from the groups that have some);
* ``m_m``: a level per model ``m`` (``configs/model`` name; a space that mixes models -- a weak-scaling table, a
  framework comparison at two sizes -- learns less from one model's runs about another's), prior
  ``N(0, model_sd^2)``;
* ``b_k``: per-term factors, ``k`` in :data:`FACTORS` -- GEMM efficiency (compute, recompute and the pipeline bubble,
  which is compute time), NVLink bandwidth (TP / CP / EP exchanges inside the NVLink domain), scale-out bandwidth
  (DP / expert-DP reduction, pipeline sends, an all-to-all whose expert group leaves the NVLink domain), per-layer
  overhead (the ``overhead`` and HBM-bound element-wise terms), Newton-Schulz / optimizer efficiency -- weighted by
  the term group's share ``s_ik`` of the predicted step, prior ``N(0, factor_sd^2)``;
* ``sigma_i``: what is left of a point's miss once the cluster's level and factors are known: its own band
  (``band_pct / 100``, the time model's cross-validated log error, as the prediction returns it) capped at
  ``resid_sd``, times a scale ``c`` learnt from the runs, combined with the run-to-run noise. The band itself is
  mostly level -- how far NVIDIA's calibration misses a cluster it has not seen -- and the level is a coefficient
  here; counting it again in every run's noise would weigh each run as if it taught nothing about the others.

The band scale ``c``: the prediction's bands say how far the model misses on NVIDIA's clusters; on this cluster the
runs show how far it does once its level is learnt. ``c^2`` takes a scaled-inverse-chi-square prior with ``band_df``
degrees of freedom centred on 1 (the bands as given) and the runs' standardised leave-one-run-out residuals ``z_j``
as data: ``c^2 = (band_df + sum z_j^2) / (band_df + n)`` (the conjugate update of a normal variance, Gelman et al.,
*Bayesian Data Analysis*, 3rd ed., Sec. 2.6; leave-one-out so that a run does not vouch for itself). With no run,
``c = 1``.

The posterior is the conjugate Gaussian one (Bayesian linear regression with known noise; Gelman et al., *Bayesian
Data Analysis*, 3rd ed., Sec. 14.8 "including prior information": the prior is a set of pseudo-observations):
``Sigma = (X^T W X + Lambda^-1)^-1``, ``mu = Sigma X^T W y`` with ``W = diag(1 / sigma_i^2)``. With no run it is the
prior (the published calibration unchanged); each run pulls the coefficients towards the data in proportion to its
weight against the prior's -- shrinkage in proportion to the evidence. A point's corrected step time is
``T_i exp(x_i mu)``; its new band is the posterior predictive sd ``sqrt(x_i Sigma x_i^T + sigma_i^2)``.

**Prior widths** (:class:`Prior`): ``level_sd`` 0.20 -- on configurations nobody measured, the calibrated model
misses by 17.6 % MAPE (issue 23; docs/sweeps.md: 18.2 % absolute on the ablation rows whose GPU and precision are
calibrated), so a new cluster's level is known to about +-20 %; ``group_sd`` 0.10 (precisions of one GPU differ by
less than clusters do); ``model_sd`` 0.18 -- how much more the calibration misses a model it never saw than a new
configuration of a model it saw: the conformal 68 % half-widths of ``configs/calibration/default.yaml``
(``uncalibrated model`` 0.232, ``new configuration`` 0.142; ``sqrt(0.232^2 - 0.142^2)``); ``factor_sd`` 0.30 (a
term's rate off by 30 % is the size of the first-principles constants' doubt: docs/sweeps.md "Known gaps");
``resid_sd`` 0.07 -- a configuration's miss once its level is known: the calibration's leave-one-release-out MAPE on
NVIDIA's published rows, 7.1 % (``configs/calibration/default.yaml`` ``source``), and issue 23's 6.7 % on the
ablation rows once one level per set is learnt; ``noise_sd`` 0.01 -- the run-to-run spread of one configuration's
step time.

**Choosing** (:func:`choose`, stated as the rule ``ei+info``): with no run yet, the best predicted point. Then the
unmeasured point whose run is worth most, in one unit (a fraction of throughput, log): its expected improvement
over the best measured throughput (Jones, Schonlau & Welch 1998, J. Global Optim. 13:455, Eq. 15) under its
posterior -- throughput ``log(1/T)`` -- plus what its run is expected to remove from the mean absolute error of the
other unmeasured points' predictions (:func:`information`: the conjugate update's variance reduction,
``(x_j Sigma x_i)^2 / (x_i Sigma x_i + sigma_i^2)``, MacKay 1992 "Information-based objective functions for active
data selection", Neural Comput. 4:590; a normal error's mean absolute value is ``sqrt(2/pi)`` sd). Early the
improvement term leads; once the best is nearly found, a run teaches the model where the others' term shares differ
(a point with another communication share) rather than repeating what the best one taught. A tie goes to the
better predicted point; ``k`` points per round are the ``k`` best scores.

**Stopping** (:func:`stop_reason`): when the best measured point beats every unmeasured point's optimistic band edge
(posterior mean + ``kappa`` x posterior predictive sd, ``kappa`` 1: one band), or when the budget is spent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

#: per-term factors of the refit, and the time-model terms (``bridgebench.model.steptime.predict.TERMS``) each covers
FACTORS = ("gemm", "nvlink", "scale_out", "layer_overhead", "ns")
_TERM_FACTOR = {
    "compute": "gemm",
    "recompute": "gemm",
    "bubble": "gemm",
    "tp_comm": "nvlink",
    "cp_comm": "nvlink",
    "ep_a2a": "nvlink",
    "dp_comm": "scale_out",
    "pp_p2p": "scale_out",
    "overhead": "layer_overhead",
    "elementwise": "layer_overhead",
    "optimizer": "ns",
}
RULE = "ei+info"
RULE_TEXT = (
    "first the best predicted point; then the unmeasured point with the largest expected improvement over the best "
    "measured throughput under the refitted posterior (Jones et al. 1998) plus the expected reduction of the other "
    "unmeasured points' mean absolute prediction error (MacKay 1992); stop when the best measured point beats "
    "every unmeasured point's optimistic band edge (posterior mean + 1 band), or when the budget is spent"
)


class RefitError(ValueError):
    """A measurement that cannot be used (non-positive or non-finite step time, unknown point)."""


@dataclass(frozen=True, kw_only=True)
class Prior:
    """Prior widths (log units; see the module docstring for their sources) and the stop rule's ``kappa``."""

    level_sd: float = 0.20
    group_sd: float = 0.10
    model_sd: float = 0.18
    factor_sd: float = 0.30
    resid_sd: float = 0.07
    noise_sd: float = 0.01
    band_df: float = 4.0
    kappa: float = 1.0


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """One point as the time model predicted it: ``step_s`` (s), ``terms`` (s per step by term), ``flops`` (model
    FLOPs per step), ``num_gpus``, ``band_pct`` (the prediction's band, +- %), ``group`` ((GPU, precision) label),
    ``model`` (``configs/model`` name; empty: no per-model level),
    ``ep_scale_out`` (its expert all-to-all leaves the NVLink domain)."""

    point_id: str
    step_s: float
    flops: float
    num_gpus: int
    band_pct: float
    group: str
    terms: Mapping[str, float] = field(default_factory=dict)
    ep_scale_out: bool = False
    model: str = ""

    @property
    def tflops(self) -> float:
        """Predicted model TFLOP/s per GPU."""
        return self.flops / self.step_s / self.num_gpus / 1e12

    def shares(self) -> dict[str, float]:
        """Share of the predicted step of each factor's terms (sums to 1 when the terms sum to the step)."""
        total = sum(self.terms.values()) or self.step_s
        out = dict.fromkeys(FACTORS, 0.0)
        for term, seconds in self.terms.items():
            k = "scale_out" if term == "ep_a2a" and self.ep_scale_out else _TERM_FACTOR.get(term)
            if k:
                out[k] += float(seconds) / total
        return out


@dataclass(frozen=True, kw_only=True)
class Posterior:
    """The refit: coefficient names, posterior mean and covariance, the runs it saw (point id -> measured s)."""

    names: tuple[str, ...]
    mean: np.ndarray
    cov: np.ndarray
    measured: dict[str, float]
    prior: Prior
    band_scale: float = 1.0

    def row(self, c: Candidate) -> np.ndarray:
        """The point's design row over :attr:`names`."""
        s = c.shares()
        x = np.zeros(len(self.names))
        for j, n in enumerate(self.names):
            if n == "level":
                x[j] = 1.0
            elif n.startswith("group:"):
                x[j] = 1.0 if n[6:] == c.group else 0.0
            elif n.startswith("model:"):
                x[j] = 1.0 if n[6:] == c.model else 0.0
            else:
                x[j] = s.get(n[7:], 0.0)  # "factor:<k>"
        return x

    def log_ratio(self, c: Candidate) -> tuple[float, float]:
        """(posterior mean, sd) of ``log(measured / predicted step)`` for point ``c``; the sd is the posterior
        predictive one: coefficient uncertainty and the point's own band."""
        x = self.row(c)
        var = float(x @ self.cov @ x) + _noise(c, self.prior, self.band_scale) ** 2
        if f"group:{c.group}" not in self.names:  # a (GPU, precision) no run measured: its level is the prior's
            var += self.prior.group_sd**2
        if c.model and f"model:{c.model}" not in self.names:
            var += self.prior.model_sd**2
        return float(x @ self.mean), math.sqrt(max(var, 0.0))

    def step(self, c: Candidate) -> tuple[float, float]:
        """(corrected step time s, band as a fraction: the posterior predictive sd in log units)."""
        m, sd = self.log_ratio(c)
        return c.step_s * math.exp(m), sd

    def to_mapping(self) -> dict[str, Any]:
        """Plain data (a calibration file's ``cluster_refit`` node): names, mean, covariance, band scale, prior,
        measured step times."""
        return {
            "names": list(self.names),
            "mean": [float(v) for v in self.mean],
            "cov": [[float(v) for v in row] for row in self.cov],
            "band_scale": float(self.band_scale),
            "prior": {k: float(getattr(self.prior, k)) for k in Prior.__dataclass_fields__},
            "measured_s": {str(k): float(v) for k, v in self.measured.items()},
        }

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Posterior:
        """The inverse of :meth:`to_mapping`.

        Raises:
            RefitError: missing keys or shapes that do not agree.
        """
        try:
            names = tuple(str(n) for n in data["names"])
            mean = np.asarray(data["mean"], dtype=float)
            cov = np.asarray(data["cov"], dtype=float)
            prior = Prior(**{k: float(v) for k, v in (data.get("prior") or {}).items()})
            out = cls(
                names=names,
                mean=mean,
                cov=cov,
                measured=dict(data.get("measured_s") or {}),
                prior=prior,
                band_scale=float(data.get("band_scale", 1.0)),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise RefitError(f"cluster_refit: malformed ({err})") from err
        if mean.shape != (len(names),) or cov.shape != (len(names), len(names)):
            raise RefitError(f"cluster_refit: {len(names)} names but mean {mean.shape} and cov {cov.shape}")
        return out

    def coefficients(self) -> dict[str, tuple[float, float]]:
        """name -> (posterior mean, sd) in log units (a factor ``f`` multiplies its terms by ``exp(f)``)."""
        return {n: (float(self.mean[j]), math.sqrt(float(self.cov[j, j]))) for j, n in enumerate(self.names)}


def _noise(c: Candidate, prior: Prior, scale: float = 1.0) -> float:
    """A run's residual sd (log): its band capped at ``resid_sd`` (``resid_sd`` without a band), scaled, with the
    run-to-run noise."""
    own = min(c.band_pct / 100.0, prior.resid_sd) if c.band_pct > 0 else prior.resid_sd
    return math.hypot(scale * own, prior.noise_sd)


def names_for(candidates: Sequence[Candidate]) -> tuple[str, ...]:
    """Coefficients of a space: the level, one per (GPU, precision) group, one per model (candidates that name
    one), one per term factor."""
    groups = sorted({c.group for c in candidates})
    models = sorted({c.model for c in candidates if c.model})
    return ("level", *(f"group:{g}" for g in groups), *(f"model:{m}" for m in models),
            *(f"factor:{k}" for k in FACTORS))  # fmt: skip


def refit(candidates: Sequence[Candidate], measured: Mapping[str, float], prior: Prior | None = None) -> Posterior:
    """The posterior given measured step times (``point id -> s``) of some of ``candidates`` (see the module
    docstring: the coefficients, then the band scale from the leave-one-run-out residuals, then the coefficients
    again with the scaled bands). No measurement: the prior.

    Raises:
        RefitError: a measured id that is no candidate, or a step time that is not a positive finite number.
    """
    prior = prior or Prior()
    first = _fit(candidates, measured, prior, 1.0)
    if len(measured) < 2 or prior.band_df <= 0:
        return first
    by_id = {c.point_id: c for c in candidates}
    z2 = 0.0
    for pid, m in measured.items():
        rest = _fit(candidates, {p: v for p, v in measured.items() if p != pid}, prior, 1.0)
        mu, sd = rest.log_ratio(by_id[pid])
        z2 += ((math.log(m / by_id[pid].step_s) - mu) / sd) ** 2
    scale = math.sqrt((prior.band_df + z2) / (prior.band_df + len(measured)))
    return _fit(candidates, measured, prior, scale)


def _fit(candidates: Sequence[Candidate], measured: Mapping[str, float], prior: Prior, scale: float) -> Posterior:
    """The conjugate posterior of the coefficients with the bands scaled by ``scale``."""
    names = names_for(candidates)
    by_id = {c.point_id: c for c in candidates}
    widths = {"level": prior.level_sd, "group": prior.group_sd, "model": prior.model_sd, "factor": prior.factor_sd}
    lam = np.array([widths[n.split(":")[0]] for n in names])
    post0 = Posterior(
        names=names, mean=np.zeros(len(names)), cov=np.diag(lam**2), measured={}, prior=prior, band_scale=scale
    )
    rows, ys, ws = [], [], []
    for pid, m in measured.items():
        if pid not in by_id:
            raise RefitError(f"refit: measured point {pid!r} is not in the space")
        if not (isinstance(m, (int, float)) and math.isfinite(m) and m > 0):
            raise RefitError(f"refit: measured step time of {pid!r} must be a positive number of seconds, got {m!r}")
        c = by_id[pid]
        rows.append(post0.row(c))
        ys.append(math.log(m / c.step_s))
        ws.append(1.0 / _noise(c, prior, scale) ** 2)
    if not rows:
        return post0
    x, y, w = np.array(rows), np.array(ys), np.array(ws)
    precision = x.T @ (w[:, None] * x) + np.diag(1.0 / lam**2)
    cov = np.linalg.inv(precision)
    mean = cov @ (x.T @ (w * y))
    return Posterior(names=names, mean=mean, cov=cov, measured=dict(measured), prior=prior, band_scale=scale)


def _log_tput(c: Candidate, post: Posterior) -> tuple[float, float]:
    """(mean, sd) of log throughput ``log(1 / step)`` of ``c`` per GPU-normalised FLOPs (log TFLOP/s/GPU)."""
    m, sd = post.log_ratio(c)
    return math.log(c.tflops) - m, sd


def measured_tflops(c: Candidate, seconds: float) -> float:
    """Model TFLOP/s per GPU of a measured step time (s) of point ``c``."""
    return c.flops / seconds / c.num_gpus / 1e12


def expected_improvement(mu: float, sd: float, best: float) -> float:
    """E[max(X - best, 0)] for X ~ N(mu, sd^2) (Jones et al. 1998, Eq. 15)."""
    if sd <= 0:
        return max(mu - best, 0.0)
    z = (mu - best) / sd
    pdf = math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    cdf = 0.5 * (1 + math.erf(z / math.sqrt(2)))
    return (mu - best) * cdf + sd * pdf


@dataclass(frozen=True, kw_only=True)
class Choice:
    """A point chosen for measurement and why (``reason``: the rule's figures)."""

    point_id: str
    reason: str
    score: float


def information(post: Posterior, c: Candidate, others: Sequence[Candidate]) -> float:
    """Expected reduction (log units) of the mean absolute error of the ``others``' corrected predictions if ``c``
    is measured (module docstring: the conjugate variance update; ``sqrt(2/pi)`` sd is a normal error's mean
    absolute value). 0 with no other point."""
    rest = [o for o in others if o.point_id != c.point_id]
    if not rest:
        return 0.0
    x = post.row(c)
    sx = post.cov @ x
    denom = float(x @ sx) + _noise(c, post.prior, post.band_scale) ** 2
    gain = 0.0
    for o in rest:
        sd = post.log_ratio(o)[1]
        drop = float(post.row(o) @ sx) ** 2 / denom
        gain += sd - math.sqrt(max(sd * sd - drop, 0.0))
    return math.sqrt(2.0 / math.pi) * gain / len(rest)


def choose(candidates: Sequence[Candidate], post: Posterior, k: int = 1, exclude: Sequence[str] = ()) -> list[Choice]:
    """Up to ``k`` unmeasured points to measure next (rule :data:`RULE`, see the module docstring); ``exclude``:
    points not to choose (submitted and still running, or failed)."""
    skip = set(post.measured) | set(exclude)
    todo = [c for c in candidates if c.point_id not in skip]
    if not todo:
        return []
    by_id = {c.point_id: c for c in candidates}
    if not post.measured:
        ranked = sorted(todo, key=lambda c: -_log_tput(c, post)[0])
        return [
            Choice(
                point_id=c.point_id,
                reason=f"best predicted ({math.exp(_log_tput(c, post)[0]):.1f} TFLOP/s/GPU)",
                score=0.0,
            )
            for c in ranked[:k]
        ]
    best = max(math.log(measured_tflops(by_id[p], s)) for p, s in post.measured.items())
    scored = []
    for c in todo:
        mu, sd = _log_tput(c, post)
        ei, info = expected_improvement(mu, sd, best), information(post, c, todo)
        scored.append((ei + info, mu, sd, ei, info, c))
    scored.sort(key=lambda t: (-t[0], -t[1]))
    return [
        Choice(
            point_id=c.point_id,
            reason=f"expected improvement {100 * ei:.2f} % over the best measured + {100 * info:.2f} % expected "
            f"off the others' mean error (posterior {math.exp(mu):.1f} TFLOP/s/GPU +-{100 * sd:.1f} %)",
            score=score,
        )
        for score, mu, sd, ei, info, c in scored[:k]
    ]


def stop_reason(
    candidates: Sequence[Candidate], post: Posterior, *, spent: int, budget: int | None, exclude: Sequence[str] = ()
) -> str | None:
    """Why the loop stops now, or None: ``converged`` (the best measured point beats every unmeasured point's
    optimistic edge, posterior mean + ``kappa`` bands), ``budget`` (``spent >= budget``), ``exhausted`` (nothing
    left to measure)."""
    by_id = {c.point_id: c for c in candidates}
    todo = [c for c in candidates if c.point_id not in post.measured and c.point_id not in set(exclude)]
    if post.measured:
        best = max(math.log(measured_tflops(by_id[p], s)) for p, s in post.measured.items())
        edges = [_log_tput(c, post) for c in todo]
        if all(mu + post.prior.kappa * sd <= best for mu, sd in edges):
            return "converged"
    if budget is not None and spent >= budget:
        return "budget"
    if not todo:
        return "exhausted"
    return None


def leave_one_run_out(
    candidates: Sequence[Candidate], measured: Mapping[str, float], prior: Prior | None = None
) -> list[dict[str, float]]:
    """Each measured point predicted by a refit on the other runs: ``point_id``, ``measured_s``, ``predicted_s``,
    ``error_pct`` (predicted / measured - 1, %), ``band_pct`` (posterior predictive sd, %), ``inside`` (|log error|
    <= band), ``group`` and ``group_measured`` (another run of its (GPU, precision) group remained: the held-out
    prediction is one of a measured group, as ``predict`` makes for the group's other points; without one it is a
    new group's, whose level only the prior knows)."""
    by_id = {c.point_id: c for c in candidates}
    out = []
    for pid, m in measured.items():
        rest = {p: s for p, s in measured.items() if p != pid}
        post = refit(candidates, rest, prior)
        pred, sd = post.step(by_id[pid])
        out.append(
            {
                "point_id": pid,
                "measured_s": float(m),
                "predicted_s": pred,
                "error_pct": 100 * (pred / m - 1),
                "band_pct": 100 * sd,
                "inside": abs(math.log(pred / m)) <= sd,
                "group": by_id[pid].group,
                "group_measured": any(by_id[p].group == by_id[pid].group for p in rest),
            }
        )
    return out
