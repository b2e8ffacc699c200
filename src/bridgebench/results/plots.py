"""Plots people would rather see than read (matplotlib, headless Agg backend)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd


def table1_bars(table: pd.DataFrame, path: Path) -> Path:
    """Stacked bars of model + Newton-Schulz TFLOP/s/GPU, AdamW beside Muon for each model, with the blog's totals
    as black markers. ``table`` is :func:`bridgebench.results.table1.reproduce`'s output; writes a PNG to ``path``."""
    import matplotlib

    if "inline" not in matplotlib.get_backend():  # headless, but keep a notebook's inline backend
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(table["model"]))
    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=120)
    width = 0.38
    for i, model in enumerate(models):
        for j, opt in enumerate(("adamw", "muon")):
            row = table[(table.model == model) & (table.optimizer == opt)]
            if row.empty:
                continue
            r = row.iloc[0]
            x = i + (j - 0.5) * width
            ax.bar(x, r.model_tflops_per_gpu, width * 0.95, color="#4C72B0" if opt == "adamw" else "#55A868",
                   label=f"{opt} model" if i == 0 else None)
            if r.newton_schulz_tflops_per_gpu:
                ax.bar(x, r.newton_schulz_tflops_per_gpu, width * 0.95, bottom=r.model_tflops_per_gpu,
                       color="#DD8452", label="Newton-Schulz" if i == 0 else None)
            ax.plot([x - width * 0.45, x + width * 0.45], [r.published_total_tflops_per_gpu] * 2, color="black",
                    lw=2, label="blog total" if (i == 0 and j == 0) else None)
            ax.text(x, r.model_tflops_per_gpu * 0.5, f"{r.total_tflops_per_gpu:.0f}\n(blog {r.published_total_tflops_per_gpu:.0f})",
                    ha="center", va="center", fontsize=8, color="white")
    ax.set_xticks(range(len(models)), models)
    ax.set_ylabel("TFLOP/s per GPU")
    ax.set_title("Muon vs AdamW, GB300 MXFP8 (model + Newton-Schulz FLOPs)")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
    return path
