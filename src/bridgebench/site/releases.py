"""The Releases page: per (model, GPU, precision) NVIDIA's published history 25.09 ... 26.08
(:func:`bridgebench.results.compare.published_history`): every value with its rounding interval, real changes,
changes that are not like-for-like (the config diff to the previous release) and change points marked; hover shows
the row, its source tag (``<file>#<data row>``) and the diff. Below, every published row in one filterable table."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from bridgebench.site.layout import Page, esc

SYMBOLS = {"real": "circle", "config": "x", "change_point": "star"}


def _hover(row: dict[str, Any], value_name: str) -> str:
    parts = [
        f"<b>{esc(row['model'])} {esc(row['gpu'])} {esc(row['precision'])} {row['num_gpus']} GPUs "
        f"{esc(row['optimizer'])}</b>",
        f"release {esc(row['release'])} ({esc(row['flops_formula'])})",
        f"{value_name}: {row['value']:.6g} [{row['lo']:.6g}, {row['hi']:.6g}] ({esc(row['tokens_rounding'])})",
        f"TP {row['tp']} PP {row['pp']} VP {row['vp']} CP {row['cp']} EP {row['ep']} ETP {row['etp']} "
        f"MBS {row['mbs']} GBS {row['gbs']} seq {row['seq_length']}",
        f"source: {esc(row['reference'])}",
    ]
    if row.get("ratio") is not None and row["ratio"] == row["ratio"]:
        parts.append(
            f"vs previous: x{row['ratio']:.4f} [{row['ratio_lo']:.4f}, {row['ratio_hi']:.4f}] {esc(row['mark'])}"
        )
    if row.get("config_changes"):
        parts.append(f"config diff: {esc(row['config_changes'])}")
    if row.get("change_point"):
        parts.append("change point")
    return "<br>".join(parts)


def _group_figure(title: str, frames: list) -> Any:
    import plotly.graph_objects as go

    fig = go.Figure()
    for df in frames:
        use_tflops = df["tflops"].notna().all()
        metric = "model TFLOP/s/GPU" if use_tflops else "tokens/s/GPU"
        col = "tflops" if use_tflops else "tokens"
        rows = []
        for r in df.to_dict("records"):
            r = dict(r, value=r[col], lo=r[f"{col}_lo"], hi=r[f"{col}_hi"])
            rows.append(r)
        name = f"{rows[0]['num_gpus']} GPUs {rows[0]['optimizer']}" + ("" if use_tflops else " (tokens/s)")
        x = [r["release"] for r in rows]
        y = [r["value"] for r in rows]
        symbols = [
            SYMBOLS["change_point"] if r["change_point"] else SYMBOLS["config"] if r["config_changes"] else "circle"
            for r in rows
        ]
        fig.add_scatter(
            x=x,
            y=y,
            name=name,
            mode="lines+markers",
            error_y=dict(
                type="data",
                symmetric=False,
                array=[r["hi"] - r["value"] for r in rows],
                arrayminus=[r["value"] - r["lo"] for r in rows],
                thickness=1,
            ),
            marker=dict(symbol=symbols, size=[13 if s != "circle" else 7 for s in symbols]),
            hovertext=[_hover(r, metric) for r in rows],
            hoverinfo="text",
        )
    from bridgebench.config.catalog import release_sort_key

    order = sorted({r for df in frames for r in df["release"]}, key=release_sort_key)
    fig.update_layout(
        title=title,
        yaxis_title="model TFLOP/s/GPU",
        xaxis=dict(type="category", title="release", categoryorder="array", categoryarray=order),
        legend=dict(font=dict(size=10)),
    )
    return fig


def build(page: Page, sel) -> None:
    from bridgebench.config.catalog import release_sort_key
    from bridgebench.results.compare import published_history, published_keys
    from bridgebench.results.records import load_published

    records = load_published(infer_precision=True)
    page.sources.append("results/reference/published_pretrain_throughput.csv")
    page.note(
        "NVIDIA's published perf tables per (model, GPU, precision): one line per GPU count and optimizer, each value "
        "with the interval its printed rounding allows (error bars). Marks: star = change point of the history, "
        "x = the configuration changed from the previous release (not like-for-like; the diff is in the hover). "
        "Hover any point for the row, its source tag and the change from the previous release."
    )
    keys = published_keys(records, sel)
    groups: dict[tuple, list] = defaultdict(list)
    changes = cps = 0
    for k in keys:
        h = published_history(records, k, sel=sel)
        df = h.frame()
        if df.empty:
            continue
        df = df.iloc[sorted(range(len(df)), key=lambda i: release_sort_key(df["release"].iloc[i]))]
        changes += int((df["config_changes"] != "").sum())
        cps += int(df["change_point"].sum())
        groups[(k.model, k.gpu, k.precision)].append(df)
    page.note(
        f"{len(keys)} histories in {len(groups)} (model, GPU, precision) groups; {changes} config changes, "
        f"{cps} change points."
    )
    page.raw("<p>" + " · ".join(f'<a href="#g-{i}">{esc(" ".join(g))}</a>' for i, g in enumerate(groups)) + "</p>")
    for i, (g, frames) in enumerate(groups.items()):
        page.h(2, " ".join(g), f"g-{i}")
        page.figure(_group_figure(" / ".join(g), frames), height=330)
    page.h(2, "All published rows", "rows")
    cols = [
        "release",
        "model_label",
        "model",
        "system",
        "precision",
        "num_gpus",
        "optimizer",
        "tp",
        "pp",
        "vp",
        "cp",
        "ep",
        "etp",
        "mbs",
        "gbs",
        "seq_length",
        "tokens_per_sec_per_gpu",
        "model_tflops_per_gpu",
        "source",
        "note",
    ]
    rows = [
        {**{c: getattr(r, c, None) for c in cols}, "reference": (r.provenance or {}).get("reference")}
        for r in records
        if _matches(r, sel)
    ]
    page.table(rows, [*cols, "reference"], ident="published")


def _matches(r, sel) -> bool:
    from bridgebench.results.compare.selection import published_matches

    return published_matches(r, sel)
