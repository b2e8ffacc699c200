"""Plots of ``bridgebench compare`` (matplotlib, headless Agg backend): release histories with interval bars and
change points, the release x config heatmap of speedups, and own-run comparisons with their confidence intervals."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from bridgebench.results.compare.histories import History
    from bridgebench.results.compare.result import CompareResult

UP, DOWN = "tab:green", "tab:red"


def draw_history(ax, bx, h: History, legend: bool = True) -> None:
    """One key on two axes: ``ax`` model TFLOP/s/GPU (interval bars, chained index, marks, change points shaded,
    FLOPs-formula changes dotted, your runs with CI bars); ``bx`` tokens/s/GPU with its rounding interval.
    ``legend``: a legend on each axes (False when the figure carries one for all: :func:`history_figure`)."""
    x = np.arange(len(h.points))
    rel = [p.release for p in h.points]
    has_tf = [p.tflops is not None for p in h.points]
    tf = np.array([p.tflops.value if p.tflops else np.nan for p in h.points])
    tf_err = np.array(
        [
            [p.tflops.value - p.tflops.lo if p.tflops else 0 for p in h.points],
            [p.tflops.hi - p.tflops.value if p.tflops else 0 for p in h.points],
        ]
    )
    tok = np.array([p.tokens.value for p in h.points])
    tok_err = np.array(
        [[p.tokens.value - p.tokens.lo for p in h.points], [p.tokens.hi - p.tokens.value for p in h.points]]
    )
    if any(has_tf):
        ax.errorbar(x, tf, yerr=tf_err, fmt="o-", capsize=4, label="published model TFLOP/s/GPU (±rounding)")
    if any(s.metric == "tokens" for s in h.steps):
        ax.plot(
            x, h.index, "s--", mfc="none", color="gray", label="chain-linked index (tokens/s across a formula change)"
        )
    bx.errorbar(
        x, tok, yerr=tok_err, fmt="o-", capsize=4, color="tab:purple", label="published tokens/s/GPU (±rounding)"
    )
    for i, s in enumerate(h.steps, start=1):
        y = tf[i] if has_tf[i] else h.index[i]
        ax.annotate(
            s.mark,
            (x[i], y),
            textcoords="offset points",
            xytext=(0, 7),
            ha="center",
            va="bottom",
            fontsize=10,
            color={"up": UP, "down": DOWN}.get(s.direction, "black"),
        )
    _draw_formula_changes(ax, bx, h)
    for i in h.change_points.indices:
        for a in (ax, bx):
            a.axvspan(i - 0.5, i + 0.5, color="orange", alpha=0.18, lw=0)
    _draw_own_runs(ax, bx, h, rel)
    cps = ", ".join(h.change_points.releases) or "none"
    ax.set_title(f"{h.key.label()}\nchange points: {cps}", fontsize=9)
    ax.set_ylabel("model TFLOP/s/GPU")
    bx.set_ylabel("tokens/s/GPU")
    shown = [r + ("*" if p.precision_inferred else "") for r, p in zip(rel, h.points)]
    ax.set_xticks(x, shown, fontsize=7, rotation=45 if len(x) > 6 else 0)
    bx.set_xticks(x, shown, rotation=45, fontsize=7)
    for a in (ax, bx):
        a.grid(alpha=0.3)
        a.set_xlim(-0.6, len(x) - 0.4)  # room for the first and last marks
        a.ticklabel_format(axis="y", useOffset=False, style="plain")  # values as published, no "+2.277e4" offset
    if len(x) == 1:  # one release: +-5 % around it, not a zoom into its rounding interval
        for a, v in ((ax, tf[0]), (bx, tok[0])):
            if np.isfinite(v):
                a.set_ylim(v * 0.95, v * 1.05)
        if legend:
            a.legend(fontsize=7, loc="best")
    ax.margins(y=0.2)


def _draw_formula_changes(ax: Any, bx: Any, h: History) -> None:
    """A dotted line (labelled) where the release's FLOPs formula changes between two points."""
    for i in range(1, len(h.points)):
        if h.points[i].formula != h.points[i - 1].formula:
            for a in (ax, bx):
                a.axvline(i - 0.5, ls=":", color="k", lw=1)
            same = " (same count)" if h.steps[i - 1].metric == "tflops" else ""
            ax.text(  # along the dotted line, inside the axes
                i - 0.5,
                0.04,
                f" FLOPs {h.points[i - 1].formula}→{h.points[i].formula}{same}",
                fontsize=6.5,
                rotation=90,
                ha="right",
                va="bottom",
                transform=ax.get_xaxis_transform(),
            )


