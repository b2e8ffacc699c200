"""Uncertainty bands that cover what they claim: conformal quantiles of held-out errors, by distance from what was
calibrated.

**Distance** (:func:`novelty`): what a point has that no calibration row had, narrow to wide (:data:`TIERS`):

- ``seen configuration``: the same model, GPU, precision and sizes (:func:`~.config.config_key`) was published, at
  another release;
- ``new configuration``: its (model, GPU, precision) group was published, not these sizes (a new parallelism shape);
- ``new precision``: the model was published on this GPU, not at this precision (or the GPU's efficiency at this
  precision class was never fitted);
- ``new GPU``: the model was published, not on this GPU;
- ``uncalibrated model`` / ``uncalibrated GPU``: nothing of this model / on this GPU was measured (the level is the
  family's mean, the efficiency a sibling's or the default): the widest bands. Both together: each adds its measured
  spread to what they share (:meth:`ConformalBands.half_width`).

**Spread of each distance, measured**: every published row is predicted by fits that leave out, in turn, its release
(LORO), its configuration at every release (LOCO), its (model, GPU, precision) group, its (model, GPU), its model
and its GPU (:func:`bridgebench.model.steptime.fit.held_out_experiments`); each held-out prediction's log error is
filed under the distance the row had from its own training rows (a row is filed once per distance, by its narrowest
experiment).

**Conformal calibration** (split-conformal / CV+ with a Mondrian taxonomy, Vovk et al. 2005 "Algorithmic Learning in
a Random World" ch. 4; Barber et al. 2021 "Predictive inference with the jackknife+", Ann. Statist. 49(1); Bostroem &
Johansson 2020 for Mondrian conformal regressors): the half-width of the band at confidence ``c`` for a distance is
the ``ceil((n + 1) c)``-th smallest of its ``n`` absolute held-out log errors, computed by crepes
(``crepes.ConformalRegressor`` with one bin per distance, Bostroem 2022, crepes 0.9.1). A distance with too few
errors for ``c`` takes the next wider one's; widths never shrink as the distance grows. Bands are reported as
``exp(q) - 1`` (a relative +-) at :data:`LEVELS` (50, 68 and 90 %).

**A release beyond the calibrated ones** (:data:`BEYOND`, :func:`beyond_release_spread`): a point whose release lies
before the first or after the last release the calibration holds reads its software level flat from the nearest
one (:mod:`~.release`), an extrapolation no distance above measures. Its band adds, in variance, the extra spread
of extrapolating one release over interpolating: leaving each release out, the rows of the first and last release
are predicted one release beyond their fold's rows and the others between them;
``q_beyond^2 = max(0, q_edge^2 - q_inside^2)`` of their conformal quantiles. It is measured one release step out
(NeMo's two-month cadence); software further away (a 2021 Megatron-LM run) is further than it says.

**Coverage, held out** (:func:`cross_conformal_coverage`): each error is scored against the quantile computed
WITHOUT the errors of its own fold (the configuration, group, ... left out with it), so the coverage printed is
what a new configuration would see.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from bridgebench.model.spec import ModelSpec
from bridgebench.model.steptime.config import PRECISION_CLASS, TimeConfig, TimeModelError, config_key
from bridgebench.model.steptime.release import point_release_index

#: distances from the calibration, narrow to wide (module docstring).
TIERS = (
    "seen configuration",
    "new configuration",
    "new precision",
    "new GPU",
    "uncalibrated model",
    "uncalibrated GPU",
)
#: nominal confidence levels of the bands (percent).
LEVELS = (50, 68, 90)
#: the level ``band_pct`` reports (the ~68 % band: +-1 sigma of a normal error).
DEFAULT_LEVEL = 68
UNCALIBRATED = "uncalibrated: nothing of this {what} was measured"
#: the distance of a point whose release lies outside the calibrated releases (module docstring); it joins the
#: point's tiers in :meth:`ConformalBands.band`, never one of :data:`TIERS`.
BEYOND = "release beyond the calibration"


@dataclass(frozen=True, kw_only=True)
class Seen:
    """What a calibration was fitted on: configuration keys, (model, GPU, peak key) groups, and (GPU, precision
    class) efficiencies."""

    configurations: frozenset[str] = frozenset()
    groups: frozenset[tuple[str, str, str]] = frozenset()
    gpus: frozenset[tuple[str, str]] = frozenset()
    releases: tuple[float, float] | None = None

    @classmethod
    def of(cls, rows: Sequence[Any]) -> Seen:
        """From calibration rows (objects with ``spec`` and ``cfg``); ``releases``: the first and last release
        index among them."""
        xs = [x for x in (point_release_index(r.cfg) for r in rows) if x is not None]
        return cls(
            configurations=frozenset(config_key(r.spec, r.cfg) for r in rows),
            groups=frozenset((r.spec.name, r.cfg.gpu.name, r.cfg.peak_key) for r in rows),
            gpus=frozenset((r.cfg.gpu.name, r.cfg.precision_class) for r in rows),
            releases=(min(xs), max(xs)) if xs else None,
        )

    def beyond(self, cfg: TimeConfig) -> bool:
        """Whether a point's release lies outside the calibrated releases (False without a release or a range)."""
        x = point_release_index(cfg)
        return x is not None and self.releases is not None and not self.releases[0] <= x <= self.releases[1]


