"""The Sweeps page: per sweep folder under ``paths.sweeps`` (``<name>/points.parquet``, written by
``bridgebench sweep``; :mod:`bridgebench.sweep.pipeline`): the funnel enumerated -> valid -> fits -> ranked with the
rule or number that pruned each point, the ranking with each point's band (ties with the best marked, NVIDIA's own
configuration marked), the step-time terms of the top points, and where the expert groups of the top points lie on
the NVLink domains (``ep_span`` GPUs per expert group against the GPU's ``nvlink_domain``, ``configs/gpu``)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from bridgebench.site.layout import Page, esc

TOP = 25
TERMS = (
    "t_compute_s",
    "t_elementwise_s",
    "t_tp_comm_s",
    "t_cp_comm_s",
    "t_ep_a2a_s",
    "t_recompute_s",
    "t_overhead_s",
    "t_bubble_s",
    "t_pp_p2p_s",
    "t_dp_comm_s",
    "t_optimizer_s",
)
SIZES = ("tp", "pp", "vp", "cp", "ep", "etp", "dp", "mbs")


def sweep_files(root: Path) -> list[Path]:
    return sorted(root.glob("*/points.parquet")) if root.is_dir() else []


def _label(r: dict[str, Any]) -> str:
    vp = r.get("vp")
    vp = "-" if vp is None or vp != vp else int(vp)
    rc = r.get("recompute_granularity")
    rc = rc if isinstance(rc, str) and rc else "none"  # None or NaN in the parquet: no recompute
    return f"TP{r['tp']} PP{r['pp']} VP{vp} CP{r['cp']} EP{r['ep']} ETP{r['etp']} MBS{r['mbs']} rc:{rc}"


def funnel(df) -> list[dict[str, Any]]:
    """Stages with counts, and per stage the rules / reasons that pruned points (status per point)."""
    n = len(df)
    invalid = df[df["status"] == "invalid"]
    dup = int((df["status"] == "duplicate").sum())
    over = df[df["status"] == "over_memory"]
    ranked = int((df["status"] == "ranked").sum())
    valid = n - len(invalid) - dup
    rows = [{"stage": "enumerated", "points": n, "pruned here": 0, "by": ""}]
    by_rule = invalid["rule"].fillna("?").value_counts()
    rows.append(
        {
            "stage": "valid (rules, duplicates removed)",
            "points": valid,
            "pruned here": len(invalid) + dup,
            "by": "; ".join(f"{k} {v}" for k, v in by_rule.items()) + (f"; duplicate {dup}" if dup else ""),
        }
    )
    by_mem = over["rule"].fillna("memory").value_counts()
    rows.append(
        {
            "stage": "fits (memory per GPU)",
            "points": valid - len(over),
            "pruned here": len(over),
            "by": "; ".join(f"{k} {v}" for k, v in by_mem.items()),
        }
    )
    rows.append(
        {
            "stage": "ranked (predicted TFLOP/s/GPU)",
            "points": ranked,
            "pruned here": valid - len(over) - ranked,
            "by": "other statuses" if valid - len(over) - ranked else "",
        }
    )
    return rows


def build(page: Page, root: Path, shown_root: str) -> list[tuple[str, str]]:
    """Fill ``page`` from every sweep under ``root``; returns (label, sha256) of the files read."""
    import pandas as pd

    files = sweep_files(root)
    used: list[tuple[str, str]] = []
    if not files:
        page.note(
            f"No sweep under {shown_root}: run e.g. `bridgebench sweep --space kimi_k2_256` (30,720 points, "
            "about 20 s CPU) and build the site again."
        )
        return used
    page.raw("<p>" + " · ".join(f'<a href="#s-{i}">{esc(f.parent.name)}</a>' for i, f in enumerate(files)) + "</p>")
    for i, path in enumerate(files):
        data = path.read_bytes()
        used.append((f"{shown_root}/{path.parent.name}/points.parquet", hashlib.sha256(data).hexdigest()))
        _one(page, i, path, pd.read_parquet(path))
    return used


def _one(page: Page, i: int, path: Path, df: Any) -> None:
    """One sweep: funnel, ranking, terms, placement, the ranked points."""
    import plotly.graph_objects as go

    name = path.parent.name
    page.h(2, name, f"s-{i}")
    first = df.iloc[0]
    page.note(
        f"{first['model']} on {first['num_gpus']} {first['gpu']}, {first['precision']}, {first['optimizer']}, "
        f"release {first['release']}; {len(df):,} points."
    )
    page.h(3, "Funnel")
    fun = funnel(df)
    fig = go.Figure(
        go.Funnel(y=[f["stage"] for f in fun], x=[f["points"] for f in fun], textinfo="value+percent initial")
    )
    fig.update_layout(title="enumerated -> valid -> fits -> ranked")
    page.figure(fig, height=300)
    page.table(fun, ident=f"funnel-{i}", filterable=False)
    ranked = df[df["status"] == "ranked"].sort_values("rank")
    if ranked.empty:
        page.note("No point was ranked.")
        return
    top = ranked.head(TOP).to_dict("records")
    pub = ranked[ranked["published"].fillna(False).astype(bool)].to_dict("records")
    _ranking(page, top, pub, len(ranked))
    _terms(page, top)
    _placement(page, top, str(first["gpu"]), "ep_span" in df.columns)
    _ranked_table(page, i, ranked, path)


def _ranking(page: Page, top: list[dict], pub: list[dict], n_ranked: int) -> None:
    import plotly.graph_objects as go

    page.h(3, f"Ranking: top {len(top)} of {n_ranked:,} ranked")
    best = top[0]["tflops_per_gpu"]
    page.note(
        f"Bars: predicted TFLOP/s/GPU with the band (68 %: band_pct; 90 % in the hover). Orange: a tie with "
        f"the best (inside its band, {best:.0f}); green: NVIDIA's published configuration"
        + (f" (rank {int(pub[0]['rank'])})" if pub else " (not in this space)")
        + "."
    )
    show = top + [p for p in pub if p["point_id"] not in {t["point_id"] for t in top}]
    colors = ["#2e8b57" if r["published"] else "#e08a1e" if r["tie"] else "#3b6ea8" for r in show]
    fig = go.Figure(
        go.Bar(
            x=[f"#{int(r['rank'])} {_label(r)}" for r in show],
            y=[r["tflops_per_gpu"] for r in show],
            marker_color=colors,
            error_y=dict(type="data", array=[r["tflops_per_gpu"] * (r["band_pct"] or 0) / 100 for r in show]),
            hovertext=[
                f"{_label(r)}<br>{r['tflops_per_gpu']:.0f} TFLOP/s/GPU ±{r['band_pct']:.1f} % (90 %: "
                f"±{r['band_90_pct']:.1f} %)<br>step {r['step_time_s']:.3f} s; memory {r['mem_total_gb']:.1f} GB"
                f"<br>twins collapsed: {r['twins']}; tie: {r['tie']}; published: {r['published']}"
                for r in show
            ],
            hoverinfo="text",
        )
    )
    fig.update_layout(yaxis_title="predicted TFLOP/s/GPU", xaxis_tickangle=-40, title="ranking with bands")
    page.figure(fig, height=460)


def _terms(page: Page, top: list[dict]) -> None:
    import plotly.graph_objects as go

    page.h(3, "Step-time terms of the top points")
    tf = go.Figure()
    labels = [f"#{int(r['rank'])} {_label(r)}" for r in top[:12]]
    for t in TERMS:
        tf.add_bar(name=t[2:-2], x=labels, y=[r.get(t) or 0.0 for r in top[:12]])
    tf.update_layout(
        barmode="stack", yaxis_title="s per step", xaxis_tickangle=-40, title="predicted step time by term"
    )
    page.figure(tf, height=460)


def _placement(page: Page, top: list[dict], gpu: str, has_span: bool) -> None:
    """Where one expert group of each top point lies: its members per NVLink domain (``ep_split``, e.g. ``48/16``,
    from :func:`bridgebench.sweep.scoring.placement_columns`) stacked, one colour per domain; sweeps written before
    those columns show the group's span (``ep_span``) against the domain size instead."""
    import plotly.graph_objects as go

    from bridgebench.config.catalog import load_gpu

    page.h(3, "Expert groups on NVLink domains")
    domain = int(load_gpu(gpu).get("nvlink_domain") or 0)
    pts = top[:12]
    labels = [f"#{int(r['rank'])} EP{r['ep']} {_label(r)}" for r in pts]
    if pts and pts[0].get("ep_split"):
        splits = [[int(m) for m in str(r["ep_split"]).split("/") if m] for r in pts]
        fig = go.Figure()
        for k in range(max(len(sp) for sp in splits)):
            fig.add_bar(
                name=f"domain {k + 1}",
                x=labels,
                y=[sp[k] if k < len(sp) else 0 for sp in splits],
                hovertext=[
                    f"EP group split {r['ep_split']} over {r.get('ep_domains')} domain(s) of "
                    f"{r.get('domain_gpus')} GPUs; cross-domain copies per token {r.get('ep_cross_copies')}; "
                    f"groups crossing domains: {r.get('groups_crossing') or 'none'}"
                    for r in pts
                ],
                hoverinfo="text",
            )
        fig.update_layout(
            barmode="stack",
            yaxis_title="EP group members per NVLink domain",
            xaxis_tickangle=-40,
            title="one expert group of each top point: its members per domain (more than one colour: it crosses)",
        )
        page.figure(fig, height=440)
    elif has_span:
        fig = go.Figure(
            go.Bar(
                x=labels,
                y=[r["ep_span"] for r in pts],
                marker_color=["#c0392b" if r["ep_leaves_nvlink"] else "#3b6ea8" for r in pts],
                hovertext=[f"an expert group spans {r['ep_span']} GPUs; NVLink domain {domain}" for r in pts],
                hoverinfo="text",
            )
        )
        if domain:
            fig.add_hline(y=domain, line_dash="dash", annotation_text=f"NVLink domain ({domain} GPUs)")
        fig.update_layout(
            yaxis_title="GPUs spanned by one expert group",
            xaxis_tickangle=-40,
            title="red: the expert all-to-all leaves the NVLink domain",
        )
        page.figure(fig, height=420)
    else:
        page.note("This sweep's points.parquet has no placement columns.")
        return
    page.note(f"NVLink domain of {gpu}: {domain} GPUs (configs/gpu/{gpu}.yaml).")


def _ranked_table(page: Page, i: int, ranked: Any, path: Path) -> None:
    cols = [
        "rank",
        "point_id",
        *SIZES,
        "recompute_granularity",
        "tflops_per_gpu",
        "band_pct",
        "band_90_pct",
        "step_time_s",
        "mem_total_gb",
        "hbm_usable_gb",
        "tight",
        "tie",
        "twins",
        "published",
        "ep_span",
        "ep_leaves_nvlink",
        "ep_domains",
        "ep_split",
        "ep_cross_copies",
        "groups_crossing",
    ]
    cols = [c for c in cols if c in ranked.columns]
    page.table(
        ranked.head(300)[cols].to_dict("records"),
        cols,
        ident=f"ranked-{i}",
        formats={
            "tflops_per_gpu": ".1f",
            "band_pct": ".1f",
            "band_90_pct": ".1f",
            "step_time_s": ".3f",
            "mem_total_gb": ".1f",
            "hbm_usable_gb": ".1f",
            "rank": ".0f",
            "vp": ".0f",
        },
    )
    if len(ranked) > 300:
        page.note(f"First 300 of {len(ranked):,} ranked points; all of them: {path.parent.name}/points.parquet.")