def _draw_own_runs(ax: Any, bx: Any, h: History, rel: list[str]) -> None:
    """Your runs of each release beside the published value: mean with its CI (TFLOP/s or tokens/s axes)."""
    for o in h.own:
        if o.release not in rel:
            continue
        i = rel.index(o.release)
        target = ax if o.metric == "tflops" else bx
        lo = o.value - (o.ci_low if o.ci_low is not None else o.value)
        hi = (o.ci_high if o.ci_high is not None else o.value) - o.value
        target.errorbar(
            [i + 0.12],
            [o.value],
            yerr=[[lo], [hi]],
            fmt="D",
            color="tab:orange",
            capsize=3,
            label=f"your runs (mean, CI), n={o.n_runs}" if o is h.own[0] else None,
        )


def history_figure(histories: list[History], max_keys: int = 12) -> Any:
    """Per config key, TFLOP/s/GPU (top) and tokens/s/GPU (bottom) across releases; ``max_keys`` keys at most (the
    longest histories first); one legend for the figure below the title."""
    from bridgebench.results.plot_canvas import new_figure

    hs = sorted(histories, key=lambda h: -len(h.points))[:max_keys]
    n = len(hs)
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig = new_figure((5.8 * cols, 6.4 * rows + 0.8))
    axes = fig.subplots(2 * rows, cols, squeeze=False)
    for k, h in enumerate(hs):
        r, c = divmod(k, cols)
        draw_history(axes[2 * r, c], axes[2 * r + 1, c], h, legend=False)
    for k in range(n, rows * cols):
        r, c = divmod(k, cols)
        axes[2 * r, c].axis("off")
        axes[2 * r + 1, c].axis("off")
    handles: dict[str, Any] = {}
    for ax in fig.get_axes():
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    legend = (
        "▲▼ real change, = within rounding, ~ below threshold, † config changed; shaded: change point; "
        "dotted: FLOPs-formula change"
        + (
            "; * precision inferred (a table without that column)"
            if any(p.precision_inferred for h in hs for p in h.points)
            else ""
        )
    )
    fig.suptitle(
        "Published throughput across releases\n" + textwrap.fill(legend, width=int(14 * 5.8 * cols)), fontsize=9
    )
    fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncols=min(4, len(handles) or 1),
               fontsize=7, frameon=False)  # fmt: skip
    return fig


def history_plot(histories: list[History], path: Path, max_keys: int = 12) -> Path:
    """:func:`history_figure` written as a PNG to ``path``."""
    from bridgebench.results.plot_canvas import save_png

    return save_png(history_figure(histories, max_keys), path)


#: Speedups shown on the heatmap's colour bar (as ratios; the colour is their log2).
RATIO_TICKS = (0.5, 0.67, 0.8, 0.9, 0.95, 1.0, 1.05, 1.1, 1.25, 1.5, 2.0)


def heatmap_limit(ratio: pd.DataFrame) -> float:
    """The colour scale's half-range in log2 units: the largest |log2 speedup| of the data, at least log2(1.05) and at
    most 1 (2x); larger speedups are clipped (the colour bar's arrows)."""
    values = np.log2(ratio.to_numpy(dtype=float))
    values = np.abs(values[np.isfinite(values)])
    top = float(values.max()) if values.size else 0.0
    return float(min(max(top, math.log2(1.05)), 1.0))