def novelty(seen: Seen, spec: ModelSpec, cfg: TimeConfig) -> tuple[str, ...]:
    """The distances of a point from ``seen`` (module docstring): one of the first four tiers, or one or both
    ``uncalibrated`` tiers."""
    model, gpu = spec.name, cfg.gpu.name
    out = []
    if not any(g[0] == model for g in seen.groups):
        out.append("uncalibrated model")
    if not any(g == gpu for g, _ in seen.gpus):
        out.append("uncalibrated GPU")
    if out:
        return tuple(out)
    pclass = cfg.precision_class
    if not any(g[:2] == (model, gpu) for g in seen.groups):
        return ("new GPU",)
    same_class = (
        any(g[:2] == (model, gpu) and PRECISION_CLASS.get(g[2], g[2]) == pclass for g in seen.groups)
        and (gpu, pclass) in seen.gpus
    )
    if (model, gpu, cfg.peak_key) not in seen.groups or not same_class:
        return ("new precision",)
    if config_key(spec, cfg) in seen.configurations:
        return ("seen configuration",)
    return ("new configuration",)


def describe(tiers: Sequence[str]) -> str:
    """A band's source in words: the distance, or ``uncalibrated: nothing of this model/GPU was measured``; ``,
    release beyond the calibration`` after it when :data:`BEYOND` is among ``tiers``."""
    what = [t.split()[-1] for t in tiers if t.startswith("uncalibrated")]
    out = UNCALIBRATED.format(what="/".join(what)) if what else f"conformal, {tiers[0]}"
    return f"{out}, {BEYOND}" if BEYOND in tiers[1:] else out


