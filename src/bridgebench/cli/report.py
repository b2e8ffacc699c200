"""``bridgebench report``: measured optimizer-step results aggregated over repeats, every figure with its spread."""

from __future__ import annotations

import json
from typing import Any

import typer

from bridgebench.cli.app import app
from bridgebench.errors import BridgebenchError


def _spread(s: dict, fmt: str = ".4g", scale: float = 1.0) -> str:
    """``median [q1-q3]`` (one repeat: ``value (n=1)``)."""
    if s["median"] is None:
        return "-"
    med = format(s["median"] / scale, fmt)
    if s["n"] < 2:
        return f"{med} (n=1)"
    return f"{med} [{format(s['q1'] / scale, fmt)}-{format(s['q3'] / scale, fmt)}]"


@app.command()
def report(
    as_json: bool = typer.Option(False, "--json", help="print JSON (groups and repeats)"),
    payload: str = typer.Option(
        "measured", "--payload", help="pretrain runs shown: measured, replayed (bridgebench.payloads.replay) or all"
    ),
) -> None:
    """Optimizer-step benchmark results from the store, aggregated per configuration over repeats: median, IQR,
    95% CI of the median (n >= 6), count; contended repeats set aside, outliers flagged (results/optstep_stats.py).
    Pretrain (and, with --payload replayed, replayed) runs: measured step time beside what the plan predicted,
    and whether it fell inside the band (results/vs_predicted.py)."""
    from rich.console import Console
    from rich.table import Table

    from bridgebench.launch.collect import default_store
    from bridgebench.results import vs_predicted
    from bridgebench.results.optstep_stats import CONTENDED_OTHER_SHARE, aggregate
    from bridgebench.results.outcomes import skip_line, usable

    if payload not in vs_predicted.SHOW:
        raise BridgebenchError(f"--payload must be one of {', '.join(vs_predicted.SHOW)}, got {payload!r}")
    store = default_store()
    everything = store.records()
    stored = [r for r in everything if r.get("kind") == "optstep"]
    for line in store.last_scan.notes():  # files skipped or counted once, by name (results/store.py)
        typer.echo(line, err=True)
    runs, which = vs_predicted.choose([r for r in everything if r.get("kind") in ("pretrain", "replay")], payload)
    pred_rows = vs_predicted.rows(runs)
    if pred_rows and not stored:  # no optimizer-step records: the runs' table alone
        if as_json:
            typer.echo(json.dumps({"vs_predicted": pred_rows, "shown": which}, indent=2))
            return
        c = Console(markup=False)
        c.width = max(c.width, 200)
        vs_predicted.print_table(c, runs, f"pretrain runs: measured vs predicted ({which})")
        return
    recs = [r for r in stored if usable(r) and r.get("optstep")]
    if not stored:
        raise BridgebenchError(
            "no optimizer-step results in the store and no pretrain run with a kept prediction "
            f"({which}): run `bridgebench submit experiment=optstep_local --wait` and `bridgebench collect` first"
        )
    skipped = skip_line(stored, len(recs), "optimizer-step record")
    if not recs:  # say what is there and why none of it counts ("3 records, none completed: 1 TIMEOUT, ...")
        raise BridgebenchError(
            f"nothing to report: {skipped} (`bridgebench status` shows each job's reason); submit new runs with "
            "`bridgebench submit experiment=optstep_local --again --wait`"
        )
    rows, reps = aggregate(recs)
    if as_json:
        typer.echo(json.dumps({"optstep": rows, "vs_predicted": pred_rows, "shown": which} if pred_rows else rows,
                              indent=2))  # fmt: skip
        typer.echo(f"report: {skipped}", err=True)
        return
    t = _optstep_table(rows)
    c = Console(markup=False)
    c.width = max(c.width, 240)
    c.print(t)
    c.print(f"records: {skipped}")
    flagged = {r.record_id: r for r in reps if r.flags and r.family == "total"}
    if flagged:
        ft = Table(title="repeats set aside (contended) or flagged")
        for col in ("record", "other processes' CPU share", "flags"):
            ft.add_column(col, no_wrap=col != "flags")
        for rid, r in sorted(flagged.items()):
            share = f"{r.other_share:.1%}" if r.other_share is not None else "unknown"
            ft.add_row(rid, share, "; ".join(r.flags))
        c.print(ft)
    c.print(
        f"contended = other processes used >= {CONTENDED_OTHER_SHARE:.0%} of the node's CPU during the timing window "
        "(left out, unless no repeat is clean: then the row is flagged CONTENDED); outliers (> 3.5 robust z) are "
        "kept but flagged; each repeat is one SLURM job (submit --repeats N)"
    )
    if pred_rows:
        vs_predicted.print_table(c, runs, f"pretrain runs: measured vs predicted ({which})")


def _optstep_table(rows: list[dict[str, Any]]) -> Any:
    """The optimizer-step table (rich): per configuration and family, medians [IQR] over repeats, the Muon / AdamW
    ratio with its 95 % CI, Newton-Schulz time and rate, and the flags."""
    from rich.table import Table

    t = Table(title="optimizer-step benchmark (measured): median [IQR] over repeats")
    for col in (
        "config",
        "model",
        "device",
        "family",
        "matrices",
        "n",
        "Muon step s",
        "AdamW step s",
        "Muon/AdamW",
        "ratio 95% CI",
        "NS s",
        "NS GFLOP/s",
        "flags",
    ):
        if col == "flags":
            t.add_column(col, justify="left", min_width=40)
        else:
            t.add_column(col, justify="right", no_wrap=True)
    for r in rows:
        st = r["stats"]
        ci = st["ratio"]["ci95"]
        if r["basis"].startswith("contended"):
            n = f"{r['n']} (all contended)"
        else:
            n = f"{r['n']}" + (f" (+{r['n_contended']} contended, left out)" if r["n_contended"] else "")
        flags = list(r["flags"]) + ([f"{r['n_outliers']} outlier(s)"] if r["n_outliers"] else [])
        t.add_row(
            str(r["config_hash"] or "-")[:8],
            str(r["model"]),
            str(r["device"]),
            r["family"],
            str(r["matrices"]),
            n,
            _spread(st["muon_step_s"]),
            _spread(st["adamw_step_s"]),
            _spread(st["ratio"], ".3g"),
            f"{ci[0]:.3g}-{ci[1]:.3g}" if ci else "n<6",
            _spread(st["ns_time_s"]),
            _spread(st["ns_flops_per_s"], ".4g", 1e9),
            "; ".join(flags),
        )
    return t
