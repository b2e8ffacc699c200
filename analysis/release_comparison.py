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
# # Release comparison: NVIDIA's published Megatron-Bridge throughput 25.09 → 26.08, and your own runs
#
# The statistics are `bridgebench.results.compare_stats`, the same code as `bridgebench compare`:
#
# * every published value is an **interval**: its rounding is declared per release in `configs/release/*.yaml`
#   (`published_rounding`): TFLOP/s/GPU whole numbers (±0.5); tokens/s/GPU whole numbers, except 26.04.01, 26.06.01
#   and 26.08 where it comes from a whole number of sequences/s for the job (±0.5 × seq_length / GPUs);
# * adjacent releases are compared on TFLOP/s where both count FLOPs the same (same formula, or a formula change that
#   leaves the model's count unchanged), else on tokens/s;
# * marks: ▲/▼ real change (the ratio's rounding interval lies beyond 1 ± threshold), = within rounding,
#   ~ beyond rounding but below the threshold, † not like-for-like (the changed fields are listed);
# * change points: `ruptures` PELT with a penalty from an assumed 1 % run-to-run noise of a published figure.
#
# Your own runs come from the results store (`configs/paths`: `results`) when it has any.

# %%
# %matplotlib inline
import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import display

from bridgebench.paths import load_paths
from bridgebench.results import compare as cmp
from bridgebench.results import compare_stats as cs
from bridgebench.results.compare import plots as cp
from bridgebench.results.records import load_published
from bridgebench.results.store import ResultStore

THRESHOLD = 0.01  # a real change must exceed 1 % (NVIDIA publishes no repeats or spread)
NOISE_CV = 0.01  # assumed run-to-run CV of a published figure, for the change-point penalty
pd.set_option("display.width", 250)
pd.set_option("display.max_columns", 30)
pd.set_option("display.max_colwidth", 50)
published = load_published()
store = ResultStore(load_paths().results)
own_records = store.records()
print(f"{len(published)} published rows; results store {store.root}: {len(own_records)} record(s)")
print(cs.library_versions())

# %% [markdown]
# ## Why those rounding rules: tokens/s/GPU consistent with each hypothesis, per release

# %%
display(pd.DataFrame(cs.token_rounding_consistency(published)))

# %% [markdown]
# ## Kimi K2 on 256 GB300 and Qwen3 30B-A3B on 8 GB300 (MXFP8)

# %%
COLS = [
    "release",
    "flops_formula",
    "tflops",
    "tflops_lo",
    "tflops_hi",
    "tokens",
    "tokens_lo",
    "tokens_hi",
    "step_metric",
    "ratio",
    "ratio_lo",
    "ratio_hi",
    "mark",
    "config_changes",
    "change_point",
]
selections = {"Kimi K2": "model=kimi_k2 gpu=gb300", "Qwen3 30B-A3B": "model=qwen3_30b_a3b gpu=gb300"}
results = {}
for title, text in selections.items():
    res = cmp.run_compare(
        "auto", cmp.parse_selection(text), store_records=own_records, threshold=THRESHOLD, noise_cv=NOISE_CV
    )
    results[title] = res
    for h in res.histories:
        print(f"=== {h.key.label()}: {len(h.points)} releases; change points: {list(h.change_points.releases)}")
        display(h.frame()[COLS + (["own_runs", "own_value", "own_vs_published"] if h.own else [])])
        for s in h.steps:
            print(
                f"  {s.release_a} -> {s.release_b}: {s.mark or ' '} {s.metric} x{s.ratio:.4f} "
                f"[{s.ratio_lo:.4f}, {s.ratio_hi:.4f}] ({s.metric_reason})"
            )

# %%
histories = [h for res in results.values() for h in res.histories]
fig, axes = plt.subplots(2, len(histories), figsize=(6.5 * len(histories), 7.5), squeeze=False)
for col, h in enumerate(histories):
    cp.draw_history(axes[0, col], axes[1, col], h)
fig.suptitle(
    "Published throughput across releases (bars: rounding interval; shaded: change point; dotted: FLOPs "
    "formula change)",
    fontsize=10,
)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Every published configuration: release × config speedups
# Colour: the speedup over the previous release that published the config, on a log scale (the colour bar is labelled
# in ratios); text: ratio, ▲/▼ real change, † config changed.

# %%
every = cmp.run_compare("published", cmp.Selection(), threshold=THRESHOLD, noise_cv=NOISE_CV)
ratio, real, like = cmp.speedup_matrix(every.histories)
steps = [s for h in every.histories for s in h.steps]
print(
    f"{len(every.histories)} configs, {len(steps)} release steps: {sum(s.real_change for s in steps)} real changes "
    f"(beyond rounding and {THRESHOLD:.0%}), {sum(not s.like_for_like for s in steps)} not like-for-like, "
    f"{sum(s.metric == 'tokens' for s in steps)} compared on tokens/s"
)
shown = ratio.dropna(how="all")
fig, ax = plt.subplots(figsize=(14, 0.3 * len(shown) + 2))
im = cp.draw_heatmap(ax, ratio, real, like)
cp.heatmap_colorbar(fig, im, ax)  # ticks in speedup ratios, as the cells print them
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Your runs
# With records in the store: each config key's own release history (adjacent releases compared with a two-level
# bootstrap CI on the ratio, Mann-Whitney on run medians, Benjamini-Hochberg across all steps), and your runs beside
# the published values above. Without records this section says so.

# %%
if not own_records:
    print(f"the results store {store.root} has no records: submit runs (bridgebench submit ...) and collect them")
else:
    for metric in ("step_time",):
        try:
            own = cmp.run_compare(
                "runs", cmp.Selection(), store_records=own_records, metric=metric, threshold=THRESHOLD
            )
        except cs.CompareError as err:
            print(f"own release history: {err}")
            continue
        display(
            own.tables()["runs"][
                ["key", "comparison", "verdict", "ratio", "ci_low", "ci_high", "q_value", "runs_a", "runs_b", "reason"]
            ]
        )
        fig, axes = plt.subplots(1, 1, figsize=(8, 3))
        rows = own.tables()["runs"]
        axes.errorbar(
            rows["ratio"],
            range(len(rows)),
            xerr=[
                rows["ratio"] - rows["ci_low"].fillna(rows["ratio"]),
                rows["ci_high"].fillna(rows["ratio"]) - rows["ratio"],
            ],
            fmt="o",
            capsize=4,
        )
        axes.axvline(1, color="k", lw=1)
        axes.axvspan(1 - THRESHOLD, 1 + THRESHOLD, color="gray", alpha=0.2)
        axes.set_yticks(range(len(rows)), rows["key"] + " " + rows["comparison"], fontsize=7)
        axes.set_xlabel(f"{metric} ratio (newer / older release) with CI")
        fig.tight_layout()
        plt.show()
