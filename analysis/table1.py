# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Table 1: Muon vs AdamW on GB300 (MXFP8), TFLOP/s/GPU and MFU with Newton-Schulz FLOPs
#
# NVIDIA's blog "Advancing Emerging Optimizers for Accelerated LLM Training with NVIDIA Megatron" (2026-04-22) reports
# Kimi K2 on 256 GB300 and Qwen3 30B-A3B on 8 GB300, AdamW and Muon, Muon split into model + Newton-Schulz (NS)
# TFLOP/s/GPU. This notebook reproduces it with `bridgebench.results.table1`:
#
# * **step time** of each run: your own completed pretrain runs from the results store when it has them, else the
#   published perf-table row of the same configuration, else the blog's own model TFLOP/s;
# * **model FLOPs** per step: Megatron-Bridge's formula restated in `bridgebench.model.flops` (tested equal to the
#   real calculator);
# * **NS FLOPs** per step and GPU: `bridgebench.model.newton_schulz.ns_load` under the policy of the run's optimizer
#   config (kernel, TP mode, layer-wise distributed optimizer, QKV split);
# * **MFU** against the BF16 and the MXFP8 dense peaks of `configs/gpu/gb300.yaml`, *including* NS FLOPs.
#
# Reads only shipped data (`results/reference/`) and the results store (`configs/paths`: `results`).

# %%
# %matplotlib inline
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import Image, display

from bridgebench.config.run_flops import ns_policy, parallelism
from bridgebench.model.newton_schulz import ns_load
from bridgebench.paths import load_paths
from bridgebench.results.plots import table1_bars
from bridgebench.results.store import ResultStore
from bridgebench.results.table1 import measured_step_times, ns_policy_grid, reproduce, table1_runs

pd.set_option("display.width", 200)
pd.set_option("display.max_columns", 30)
store = ResultStore(load_paths().results)
measured = measured_step_times(store.records(kind="pretrain"))
print(f"results store {store.root}: {len(measured)} measured (model, optimizer) step time(s) used")

# %% [markdown]
# ## The table

# %%
table = reproduce((), measured or None)
cols = [
    "model",
    "optimizer",
    "step_time_s",
    "tokens_per_sec_per_gpu",
    "model_tflops_per_gpu",
    "newton_schulz_tflops_per_gpu",
    "total_tflops_per_gpu",
    "published_total_tflops_per_gpu",
    "delta_total_pct",
    "mfu_bf16",
    "mfu_precision",
]
display(table[cols].round(3))
for r in table.itertuples():
    print(f"{r.model:>14s} {r.optimizer:5s}: step time from {r.step_time_source}")

# %%
with tempfile.TemporaryDirectory() as tmp:
    display(Image(filename=str(table1_bars(table, Path(tmp) / "table1.png"))))

# %% [markdown]
# ## Newton-Schulz accounting
#
# Which matrices Muon orthogonalizes and what each family costs per optimizer step (FLOPs, GEMM kernel
# `steps x (4 m^2 n + 2 m^3)`), the mean and busiest GPU under the layer-wise distributed optimizer, and the
# policy-free floor (every matrix once at full size).

# %%
rows = []
for run in table1_runs():
    f = run.facts
    if not f.is_muon:
        continue
    load = ns_load(f.model, parallelism(f), ns_policy(f))
    for fam, flops in sorted(load.by_family.items(), key=lambda kv: -kv[1]):
        rows.append({"model": f.model.name, "family": fam, "ns_flops_per_step": flops, "share": flops / load.total})
    print(
        f"{f.model.name}: {load.num_matrices} matrices, total {load.total:.3e} FLOPs/step over {f.num_gpus} GPUs, "
        f"mean/GPU {load.per_gpu_mean:.3e}, busiest {load.per_gpu_max:.3e}, one replica {load.per_replica:.3e}; "
        f"policy {ns_policy(f)}"
    )
families = pd.DataFrame(rows)
display(families.round(4))

fig, ax = plt.subplots(figsize=(7, 3.2))
pivot = families.pivot(index="model", columns="family", values="share").fillna(0)
pivot.plot.barh(stacked=True, ax=ax)
ax.set_xlabel("share of NS FLOPs per step")
ax.set_title("Newton-Schulz FLOPs by matrix family")
ax.legend(fontsize=8, loc="lower right")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## The policy search: can any counting policy reproduce the blog's 51 and 35 NS TFLOP/s/GPU?
#
# Every combination of kernel (GEMM / SYRK), layer-wise or replicated optimizer, QKV split or fused, and mean or
# busiest GPU, with the blog's own step time (its model TFLOP/s), against the blog's NS figures.

# %%
grid = ns_policy_grid()
display(grid.round(2))
print(f"policies reproducing both blog NS figures within 5 %: {int(grid.reproduces_both.sum())} of {len(grid)}")

# %%
models = [c.removesuffix("_ns_tflops") for c in grid.columns if c.endswith("_ns_tflops")]
labels = [
    f"{r.kernel}, {'layer-wise' if r.layer_wise else 'replicated'}, {'split' if r.split_qkv else 'fused'}, "
    f"{r.statistic}"
    for r in grid.itertuples()
]
fig, axes = plt.subplots(1, len(models), figsize=(6 * len(models), 6), sharey=True)
for ax, m in zip(axes, models):
    ax.barh(range(len(grid)), grid[f"{m}_ns_tflops"], color="tab:orange")
    ax.axvline(grid[f"{m}_blog"].iloc[0], color="k", ls="--", label=f"blog {grid[f'{m}_blog'].iloc[0]:.0f}")
    ax.set_title(f"{m}: NS TFLOP/s/GPU by counting policy", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="x", alpha=0.3)
axes[0].set_yticks(range(len(grid)), labels, fontsize=7)
fig.tight_layout()
plt.show()
