"""The Model validation page: the time model's predicted TFLOP/s/GPU against every published row
(:func:`bridgebench.validation.time_calibration.published_rows`), errors by release and by (model, GPU, precision)
group, and the coverage of the bands at 50 / 68 / 90 % (:mod:`bridgebench.validation.metrics`); the published
ablation sets (``paths.ablations``, :mod:`bridgebench.validation.ablation_time`) predicted in their own units.

Which predictions: the held-out ones of ``bridgebench check-published --models`` when its per-row file
(``<paths.tables>/models_check.csv``, leave one release out) exists; otherwise the shipped calibration's
(``configs/calibration/default.yaml``) -- in-sample for the published rows, which the page says, because the
held-out refit takes minutes (~4 min CPU) and the site must build in seconds."""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from bridgebench.site.layout import Page

LEVELS = (50, 68, 90)


def _published(tables: Path) -> tuple[list[dict[str, Any]], str, list[tuple[str, str]]]:
    import pandas as pd

    from bridgebench.config import calibration as calib_mod
    from bridgebench.model.steptime.predict import predict_time
    from bridgebench.validation.time_calibration import published_rows

    held = tables / "models_check.csv"
    if held.is_file():
        df = pd.read_csv(held)
        rows = []
        for r in df.to_dict("records"):
            band = r.get("band")
            rows.append(
                {
                    "release": str(r["release"]),
                    "model": r["model"],
                    "system": r["system"],
                    "precision": r["precision"],
                    "num_gpus": r["num_gpus"],
                    "published": r["published_tflops"],
                    "predicted": r["predicted_tflops"],
                    "error_pct": 100 * r["rel_error"],
                    "band 68 %": 100 * band if band == band else None,
                    "inside 68 %": bool(r["within_band"]),
                }
            )
        what = (
            "held out: calibration fitted without the row's release (`bridgebench check-published --models`, "
            f"{held.name})"
        )
        return rows, what, [(str(held), hashlib.sha256(held.read_bytes()).hexdigest())]
    cal = calib_mod.load("default")
    rows = []
    for r in published_rows():
        p = predict_time(r.spec, r.cfg, cal.time)
        err = 100 * (p.tflops_per_gpu / r.tflops - 1)
        lv = p.band_levels or {}
        row: dict[str, Any] = {
            "release": r.release,
            "model": r.model,
            "system": r.system,
            "precision": r.precision,
            "num_gpus": r.cfg.num_gpus,
            "TP/PP/EP": f"{r.cfg.tp}/{r.cfg.pp}/{r.cfg.ep}",
            "published": r.tflops,
            "predicted": p.tflops_per_gpu,
            "error_pct": err,
            "band source": p.band_source,
        }
        for level in LEVELS:
            b = lv.get(level)
            row[f"band {level} %"] = b
            row[f"inside {level} %"] = None if b is None else abs(math.log(p.tflops_per_gpu / r.tflops)) <= b / 100
        rows.append(row)
    what = (
        "shipped calibration (configs/calibration/default.yaml), in-sample: these rows were in its fit. "
        "Held-out errors: `bridgebench check-published --models` (~4 min), then build the site again"
    )
    return rows, what, []


