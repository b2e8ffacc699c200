"""The software level of a release: how much faster (or slower) the same configuration runs at release X than the
configuration physics says, read off NVIDIA's published per-release tables.

A published row of group ``g`` = (model, GPU, peak key) at release index ``x`` has a log level ``y``: the log of the
software level ``L`` (GEMM rate ``e L``, element-wise rate ``L``, ``e`` its GPU and precision class's efficiency) at
which its prediction equals its published TFLOP/s (:func:`bridgebench.model.steptime.fit.implied_level`). The level
of a point of group ``g`` at release index ``x`` (:meth:`LevelTable.log_level`):

- at a release the group was published at: the mean of its rows' log levels there (the table's own number);
- between two of its published releases: linear interpolation in release index;
- before the first / after the last: the nearest one (flat: nothing says which way the next release goes -- 26.08 is
  below 26.06 in all six groups published at both; docs/sweeps.md), unless the same model was published on the same
  GPU at ``x`` in another precision (:data:`AT_RELEASE`): then the mean of those groups' levels at ``x``, each shifted
  by the mean difference between the two precisions on this GPU over the models published with both, this model
  among them (its own difference read at its group's nearest release, so the group's own level still counts). The
  model's rows at ``x`` say more of that release's software than the group's rows at another release: a
  configuration published at releases its group has no other row at (Llama 3.1 405B FP8 on GB200, whose group keeps
  only a 25.09 row when it is held out) read the 25.09 level before. Chosen by leaving each configuration out on
  the published rows (stop 31; ``benchmarks/validate_time.py``), leaving each release out in brackets: MAPE 11.50 %
  (6.04 %) flat -> 10.80 % (6.07 %). Tried, not kept: the shift over the other models only 11.19 % (6.29 %); the
  mean of the group's own flat level and the relatives so shifted 10.93 % (6.10 %); relatives without the shift
  11.48 % (6.42 %); of the same precision class only 11.11 % (6.05 %); the relative nearest in release even where
  none covers ``x`` 10.69 % (6.26 %); the group carried by its GPU's release effect instead of flat 11.88 % (6.51
  %), by its family's effect on that GPU 12.39 % (6.27 %);
- a group never published: the mean, at ``x``, of its closest published relatives -- the same model on the same GPU in
  the same precision class (FP8-CS / MXFP8 both FP8), else on the same GPU (each shifted by the mean difference
  between the two precisions on this GPU over the other models published with both: a difference in differences),
  else on any GPU -- else the mean log level of its model family (dense / MoE) over all published rows. The shift
  lowers the leave-one-configuration-out level error of the 17 rows it reads from 0.228 to 0.176 (mean |log|; all
  rows 0.198 -> 0.193); applied to a new GPU as well it was worse (0.206), so it is not. A relative read at a
  release outside its own published range is carried there by the point's GPU's release effect
  (:attr:`LevelTable.gpu_effects`: what the other models measured on that GPU moved between the relative's nearest
  release and ``x``) instead of flat: the relative's configuration says nothing of the software after its last row,
  the other models on the GPU do.

Validated by leaving each release out in turn (``bridgebench check-published --models``, benchmarks/validate_time.py):
this piecewise-linear reading beat a Gaussian-process smoother with a per-family release trend (held-out mean
|log error| 0.100 vs 0.115 on the same physics, both fitted without the scored release); no parameter is fitted.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from bridgebench.model.steptime.config import PRECISION_CLASS, TimeConfig


def release_index(release: str) -> float:
    """Position of a NeMo release in steps of two months (NeMo's release cadence): ``(12 YY + MM) / 2`` for
    ``YY.MM``, a ``.01`` patch release half a step later. Only differences matter.

    Raises:
        ValueError: a release name that is not ``YY.MM`` or ``YY.MM.PP``.
    """
    parts = str(release).split(".")
    if len(parts) not in (2, 3) or not all(p.isdigit() for p in parts):
        raise ValueError(f"release {release!r} is not YY.MM or YY.MM.PP")
    base = (int(parts[0]) * 12 + int(parts[1])) / 2.0
    return base + (0.5 if len(parts) > 2 else 0.0)


def point_release_index(cfg: TimeConfig) -> float | None:
    """The release index of a point: ``release_index`` if set, else that of ``release``, else None."""
    if cfg.release_index is not None:
        return cfg.release_index
    return release_index(cfg.release) if cfg.release else None


#: level source of a group read at a release outside its own published range from the same model on the same GPU
#: in another precision published at that release (:meth:`LevelTable.log_level`).
AT_RELEASE = "same model and GPU at this release"

#: alternating-means rounds of the two-way release-effect fit (:attr:`LevelTable.gpu_effects`; converged to 1e-4
#: on the published groups).
EFFECT_ITERATIONS = 15


@dataclass(frozen=True, kw_only=True)
class GroupLevel:
    """One (model, GPU, peak key) group's published levels: its ``family``, release indices ``x`` (ascending,
    distinct), the mean log level ``y`` of its rows at each, and ``rows`` behind them."""

    family: str
    x: tuple[float, ...]
    y: tuple[float, ...]
    rows: int

    @property
    def origin(self) -> float:
        """Mean release index of the group's published releases (where a point without a release sits)."""
        return sum(self.x) / len(self.x) if self.x else 0.0

    def log_level(self, x: float | None) -> float:
        """The group's log level at release index ``x`` (see the module docstring); ``None``: at its origin."""
        x = self.origin if x is None else x
        xs, ys = self.x, self.y
        if x <= xs[0]:
            return ys[0]
        if x >= xs[-1]:
            return ys[-1]
        for i in range(1, len(xs)):
            if x <= xs[i]:
                w = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
                return ys[i - 1] * (1 - w) + ys[i] * w
        return ys[-1]

    def to_mapping(self) -> dict[str, Any]:
        return {"family": self.family, "x": list(self.x), "y": [round(v, 6) for v in self.y], "rows": self.rows}

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> GroupLevel:
        x = tuple(float(v) for v in data["x"])
        y = tuple(float(v) for v in data["y"])
        if not x or len(x) != len(y) or list(x) != sorted(set(x)):
            raise ValueError(f"group level needs ascending distinct releases with one level each, got {data!r}")
        return cls(family=str(data["family"]), x=x, y=y, rows=int(data.get("rows", len(x))))


