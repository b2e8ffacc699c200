"""Plots of ``bridgebench compare`` (matplotlib, headless Agg backend): release histories with interval bars and
change points, the release x config heatmap of speedups, and own-run comparisons with their confidence intervals."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from bridgebench.results.compare import CompareResult, History

UP, DOWN = "tab:green", "tab:red"


def _plt():
    import matplotlib

    if "inline" not in matplotlib.get_backend():  # headless, but keep a notebook's inline backend
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def draw_history(ax, bx, h: History) -> None:
    """One key on two axes: ``ax`` model TFLOP/s/GPU (interval bars, chained index, marks, change points shaded,
    FLOPs-formula changes dotted, your runs with CI bars); ``bx`` tokens/s/GPU with its rounding interval."""
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
            xytext=(5, 6),
            fontsize=11,
            color={"up": UP, "down": DOWN}.get(s.direction, "black"),
        )
    for i in range(1, len(h.points)):
        if h.points[i].formula != h.points[i - 1].formula:
            for a in (ax, bx):
                a.axvline(i - 0.5, ls=":", color="k", lw=1)
            same = " (same count here)" if h.steps[i - 1].metric == "tflops" else ""
            ax.text(
                i - 0.45,
                0.02,
                f"FLOPs {h.points[i - 1].formula}→{h.points[i].formula}{same}",
                fontsize=7,
                transform=ax.get_xaxis_transform(),
            )
    for i in h.change_points.indices:
        for a in (ax, bx):
            a.axvspan(i - 0.5, i + 0.5, color="orange", alpha=0.18, lw=0)
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
    cps = ", ".join(h.change_points.releases) or "none"
    ax.set_title(f"{h.key.label()}\nchange points: {cps}", fontsize=9)
    ax.set_ylabel("model TFLOP/s/GPU")
    bx.set_ylabel("tokens/s/GPU")
    ax.set_xticks(x, rel, fontsize=7)
    bx.set_xticks(x, rel, rotation=45, fontsize=8)
    for a in (ax, bx):
        a.grid(alpha=0.3)
        a.legend(fontsize=7, loc="upper left")
    ax.margins(y=0.15)


def history_plot(histories: list[History], path: Path, max_keys: int = 12) -> Path:
    """Per config key, TFLOP/s/GPU (top) and tokens/s/GPU (bottom) across releases; ``max_keys`` keys at most (the
    longest histories first). Writes a PNG to ``path``."""
    plt = _plt()
    hs = sorted(histories, key=lambda h: -len(h.points))[:max_keys]
    n = len(hs)
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(2 * rows, cols, figsize=(5.8 * cols, 6.2 * rows), squeeze=False)
    for k, h in enumerate(hs):
        r, c = divmod(k, cols)
        draw_history(axes[2 * r, c], axes[2 * r + 1, c], h)
    for k in range(n, rows * cols):
        r, c = divmod(k, cols)
        axes[2 * r, c].axis("off")
        axes[2 * r + 1, c].axis("off")
    legend = (
        "▲▼ real change, = within rounding, ~ below threshold, † config changed; shaded: change point; "
        "dotted: FLOPs-formula change"
    )
    fig.suptitle(
        "Published throughput across releases\n" + textwrap.fill(legend, width=int(11 * 5.8 * cols)), fontsize=9
    )
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)
    return path


def draw_heatmap(ax, ratio: pd.DataFrame, real: pd.DataFrame, like: pd.DataFrame, vmax: float = 0.25):
    """Heatmap of log2(speedup) (config x release), annotated with the ratio, ▲/▼ and †; returns the image."""
    ratio = ratio.dropna(axis=1, how="all").dropna(axis=0, how="all")  # configs published in one release: no step
    real, like = real.loc[ratio.index, ratio.columns], like.loc[ratio.index, ratio.columns]
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


def speedup_heatmap(ratio: pd.DataFrame, real: pd.DataFrame, like: pd.DataFrame, path: Path) -> Path:
    """Release x config heatmap of speedups (:func:`bridgebench.results.compare.speedup_matrix`); PNG to ``path``."""
    plt = _plt()
    cols = max(1, int(ratio.notna().any().sum()))
    rows = max(1, int(ratio.notna().any(axis=1).sum()))
    fig, ax = plt.subplots(figsize=(1.3 * cols + 5, 0.34 * rows + 1.8))
    im = draw_heatmap(ax, ratio, real, like)
    cb = fig.colorbar(im, ax=ax, fraction=0.03)
    cb.set_label("log2 speedup (clipped at ±0.25 ≈ ±19 %)")
    ax.set_title("Release-to-release speedup per config (▲▼ real change, † config changed)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)
    return path


def runs_plot(result: CompareResult, path: Path) -> Path:
    """Own runs: left, each run's median per side (dots) with the side's mean; right, each comparison's ratio with
    its confidence interval against 1 ± threshold. PNG to ``path``."""
    plt = _plt()
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
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 0.5 * max(len(groups), len(comps)) + 3))
    for i, (label, vals) in enumerate(groups):
        ax.scatter(vals, [i] * len(vals), color="tab:blue", alpha=0.7)
        ax.plot([np.mean(vals)] * 2, [i - 0.3, i + 0.3], color="black", lw=2)
    values = [v for _, vals in groups for v in vals]
    if values and min(values) > 0 and max(values) / min(values) > 10:
        ax.set_xscale("log")
    ax.set_yticks(range(len(groups)), [g[0][:60] for g in groups], fontsize=7)
    ax.set_xlabel(f"run median ({unit})")
    ax.set_title("runs (dots) and side mean (bar)", fontsize=9)
    ax.grid(alpha=0.3)
    for i, (label, c) in enumerate(comps):
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
    bx.set_xlabel("ratio B / A with confidence interval")
    bx.set_title("comparisons", fontsize=9)
    bx.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)
    return path