def _ablations() -> tuple[list[dict[str, Any]], list[tuple[str, str]], str]:
    import dataclasses

    from bridgebench.config import calibration as calib_mod
    from bridgebench.config.catalog import load_gpu
    from bridgebench.errors import BridgebenchError
    from bridgebench.model.steptime.config import GpuFacts
    from bridgebench.validation.ablation_time import gpu_of, point_of, predicted_metric, spec_of
    from bridgebench.validation.ablations import read_set, set_files

    try:
        files = set_files()
    except BridgebenchError as err:
        return [], [], str(err)
    cal = calib_mod.load("default").time
    gpus: dict[str, GpuFacts] = {}
    out: list[dict[str, Any]] = []
    used: list[tuple[str, str]] = []
    for path in files:
        used.append((f"ablations/{path.name}", hashlib.sha256(path.read_bytes()).hexdigest()))
        for r in read_set(path):
            try:
                name, _ = gpu_of(r["gpu"])
                gpu = gpus.setdefault(name, GpuFacts.from_mapping(load_gpu(name)))
                spec = spec_of(r)
                cfg, _why = point_of(r, gpu)
                # the physics at a neutral software level, as benchmarks/validate_ablations.py ranks them
                neutral = dataclasses.replace(spec, name=f"ablation_{spec.name}")
                pred = predicted_metric(r, neutral, cfg, cal)
            except (BridgebenchError, ValueError, KeyError) as err:
                out.append({"set": path.stem, "model": r.get("model"), "note": f"not predicted: {err}"})
                continue
            measured = float(r["measured_value"])
            out.append(
                {
                    "set": path.stem,
                    "model": r.get("model"),
                    "gpu": r.get("gpu"),
                    "GPUs": cfg.num_gpus,
                    "TP/PP/CP/EP": f"{cfg.tp}/{cfg.pp}/{cfg.cp}/{cfg.ep}",
                    "unit": r["measured_unit"].strip(),
                    "measured": measured,
                    "predicted": pred,
                    "error_pct": 100 * (pred / measured - 1),
                }
            )
    return out, used, ""


def build(page: Page, tables: Path, sel) -> list[tuple[str, str]]:

    from bridgebench.validation import metrics

    rows, what, used = _published(tables)
    if sel.get("model"):
        from bridgebench.results.compare.selection import normalize

        want = {normalize(m) for m in sel.get("model")}
        rows = [r for r in rows if normalize(r["model"]) in want] or rows
    page.sources.append("results/reference/published_pretrain_throughput.csv")
    page.note(f"{len(rows)} published rows with a configs/model entry. Predictions: {what}.")
    errs = [r["error_pct"] / 100 for r in rows]
    page.raw(
        f"<p>MAPE {100 * metrics.mape(errs):.1f} %, median |error| {100 * metrics.median_abs(errs):.1f} %, "
        f"max |error| {100 * metrics.max_abs(errs):.1f} %.</p>"
    )
    _scatter(page, rows)
    _errors(page, rows)
    _coverage(page, rows)
    used += _ablation_section(page)
    return used


def _scatter(page: Page, rows: list[dict[str, Any]]) -> None:
    """Predicted vs published, one trace per model, the 68 % band as error bars."""
    import plotly.graph_objects as go

    fig = go.Figure()
    by_model: dict[str, list] = defaultdict(list)
    for r in rows:
        by_model[r["model"]].append(r)
    for m, rs in sorted(by_model.items()):
        fig.add_scatter(
            x=[r["published"] for r in rs],
            y=[r["predicted"] for r in rs],
            mode="markers",
            name=m,
            error_y=dict(
                type="data", array=[(r.get("band 68 %") or 0) / 100 * r["predicted"] for r in rs], thickness=1
            ),
            hovertext=[
                f"{m} {r['system']} {r['precision']} {r['num_gpus']} GPUs, release {r['release']}<br>"
                f"published {r['published']:.0f}, predicted {r['predicted']:.0f} ({r['error_pct']:+.1f} %)"
                for r in rs
            ],
            hoverinfo="text",
        )
    hi = max([r["published"] for r in rows] + [r["predicted"] for r in rows] + [1])
    fig.add_scatter(
        x=[0, hi], y=[0, hi], mode="lines", name="predicted = published", line=dict(dash="dash", color="#888")
    )
    fig.update_layout(
        xaxis_title="published model TFLOP/s/GPU", yaxis_title="predicted (68 % band)", title="predicted vs published"
    )
    page.figure(fig, height=520)