@dataclass(frozen=True, kw_only=True)
class ShareLevel:
    """The log software level of a model with no published group, as a line in its non-GEMM share ``s``
    (:func:`bridgebench.model.steptime.predict.non_gemm_share`): ``log L = intercept + slope x s``, fitted by least
    squares (``scipy.stats.linregress``) on the log levels of every published row, dense and MoE together, at the
    calibration's efficiencies (``slope_stderr`` its standard error, ``rows`` behind it).

    It replaces the family mean (dense / MoE) for such a model. The family mean says a new MoE model runs like the
    published fine-grained ones: 128-384 experts, each GPU holding 4-32 of them, their dispatch, permutations and
    host waits a large share of the step. A MoE model whose experts are few and wide (Grok-1: 8 experts of 32,768,
    one per GPU at EP 8) spends most of its step in large GEMMs, and runs at the level of a dense model of that
    share. Chosen on the published rows alone, by leaving each model out (its rows' log levels predicted from the
    other models' rows; ``benchmarks/level_share_selection.py`` prints the table). At the stop-29 calibration, where
    it was chosen: mean |log error| 0.193 with the family mean, 0.172 with this line (0.1716 with the share of the
    layers' work, 0.1724 of the whole step: the layers' is kept, so that the bubble or a data-parallel framework
    does not move the level of the same layers); a line in the share of all non-GEMM terms 0.180, in the share of
    ``ep_a2a`` and ``overhead`` alone 0.203; family intercepts with a common slope 0.178. At the stop-30
    calibration (one efficiency per chip): family mean 0.181, this line 0.174, family intercepts with a common slope
    0.169; at the shipped stop-31 refit 0.167, 0.164 and 0.161 (slope -0.95). Family intercepts stay a candidate
    not adopted after the fact: 0.003 of mean |log error| over six held-out models is not a difference the table
    can tell (docs/sweeps.md, stops 30 and 31). The slope is negative in every fold."""

    intercept: float
    slope: float
    slope_stderr: float = 0.0
    rows: int = 0

    def log_level(self, share: float) -> float:
        """The log level at non-GEMM share ``share`` (clipped to [0, 1])."""
        return self.intercept + self.slope * min(1.0, max(0.0, share))

    def to_mapping(self) -> dict[str, Any]:
        return {
            "intercept": round(self.intercept, 6),
            "slope": round(self.slope, 6),
            "slope_stderr": round(self.slope_stderr, 6),
            "rows": self.rows,
        }

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> ShareLevel:
        return cls(
            intercept=float(data["intercept"]),
            slope=float(data["slope"]),
            slope_stderr=float(data.get("slope_stderr", 0.0)),
            rows=int(data.get("rows", 0)),
        )


