"""The Table 1 page: the blog's Muon vs AdamW table reproduced (:func:`bridgebench.results.table1.reproduce`), each
row's provenance ("independent check" / "derived from the blog"), MFU with and without the Newton-Schulz FLOPs, and
your runs beside NVIDIA's where the results store has completed steady pretrain runs of the same (model, optimizer)
(:func:`bridgebench.results.table1.measured_step_times`)."""

from __future__ import annotations

from typing import Any

from bridgebench.site.layout import Page, tag

NAMES = {"kimi_k2": "Kimi K2", "qwen3_30b_a3b": "Qwen3 30B-A3B"}


def _rows(df) -> list[dict[str, Any]]:
    out = []
    for r in df.to_dict("records"):
        kind = {"independent check": "indep", "derived from the blog": "derived"}.get(r["check"], "")
        out.append(
            {
                "model": NAMES.get(r["model"], r["model"]),
                "optimizer": r["optimizer"],
                "provenance": tag(r["check"], kind),
                "step source": r["step_time_source"],
                "release": r["release"],
                "GPUs": r["num_gpus"],
                "TP/PP/EP": f"{r['tp']}/{r['pp']}/{r['ep']}",
                "step s": r["step_time_s"],
                "tokens/s/GPU": r["tokens_per_sec_per_gpu"],
                "model TFLOP/s/GPU": r["model_tflops_per_gpu"],
                "blog model": r["published_model_tflops_per_gpu"],
                "NS TFLOP/s/GPU": r["newton_schulz_tflops_per_gpu"],
                "blog NS": r["published_newton_schulz_tflops_per_gpu"],
                "total TFLOP/s/GPU": r["total_tflops_per_gpu"],
                "blog total": r["published_total_tflops_per_gpu"],
                "MFU BF16 (with NS)": 100 * r["mfu_bf16"],
                "MFU BF16 (model only)": 100 * r["mfu_bf16_model_only"],
                "MFU MXFP8 (with NS)": 100 * r["mfu_precision"],
                "MFU MXFP8 (model only)": 100 * r["mfu_precision_model_only"],
                "NS policy": r["ns_policy"],
                "formula": r["flops_formula"],
            }
        )
    return out


def _figure(df, mine=None):
    import plotly.graph_objects as go

    labels = [f"{NAMES.get(m, m)} {o}" for m, o in zip(df["model"], df["optimizer"])]
    checks = list(df["check"])
    hover = [f"{lb}<br>{c}<br>release {rel}" for lb, c, rel in zip(labels, checks, df["release"])]
    fig = go.Figure()
    # (group, column prefix, hover text, model colour, Newton-Schulz colour): NS stacked on the model bar
    for group, prefix, hovertext, model_color, ns_color in (
        ("bridgebench", "", hover, "#3b6ea8", "#9cc0e8"),
        ("blog", "published_", None, "#b0641f", "#f0bf8a"),
    ):
        model = df[f"{prefix}model_tflops_per_gpu"]
        fig.add_bar(
            name=f"{group}: model", x=labels, y=model, offsetgroup=group, hovertext=hovertext, marker_color=model_color
        )
        fig.add_bar(
            name=f"{group}: Newton-Schulz",
            x=labels,
            y=df[f"{prefix}newton_schulz_tflops_per_gpu"],
            offsetgroup=group,
            base=model,
            hovertext=hovertext,
            marker_color=ns_color,
        )
    if mine is not None and len(mine):
        ml = [f"{NAMES.get(m, m)} {o}" for m, o in zip(mine["model"], mine["optimizer"])]
        fig.add_bar(
            name="your runs: model + NS",
            x=ml,
            y=mine["total_tflops_per_gpu"],
            offsetgroup="mine",
            marker_color="#2e8b57",
        )
    fig.update_layout(
        barmode="group", yaxis_title="TFLOP/s/GPU", title="Muon vs AdamW, GB300 MXFP8 (stacked: model + NS)"
    )
    return fig


def build(page: Page, store_records: list[dict], *, overrides: tuple[str, ...] = ()) -> None:
    """Fill ``page``. ``store_records``: the results store's records (may be empty)."""
    from bridgebench.results.table1 import measured_step_times, reproduce

    df = reproduce(overrides)
    page.sources += [
        "results/reference/blog_table1.csv",
        "results/reference/published_pretrain_throughput.csv",
        "configs/experiment/table1.yaml",
    ]
    page.note(
        "NVIDIA's blog (2026-04-22, Megatron-Bridge 26.02, GB300 NVL72, MXFP8) against bridgebench's FLOPs and "
        "Newton-Schulz accounting. An 'independent check' row's step time comes from a published perf-table row the "
        "blog did not use; a 'derived from the blog' row's step time is computed from the blog's own model "
        "TFLOP/s/GPU, so its model figure matches by construction. MFU in % of the dense peak (BF16, MXFP8)."
    )
    page.figure(_figure(df))
    page.h(2, "Rows", "rows")
    fmts = {
        c: ".1f"
        for c in (
            "model TFLOP/s/GPU",
            "blog model",
            "NS TFLOP/s/GPU",
            "blog NS",
            "total TFLOP/s/GPU",
            "blog total",
            "MFU BF16 (with NS)",
            "MFU BF16 (model only)",
            "MFU MXFP8 (with NS)",
            "MFU MXFP8 (model only)",
        )
    }
    fmts |= {"step s": ".3f", "tokens/s/GPU": ",.0f"}
    page.table(_rows(df), ident="table1", filterable=False, formats=fmts, html_columns=["provenance"])
    page.h(2, "Your runs", "yours")
    measured = measured_step_times(store_records)
    if not measured:
        page.note(
            "No completed pretrain run with a steady window of these models in the results store: your runs "
            "appear here beside NVIDIA's after `bridgebench submit experiment=table1` and `bridgebench collect`."
        )
        return
    mine = reproduce(overrides, measured=measured)
    mine = mine[mine["check"] == "your run"]
    if not len(mine):
        page.note(f"{len(measured)} matching run(s) in the store, none used by the table.")
        return
    page.figure(_figure(df, mine))
    page.table(_rows(mine), ident="table1-mine", filterable=False, formats=fmts, html_columns=["provenance"])