def _errors(page: Page, rows: list[dict[str, Any]]) -> None:
    """Error by release (boxes) and by (model, GPU, precision) group (table)."""
    import plotly.graph_objects as go

    from bridgebench.validation import metrics

    page.h(2, "Error by release and by group", "errors")
    by_rel: dict[str, list[float]] = defaultdict(list)
    by_grp: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        by_rel[r["release"]].append(r["error_pct"])
        by_grp[f"{r['model']} {r['system']} {r['precision']}"].append(r["error_pct"])
    from bridgebench.config.catalog import release_sort_key

    ef = go.Figure()
    for rel in sorted(by_rel, key=release_sort_key):
        ef.add_box(y=by_rel[rel], name=rel, boxpoints="all", jitter=0.3, pointpos=0)
    ef.update_layout(yaxis_title="error %", showlegend=False, title="error (predicted / published - 1) by release")
    page.figure(ef)
    grp = [
        {
            "group": g,
            "rows": len(v),
            "MAPE %": 100 * metrics.mape([x / 100 for x in v]),
            "median error %": sorted(v)[len(v) // 2],
        }
        for g, v in sorted(by_grp.items())
    ]
    page.table(grp, ident="by-group", formats={"MAPE %": ".1f", "median error %": "+.1f"})


def _coverage(page: Page, rows: list[dict[str, Any]]) -> None:
    """Observed coverage of the 50 / 68 / 90 % bands against nominal, then every row."""
    import plotly.graph_objects as go

    page.h(2, "Band coverage", "coverage")
    cov = []
    for level in LEVELS:
        key = f"inside {level} %"
        marks = [r[key] for r in rows if r.get(key) is not None]
        if marks:
            cov.append(
                {
                    "band": f"{level} %",
                    "rows": len(marks),
                    "inside": sum(marks),
                    "coverage %": 100 * sum(marks) / len(marks),
                }
            )
    if cov:
        cf = go.Figure(go.Bar(x=[c["band"] for c in cov], y=[c["coverage %"] for c in cov], name="observed"))
        cf.add_scatter(
            x=[c["band"] for c in cov],
            y=[float(c["band"][:-2]) for c in cov],
            mode="markers",
            name="nominal",
            marker=dict(symbol="line-ew-open", size=30),
        )
        cf.update_layout(yaxis_title="% of rows inside the band", title="band coverage: observed vs nominal")
        page.figure(cf, height=320)
        page.table(cov, ident="coverage", filterable=False, formats={"coverage %": ".1f"})
    page.h(2, "All rows", "rows")
    page.table(
        rows,
        ident="validation-rows",
        formats={
            "published": ".1f",
            "predicted": ".1f",
            "error_pct": "+.1f",
            "band 50 %": ".1f",
            "band 68 %": ".1f",
            "band 90 %": ".1f",
        },
    )


def _ablation_section(page: Page) -> list[tuple[str, str]]:
    """The published ablation sets, predicted in their own units; returns the files read with their sha256."""
    import plotly.graph_objects as go

    page.h(2, "Published ablations", "ablations")
    abl, used, missing = _ablations()
    if missing:
        page.note(f"Ablation sets not available: {missing}")
        return used
    page.note(
        "Each set's rows predicted by the time model at a neutral software level, in the set's own unit "
        "(benchmarks/validate_ablations.py reports ranks and level factors per set)."
    )
    ok = [a for a in abl if "measured" in a]
    af = go.Figure()
    sets: dict[str, list] = defaultdict(list)
    for a in ok:
        sets[a["set"]].append(a)
    for s, rs in sorted(sets.items()):
        af.add_box(y=[a["error_pct"] for a in rs], name=s[:28], boxpoints="all", jitter=0.3, pointpos=0)
    af.update_layout(yaxis_title="error %", showlegend=False, title="ablation rows: error per set", xaxis_tickangle=-30)
    page.figure(af, height=420)
    page.table(abl, ident="ablation-rows", formats={"measured": ".4g", "predicted": ".4g", "error_pct": "+.1f"})
    return used