@dataclass(frozen=True, kw_only=True)
class LevelTable:
    """Every published group's levels and each family's mean log level (the fallback of an unpublished model)."""

    groups: dict[tuple[str, str, str], GroupLevel] = field(default_factory=dict)
    family_mean: dict[str, float] = field(default_factory=dict)

    def log_level(self, group: tuple[str, str, str], family: str, x: float | None) -> tuple[float, str]:
        """(log level, source: ``group``, :data:`AT_RELEASE`, ``same model, GPU and precision class``, ``same model
        and GPU``, ``same model``, ``family mean`` or ``none``) of a point (module docstring)."""
        g = self.groups.get(group)
        model, gpu, key = group
        if g is not None:
            if x is not None and not g.x[0] <= x <= g.x[-1]:
                at_x = [
                    (k, v)
                    for k, v in self.groups.items()
                    if k[:2] == (model, gpu) and k != group and v.x[0] <= x <= v.x[-1]
                ]
                if at_x:
                    reads = [v.log_level(x) + self._precision_shift(gpu, k[2], key, x) for k, v in at_x]
                    return sum(reads) / len(reads), AT_RELEASE
            return g.log_level(x), "group"
        cls = PRECISION_CLASS.get(key, key)
        tiers = (
            (
                "same model, GPU and precision class",
                lambda k: k[:2] == (model, gpu) and PRECISION_CLASS.get(k[2]) == cls,
            ),
            ("same model and GPU", lambda k: k[:2] == (model, gpu)),
            ("same model", lambda k: k[0] == model),
        )
        for name, match in tiers:
            same = [(k, v) for k, v in self.groups.items() if match(k)]
            if not same:
                continue
            if name == "same model and GPU":
                return sum(self._carried(v, gpu, x) + self._precision_shift(gpu, k[2], key, x) for k, v in same) / len(
                    same
                ), name
            return sum(self._carried(v, gpu, x) for _, v in same) / len(same), name
        if family in self.family_mean:
            return self.family_mean[family], "family mean"
        return 0.0, "none"

    @cached_property
    def gpu_effects(self) -> dict[str, tuple[tuple[float, ...], tuple[float, ...]]]:
        """Per GPU, the release effect ``b(x)`` at each release published on it (release indices, log levels): the
        two-way fit ``y(g, x) = a(g) + b(gpu, x)`` over the GPU's groups (alternating means,
        :data:`EFFECT_ITERATIONS` rounds; Searle, Casella & McCulloch 1992 "Variance Components" ch. 4 for the
        unbalanced two-way layout), so a difference ``b(x1) - b(x0)`` is what the same software change did to
        the models measured at both, each against its own mean."""
        a = {k: statistics.mean(g.y) for k, g in self.groups.items()}
        b: dict[tuple[str, float], float] = {}
        for _ in range(EFFECT_ITERATIONS):
            cells: dict[tuple[str, float], list[float]] = {}
            for k, g in self.groups.items():
                for x, y in zip(g.x, g.y):
                    cells.setdefault((k[1], x), []).append(y - a[k])
            b = {c: statistics.mean(v) for c, v in cells.items()}
            a = {k: statistics.mean(y - b[(k[1], x)] for x, y in zip(g.x, g.y)) for k, g in self.groups.items()}
        out: dict[str, dict[float, float]] = {}
        for (gpu, x), v in b.items():
            out.setdefault(gpu, {})[x] = v
        return {gpu: (tuple(sorted(d)), tuple(d[x] for x in sorted(d))) for gpu, d in out.items()}

    def _carried(self, g: GroupLevel, gpu: str, x: float | None) -> float:
        """A relative group's log level read for a point on ``gpu`` at release index ``x``: its own (interpolated)
        level, plus ``b(x) - b(x_edge)`` of ``gpu``'s release effect (:attr:`gpu_effects`) where ``x`` lies outside
        the relative's published releases (``x_edge`` its nearest one)."""
        own = g.log_level(x)
        effects = self.gpu_effects.get(gpu)
        if x is None or effects is None:
            return own
        edge = min(max(x, g.x[0]), g.x[-1])
        if edge == x:
            return own
        at = GroupLevel(family=g.family, x=effects[0], y=effects[1], rows=0)
        return own + at.log_level(x) - at.log_level(edge)

    def _precision_shift(self, gpu: str, have: str, want: str, x: float | None) -> float:
        """Mean log level of peak key ``want`` minus that of ``have`` on ``gpu`` at ``x``, over the models published
        with both on this GPU (0 when none is): what moving a model to another precision on the same GPU
        does beyond the precision class's efficiency (e.g. NVFP4 Llama runs below their FP8 level on GB200 / GB300).
        Where the point's own group exists (:data:`AT_RELEASE`), its model is one of them: its own difference, its
        group read at its nearest release."""
        diffs = [
            g.log_level(x) - self.groups[(m, gpu, have)].log_level(x)
            for (m, gg, k), g in self.groups.items()
            if gg == gpu and k == want and (m, gpu, have) in self.groups
        ]
        return sum(diffs) / len(diffs) if diffs else 0.0