@dataclass(kw_only=True)
class ConformalBands:
    """Per distance: the half-widths (log) at each level of :data:`LEVELS`, the count of held-out errors behind
    them, their held-out coverage; and what the calibration saw (:class:`Seen`)."""

    quantiles: dict[str, dict[int, float]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    coverage: dict[str, dict[int, float]] = field(default_factory=dict)
    seen: Seen = field(default_factory=Seen)
    beyond: dict[int, float] = field(default_factory=dict)
    beyond_counts: tuple[int, int] = (0, 0)
    method: str = "crepes.ConformalRegressor, Mondrian by distance, CV+ folds"

    def half_width(self, tiers: Sequence[str], level: int = DEFAULT_LEVEL) -> float:
        """Relative +- of a point at these distances (``exp(q) - 1``, ``q`` a half-width in log).

        One distance: its quantile. Several (an unmeasured model on an unmeasured GPU): each adds its measured spread
        to what they share. Every error held out as ``uncalibrated model`` or ``uncalibrated GPU`` was also a
        configuration its fold never saw, so each quantile already holds the ``new configuration`` spread ``q_c``;
        in variance ``q^2 = sum(q_t^2) - (n - 1) q_c^2`` (the issue-22 rule "a new model, GPU ... each adds its
        measured spread"), never below the widest single ``q_t``. Adding the quantiles in quadrature, as before
        stop 31, counted ``q_c`` twice.

        :data:`BEYOND` among ``tiers`` adds its spread (:attr:`beyond`, a variance beyond the rest; 0 where the
        calibration has none).

        Raises:
            TimeModelError: a level without quantiles.
        """
        extra = self.beyond.get(level, 0.0) if BEYOND in tiers else 0.0
        tiers = [t for t in tiers if t != BEYOND]
        try:
            qs = [self.quantiles[t][level] for t in tiers]
            shared = self.quantiles["new configuration"][level] if len(qs) > 1 else 0.0
        except KeyError as err:
            raise TimeModelError(f"no conformal band at {err.args[0]!r} (bands at {LEVELS} %)") from err
        widest = max(qs)
        var = sum(q * q for q in qs) - (len(qs) - 1) * shared * shared
        return math.exp(math.sqrt(max(var, widest * widest) + extra * extra)) - 1.0

    def band(self, spec: ModelSpec, cfg: TimeConfig, level: int = DEFAULT_LEVEL) -> tuple[float, str, tuple[str, ...]]:
        """(relative +-, source in words, distances) of a point; the distances end with :data:`BEYOND` when its
        release lies outside the calibrated releases and the calibration measured that spread."""
        tiers = novelty(self.seen, spec, cfg)
        if self.beyond and self.seen.beyond(cfg):
            tiers = (*tiers, BEYOND)
        return self.half_width(tiers, level), describe(tiers), tiers

    def to_mapping(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "tiers": {
                t: {
                    "n": self.counts.get(t, 0),
                    "half_width": {int(lv): round(q, 6) for lv, q in sorted(self.quantiles[t].items())},
                    "coverage": {int(lv): round(c, 4) for lv, c in sorted(self.coverage.get(t, {}).items())},
                }
                for t in TIERS
                if t in self.quantiles
            },
            "seen_configurations": sorted(self.seen.configurations),
            **(
                {
                    "release_beyond": {
                        "calibrated_releases": list(self.seen.releases or ()),
                        "n_edge": self.beyond_counts[0],
                        "n_inside": self.beyond_counts[1],
                        "half_width": {int(lv): round(q, 6) for lv, q in sorted(self.beyond.items())},
                    }
                }
                if self.beyond
                else {}
            ),
        }

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], groups: Any, gpus: Any) -> ConformalBands:
        """From the ``time.conformal`` node; ``groups`` / ``gpus``: the calibration's group and efficiency keys.

        Raises:
            TimeModelError: a tier not in :data:`TIERS` or a negative half-width.
        """
        q, n, cov = {}, {}, {}
        for t, node in (data.get("tiers") or {}).items():
            if t not in TIERS:
                raise TimeModelError(f"conformal band tier {t!r} is not one of {TIERS}")
            q[t] = {int(lv): float(v) for lv, v in (node.get("half_width") or {}).items()}
            if any(v < 0 for v in q[t].values()):
                raise TimeModelError(f"conformal half-widths must be >= 0, got {q[t]} for {t!r}")
            n[t] = int(node.get("n", 0))
            cov[t] = {int(lv): float(v) for lv, v in (node.get("coverage") or {}).items()}
        node = data.get("release_beyond") or {}
        span = node.get("calibrated_releases") or ()
        beyond = {int(lv): float(v) for lv, v in (node.get("half_width") or {}).items()}
        if any(v < 0 for v in beyond.values()) or (span and len(span) != 2):
            raise TimeModelError(f"release_beyond needs two calibrated releases and half-widths >= 0, got {node}")
        seen = Seen(
            configurations=frozenset(data.get("seen_configurations") or ()),
            groups=frozenset(groups),
            gpus=frozenset(gpus),
            releases=(float(span[0]), float(span[1])) if span else None,
        )
        counts = (int(node.get("n_edge", 0)), int(node.get("n_inside", 0)))
        return cls(quantiles=q, counts=n, coverage=cov, seen=seen, beyond=beyond, beyond_counts=counts,
                   method=str(data.get("method", cls.method)))  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class HeldOut:
    """One held-out prediction: the row's index, its log error ``log(predicted / published)``, its distance from
    the fold's training rows and the fold (experiment and what was left out)."""

    row: int
    log_error: float
    tier: str
    fold: str


