"""Plots people would rather see than read (matplotlib figures on an Agg canvas: :mod:`~.results.plot_canvas`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

#: Short form of Table 1's ``check`` column under each bar.
CHECK_SHORT = {
    "independent check": "independent check",
    "derived from the blog": "derived from blog",
    "your run": "your run",
}


def table1_figure(table: pd.DataFrame) -> Any:
    """Stacked bars of model + Newton-Schulz TFLOP/s/GPU, AdamW beside Muon for each model, the blog's totals as black
    lines, each bar's total and the blog's inside it, and under it what the row proves (``check``: an independent
    check, or derived from the blog). ``table`` is :func:`bridgebench.results.table1.reproduce`'s output."""
    from bridgebench.results.plot_canvas import new_figure

    models = list(dict.fromkeys(table["model"]))
    fig = new_figure((8.0, 5.0), dpi=120)
    ax = fig.add_subplot()
    width = 0.38
    ticks, labels = [], []
    top = 0.0
    for i, model in enumerate(models):
        for j, opt in enumerate(("adamw", "muon")):
            row = table[(table.model == model) & (table.optimizer == opt)]
            if row.empty:
                continue
            r = row.iloc[0]
            x = i + (j - 0.5) * width
            ax.bar(x, r.model_tflops_per_gpu, width * 0.95, color="#4C72B0" if opt == "adamw" else "#55A868",
                   label=f"{'AdamW' if opt == 'adamw' else 'Muon'} model FLOPs" if i == 0 else None)  # fmt: skip
            if r.newton_schulz_tflops_per_gpu:
                ax.bar(x, r.newton_schulz_tflops_per_gpu, width * 0.95, bottom=r.model_tflops_per_gpu,
                       color="#DD8452", label="Newton-Schulz FLOPs" if i == 0 else None)  # fmt: skip
            ax.plot([x - width * 0.45, x + width * 0.45], [r.published_total_tflops_per_gpu] * 2, color="black",
                    lw=2, label="blog total" if (i == 0 and j == 0) else None)  # fmt: skip
            ax.text(x, r.model_tflops_per_gpu * 0.5,
                    f"{r.total_tflops_per_gpu:.0f}\n(blog {r.published_total_tflops_per_gpu:.0f})",
                    ha="center", va="center", fontsize=8, color="white")  # fmt: skip
            check = CHECK_SHORT.get(str(r.get("check", "")), str(r.get("check", "")))
            ticks.append(x)
            labels.append(f"{'AdamW' if opt == 'adamw' else 'Muon'}\n{check}")
            top = max(top, r.total_tflops_per_gpu, r.published_total_tflops_per_gpu)
    ax.set_xticks(ticks, labels, fontsize=7)
    for i, model in enumerate(models):  # the model under its two bars
        ax.annotate(model, (i, 0), xycoords=("data", "axes fraction"), xytext=(0, -30), textcoords="offset points",
                    ha="center", va="top", fontsize=9, fontweight="bold")  # fmt: skip
    ax.set_xlim(-0.6, len(models) - 0.4)
    ax.set_ylim(0, top * 1.08)
    ax.set_ylabel("TFLOP/s per GPU")
    ax.set_title("Table 1: Muon vs AdamW, GB300 MXFP8 (model + Newton-Schulz FLOPs)", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    fig.legend(loc="outside upper center", ncols=4, fontsize=8, frameon=False)
    return fig


def table1_bars(table: pd.DataFrame, path: Path) -> Path:
    """:func:`table1_figure` written as a PNG to ``path``."""
    from bridgebench.results.plot_canvas import save_png

    return save_png(table1_figure(table), path)