def draw_heatmap(ax, ratio: pd.DataFrame, real: pd.DataFrame, like: pd.DataFrame, vmax: float | None = None):
    """Heatmap of log2(speedup) (config x release), annotated with the ratio, ▲/▼ and †; returns the image (its norm
    spans ``±vmax`` log2 units, :func:`heatmap_limit` by default; :func:`heatmap_colorbar` labels it in ratios)."""
    ratio = ratio.dropna(axis=1, how="all").dropna(axis=0, how="all")  # configs published in one release: no step
    real, like = real.loc[ratio.index, ratio.columns], like.loc[ratio.index, ratio.columns]
    vmax = heatmap_limit(ratio) if vmax is None else vmax
    values = ratio.to_numpy(dtype=float)
    im = ax.imshow(np.log2(values), cmap="RdBu", vmin=-vmax, vmax=vmax, aspect="auto")
    for i in range(values.shape[0]):
        for j in range(values.shape[1]):
            v = values[i, j]
            if np.isfinite(v):
                m = ("▲" if v > 1 else "▼") if real.iat[i, j] else ""
                ax.text(
                    j,
                    i,
                    f"{v:.3f}{m}{'' if like.iat[i, j] else '†'}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white" if abs(np.log2(v)) > 0.6 * vmax else "black",
                )
    ax.set_xticks(range(values.shape[1]), ratio.columns, fontsize=8)
    ax.set_yticks(range(values.shape[0]), ratio.index, fontsize=7)
    ax.set_xlabel("release (speedup vs the previous release publishing that config)")
    return im


def heatmap_colorbar(fig, im, ax):
    """A colour bar for :func:`draw_heatmap`'s image with its ticks in speedup ratios (the values printed in the
    cells), arrows when the data go beyond the scale; returns it."""
    vmax = float(im.norm.vmax)
    data = np.asarray(im.get_array(), dtype=float)
    data = data[np.isfinite(data)]
    beyond = bool(data.size) and float(np.abs(data).max()) > vmax + 1e-12
    cb = fig.colorbar(im, ax=ax, fraction=0.04, extend="both" if beyond else "neither")
    ticks = [1.0]  # 1 always; then outwards, each at least a sixth of the scale from its neighbour
    for side in (sorted(r for r in RATIO_TICKS if r > 1), sorted((r for r in RATIO_TICKS if r < 1), reverse=True)):
        last = 0.0
        for r in side:
            pos = abs(math.log2(r))
            if pos <= vmax + 1e-9 and pos - last >= vmax / 3 - 1e-9:
                ticks.append(r)
                last = pos
    ticks.sort()
    cb.set_ticks([math.log2(r) for r in ticks], labels=[f"{r:g}" for r in ticks])
    clip = f"; beyond {2**vmax:.3g}x or below {2**-vmax:.3g}x clipped" if beyond else ""
    cb.set_label(f"speedup vs previous release (colour: log scale{clip})", fontsize=8)
    return cb


def speedup_figure(ratio: pd.DataFrame, real: pd.DataFrame, like: pd.DataFrame) -> Any:
    """Release x config heatmap of speedups (:func:`bridgebench.results.compare.speedup_matrix`)."""
    from bridgebench.results.plot_canvas import new_figure

    cols = max(1, int(ratio.notna().any().sum()))
    rows = max(1, int(ratio.notna().any(axis=1).sum()))
    fig = new_figure((1.3 * cols + 5.5, max(3.2, 0.34 * rows + 2.0)))
    ax = fig.add_subplot()
    im = draw_heatmap(ax, ratio, real, like)
    heatmap_colorbar(fig, im, ax)
    ax.set_title("Release-to-release speedup per config (▲▼ real change, † config changed)", fontsize=9)
    return fig


