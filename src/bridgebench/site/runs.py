"""The "Your runs" page: the results store's records (:class:`bridgebench.results.store.ResultStore`) per
experiment (a record's ``name``: one configuration): repeats with their median and spread (IQR, min-max), outcome
counts (:func:`bridgebench.results.outcomes.tally`), measured vs predicted with the band where the records carry a
prediction (:func:`bridgebench.results.vs_predicted.rows`), and every record's provenance: commit, container, SLURM
job, the sha256 of each log copied into the store."""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

from bridgebench.site.layout import Page, esc, tag


def step_of(r: dict[str, Any]) -> float | None:
    """A record's step time in s: the run-level ``step_time_s``, else (optimizer-step payload) the Muon or AdamW
    step of its own optimizer (``optstep.total``: its ``*_step_s``, else the median of its per-repeat times)."""
    if r.get("step_time_s"):
        return float(r["step_time_s"])
    total = (r.get("optstep") or {}).get("total") or {}
    opt = str(r.get("optimizer") or "")
    key = "adamw_step" if "adam" in opt else "muon_step"
    if total.get(f"{key}_s"):
        return float(total[f"{key}_s"])
    times = [float(t) for t in total.get(f"{key}_times_s") or [] if t]  # per-repeat times of the payload
    return statistics.median(times) if times else None


def _quantiles(v: list[float]) -> tuple[float, float]:
    if len(v) < 2:
        return v[0], v[0]
    q = statistics.quantiles(v, n=4, method="inclusive")
    return q[0], q[2]


def _prov(r: dict[str, Any]) -> dict[str, Any]:
    p = r.get("provenance") or {}
    logs = p.get("logs") or []
    shas = "<br>".join(f"<code>{esc(lg.get('name'))}</code> {esc(str(lg.get('sha256'))[:16])}…" for lg in logs)
    commit = p.get("git_commit") or r.get("git_commit")
    dirty = " (dirty)" if p.get("git_dirty") else ""
    return {
        "commit": f"<code>{esc(str(commit)[:12])}</code>{dirty}" if commit else "-",
        "container": esc(p.get("container_image") or "none (host)"),
        "slurm job": esc(p.get("slurm_job_id") or "-"),
        "log sha256": shas or "-",
    }


def build(page: Page, store_records: list[dict], store_root: str, notes: list[str], sel) -> None:
    from bridgebench.results.compare.own_runs import run_matches

    page.sources.append(f"{store_root} ({len(store_records)} records)")
    records = [r for r in store_records if not sel.items or run_matches(r, sel)]
    for line in notes:
        page.note(line)
    if not records:
        page.note(
            f"No records in the results store ({store_root}). Run `bridgebench submit experiment=optstep_local --wait` "
            "then `bridgebench collect` (README walkthrough), and build the site again."
        )
        return
    page.note(
        "One group per experiment (a record's name = one configuration), each repeat one SLURM job. Step time: the "
        "run's median step (pretrain) or the optimizer step of the run's optimizer (optimizer-step payload). "
        "Median and spread over completed repeats only; the other outcomes are counted beside them."
    )
    _repeats(page, records)
    _predicted(page, records)
    _records(page, records)


def _repeats(page: Page, records: list[dict]) -> None:
    """Per experiment: completed repeats' median and spread, outcome counts; one box per experiment."""
    import plotly.graph_objects as go

    from bridgebench.results.outcomes import outcome_of, tally

    groups: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        groups[str(r.get("name") or r.get("run_id") or r["record_id"])].append(r)
    summary, fig = [], go.Figure()
    for name, rs in sorted(groups.items()):
        done = [(s, r) for r in rs if outcome_of(r) == "completed" and (s := step_of(r))]
        vals = [s for s, _ in done]
        counts = tally(rs)
        row = {
            "experiment": name,
            "kind": rs[0].get("kind"),
            "model": rs[0].get("model"),
            "optimizer": rs[0].get("optimizer"),
            "records": len(rs),
            "outcomes": ", ".join(f"{k} {v}" for k, v in sorted(counts.items())),
        }
        if vals:
            lo, hi = _quantiles(vals)
            row |= {
                "n": len(vals),
                "median step s": statistics.median(vals),
                "IQR lo": lo,
                "IQR hi": hi,
                "min": min(vals),
                "max": max(vals),
            }
            fig.add_box(
                y=vals,
                name=name[:40],
                boxpoints="all",
                jitter=0.3,
                pointpos=0,
                hovertext=[r["record_id"] for _, r in done],
                hoverinfo="y+text",
            )
        summary.append(row)
    page.h(2, "Repeats per experiment", "repeats")
    if fig.data:
        fig.update_layout(
            yaxis_title="step time (s)", showlegend=False, title="completed repeats: median, IQR, every repeat"
        )
        page.figure(fig)
    page.table(summary, ident="experiments", formats={"median step s": ".4g", "IQR lo": ".4g", "IQR hi": ".4g"})


def _predicted(page: Page, records: list[dict]) -> None:
    """Measured median step vs the plan's prediction and band (records that carry one)."""
    import plotly.graph_objects as go

    from bridgebench.results import vs_predicted

    pred = vs_predicted.rows(records)
    page.h(2, "Measured vs predicted", "predicted")
    if pred:
        f2 = go.Figure()
        f2.add_scatter(
            x=[p["name"] for p in pred],
            y=[p["predicted_s"] for p in pred],
            mode="markers",
            name="predicted (band)",
            error_y=dict(type="data", array=[p["predicted_s"] * p["band_pct"] / 100 for p in pred]),
            marker=dict(symbol="diamond", size=10),
        )
        f2.add_scatter(
            x=[p["name"] for p in pred],
            y=[p["measured_s"] for p in pred],
            mode="markers",
            name="measured (median)",
            marker=dict(size=9),
            hovertext=[f"{p['error_pct']:+.1f} % vs predicted; inside band: {p['inside_band']}" for p in pred],
        )
        f2.update_layout(yaxis_title="step time (s)", title="median measured step vs the plan's prediction and band")
        page.figure(f2)
        page.table(pred, ident="vs-predicted", formats={"error_pct": "+.1f"})
    else:
        page.note(
            "No completed record carries a prediction (pretrain and replay runs planned by `bridgebench plan` "
            "do; optimizer-step runs have none)."
        )


def _records(page: Page, records: list[dict]) -> None:
    """Every record: outcome, step, and its provenance (commit, container, SLURM job, log sha256)."""
    from bridgebench.results.outcomes import outcome_of

    page.h(2, "Records and provenance", "records")
    rows = []
    for r in sorted(records, key=lambda r: r["record_id"]):
        o = outcome_of(r)
        rows.append(
            {
                "record": f"<code>{esc(r['record_id'])}</code>",
                "experiment": esc(r.get("name") or "-"),
                "outcome": tag(o, "" if o == "completed" else "bad"),
                "step s": esc(f"{s:.4g}") if (s := step_of(r)) else "-",
                "detail": esc(r.get("outcome_detail") or r.get("reason") or ""),
                "submitted": esc(((r.get("timestamps") or {}).get("submitted_utc")) or "-"),
                **_prov(r),
            }
        )
    page.table(rows, ident="records", html_columns=rows[0].keys())