def _conformal_q(errors: Sequence[float], level: int) -> float:
    """Split-conformal half-width of absolute errors at ``level`` % (crepes; ``inf`` when too few)."""
    import warnings

    import numpy as np
    from crepes import ConformalRegressor

    if not errors:
        return math.inf
    cr = ConformalRegressor()
    cr.fit(residuals=np.abs(np.asarray(errors, dtype=float)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # crepes warns when n is too small for the level: we fall back (inf)
        lo, hi = cr.predict_int(y_hat=np.zeros(1), confidence=level / 100.0)[0]
    return float(hi)


def conformal_bands(held: Sequence[HeldOut], seen: Seen) -> ConformalBands:
    """Half-widths per distance and level from held-out errors (module docstring), with held-out coverage."""
    by: dict[str, list[HeldOut]] = {}
    for h in held:
        by.setdefault(h.tier, []).append(h)
    q: dict[str, dict[int, float]] = {t: {lv: _conformal_q([h.log_error for h in by.get(t, [])], lv) for lv in LEVELS}
                                      for t in TIERS}  # fmt: skip
    _fill(q, by)
    cov = {t: cross_conformal_coverage(by[t]) for t in by}
    return ConformalBands(quantiles=q, counts={t: len(by.get(t, [])) for t in TIERS}, coverage=cov, seen=seen)


def beyond_release_spread(
    releases: Sequence[float | None], errors: Sequence[float | None]
) -> tuple[dict[int, float], tuple[int, int]]:
    """The spread a release beyond the calibrated ones adds (module docstring), per level of :data:`LEVELS`, and
    the counts behind it (rows of the edge releases, rows inside).

    ``releases``: each row's release index; ``errors``: its log error held out by release (None: not predicted).
    The rows of the first and last release were predicted one release beyond their fold; the others between
    theirs. Half-width (log) ``sqrt(max(0, q_edge^2 - q_inside^2))`` of the two groups' conformal quantiles; empty
    with fewer than three releases (no release is inside) or a level either group is too small for.
    """
    known = [(x, e) for x, e in zip(releases, errors) if x is not None and e is not None]
    xs = sorted({x for x, _ in known})
    if len(xs) < 3:
        return {}, (0, 0)
    edge = [e for x, e in known if x in (xs[0], xs[-1])]
    inside = [e for x, e in known if x not in (xs[0], xs[-1])]
    out = {}
    for lv in LEVELS:
        q_edge, q_inside = _conformal_q(edge, lv), _conformal_q(inside, lv)
        if math.isfinite(q_edge) and math.isfinite(q_inside):
            out[lv] = math.sqrt(max(0.0, q_edge * q_edge - q_inside * q_inside))
    return out, (len(edge), len(inside))


def _fill(q: dict[str, dict[int, float]], by: Mapping[str, Sequence[HeldOut]]) -> None:
    """Infinite half-widths (too few errors) take the next wider finite one (else the largest error seen); widths
    never shrink as the distance grows (the two uncalibrated tiers each at least ``new GPU``'s)."""
    every = [abs(h.log_error) for v in by.values() for h in v]
    top = max(every) if every else math.log(2.0)
    for lv in LEVELS:
        for i, t in enumerate(TIERS):
            if math.isinf(q[t][lv]):
                wider = [q[u][lv] for u in TIERS[i + 1 :] if math.isfinite(q[u][lv])]
                q[t][lv] = wider[0] if wider else top
        for i in range(1, 4):
            q[TIERS[i]][lv] = max(q[TIERS[i]][lv], q[TIERS[i - 1]][lv])
        for t in TIERS[4:]:
            q[t][lv] = max(q[t][lv], q["new GPU"][lv])


def cross_conformal_coverage(held: Sequence[HeldOut], levels: Sequence[int] = LEVELS) -> dict[int, float]:
    """Fraction of errors inside the conformal half-width computed from the OTHER folds' errors (same distance),
    per level; a level whose quantile cannot be formed counts the error as covered only if finite quantiles say
    so (``inf`` covers)."""
    out = {}
    for lv in levels:
        inside = 0
        for h in held:
            rest = [g.log_error for g in held if g.fold != h.fold]
            inside += abs(h.log_error) <= _conformal_q(rest, lv)
        out[lv] = inside / len(held) if held else float("nan")
    return out