def speedup_heatmap(ratio: pd.DataFrame, real: pd.DataFrame, like: pd.DataFrame, path: Path) -> Path:
    """:func:`speedup_figure` written as a PNG to ``path``."""
    from bridgebench.results.plot_canvas import save_png

    return save_png(speedup_figure(ratio, real, like), path)


def runs_plot(result: CompareResult, path: Path) -> Path:
    """:func:`runs_figure` written as a PNG to ``path``."""
    from bridgebench.results.plot_canvas import save_png

    return save_png(runs_figure(result), path)


def runs_figure(result: CompareResult) -> Any:
    """Own runs: left, each run's median per side (dots) with the side's mean; right, each comparison's ratio with
    its confidence interval against 1 ± threshold."""
    from bridgebench.results.plot_canvas import new_figure

    groups: list[tuple[str, list[float]]] = []
    comps = []
    if result.sides is not None:
        groups = [
            (f"A: {s.selection.text()}", [float(np.median(v)) for v in s.values])
            for s in (result.sides.a, result.sides.b)
        ]
        comps = [(label, c) for label, c in result.sides.comparisons]
        unit = result.sides.metric
    else:
        for h in result.own:
            for rel, side in h.groups.items():
                groups.append((f"{'/'.join(h.key[:2])} {rel}", [float(np.median(v)) for v in side.values]))
            comps += [(f"{'/'.join(h.key[:2])} {y} vs {x}", c) for x, y, c in h.steps]
        unit = result.own[0].metric if result.own else ""
    if result.sides is not None:
        groups[1] = (f"B: {result.sides.b.selection.text()}", groups[1][1])
    fig = new_figure((12, 0.5 * max(len(groups), len(comps)) + 3))
    ax, bx = fig.subplots(1, 2)
    for i, (_label, vals) in enumerate(groups):
        ax.scatter(vals, [i] * len(vals), color="tab:blue", alpha=0.7)
        ax.plot([np.mean(vals)] * 2, [i - 0.3, i + 0.3], color="black", lw=2)
    values = [v for _, vals in groups for v in vals]
    if values and min(values) > 0 and max(values) / min(values) > 10:
        ax.set_xscale("log")
    ax.set_yticks(range(len(groups)), [g[0][:60] for g in groups], fontsize=7)
    ax.set_ylim(-0.6, max(len(groups), 1) - 0.4)
    ax.set_xlabel(f"run median ({unit})")
    ax.set_title("runs (dots) and side mean (bar)", fontsize=9)
    ax.grid(alpha=0.3)
    for i, (_label, c) in enumerate(comps):
        color = {"faster": UP, "slower": DOWN}.get(c.verdict, "gray")
        if c.ci_low is not None:
            bx.errorbar(
                [c.ratio], [i], xerr=[[c.ratio - c.ci_low], [c.ci_high - c.ratio]], fmt="o", color=color, capsize=4
            )
        else:
            bx.plot([c.ratio], [i], "x", color=color)
        bx.text(c.ratio, i + 0.25, c.verdict, fontsize=7, ha="center", color=color)
    ends = [x for _, c in comps for x in (c.ci_low, c.ci_high, c.ratio) if x is not None]
    if ends and max(ends) / min(ends) > 3:
        bx.set_xscale("log")
    if comps:
        t = comps[0][1].params["threshold"]
        bx.axvspan(1 - t, 1 + t, color="gray", alpha=0.15, lw=0, label=f"±{t:.1%} threshold")
        bx.axvline(1, color="k", lw=1)
        bx.legend(fontsize=7)
    bx.set_yticks(range(len(comps)), [c[0][:50] for c in comps], fontsize=7)
    bx.set_ylim(-0.6, max(len(comps), 1) - 0.4)  # the verdict text above each point stays inside
    bx.set_xlabel("ratio B / A with confidence interval")
    bx.set_title("comparisons", fontsize=9)
    bx.grid(alpha=0.3)
    return fig
