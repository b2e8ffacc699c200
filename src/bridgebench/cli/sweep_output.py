"""The ``sweep`` command's output: the progress of its stages (a rich bar per stage), the stage / count / top-K
tables or their JSON, and the adaptive sweep's rounds (:mod:`bridgebench.cli.sweep` calls these)."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

#: the columns of a top point in ``--json``
JSON_COLUMNS = (
    "rank", "status", "tp", "pp", "vp", "cp", "ep", "etp", "dp", "mbs", "gbs", "recompute_granularity",
    "recompute_modules", "mem_total_gb", "step_time_s", "tflops_per_gpu", "band_pct", "band_source", "tie", "twins",
    "published", "ep_span", "ep_leaves_nvlink", "ep_domains", "ep_split", "ep_cross_copies", "domain_gpus",
    "segment_nodes", "dispatcher", "dispatcher_note", "ep_overlap", "shared_expert_overlap", "tp_comm_overlap",
    "recompute", "expert_capacity", "cuda_graph_impl", "cuda_graph_scope", "knobs_source", "tight", "config_hash",
    "plan_dir", "run_ids",
)  # fmt: skip


class SweepProgress:
    """The sweep's progress as a rich progress bar per stage, messages above it (stderr)."""

    def __init__(self, console):
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.console = console
        self.bar = Progress(
            TextColumn("{task.description}", style="bold", markup=False),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        self.task = None

    def __enter__(self):
        self.bar.__enter__()
        return self

    def __exit__(self, *exc):
        return self.bar.__exit__(*exc)

    def start(self, stage: str, total: int) -> None:
        if self.task is not None:
            self.bar.update(self.task, completed=self.bar.tasks[self.task].total or 0)
        if not self.console.is_terminal:  # a log file or a pipe gets one line per stage (no live bar there)
            what = f"{total:,} points" if total else "one config per group combination"  # compose: count not known yet
            self.bar.console.print(f"stage {stage}: {what}", markup=False, highlight=False)
        self.task = self.bar.add_task(f"stage {stage}", total=total or None)

    def update(self, done: int, total: int) -> None:
        if self.task is not None:
            self.bar.update(self.task, completed=done, total=total)

    def log(self, message: str) -> None:  # names, paths and errors: data, never rich markup; one line each
        self.bar.console.print(message, markup=False, highlight=False, soft_wrap=True)


def print_sweep(result, as_json: bool) -> None:
    """A finished sweep (:class:`bridgebench.launch.sweep.SweepResult`): its stages, counts and top K as tables, or
    as JSON with ``--json``."""
    stages = {
        k: {**v, "points_per_s": v["points"] / v["seconds"] if v["seconds"] else None} for k, v in result.stages.items()
    }
    if as_json:
        _print_sweep_json(result, stages)
        return
    out = Console(markup=False)  # names, paths, reasons: data, never rich markup
    out.width = max(out.width, 170)
    t = Table(title=f"sweep {result.name}: stages")
    for c in ("stage", "points", "seconds", "points/s", ""):
        t.add_column(c, justify="right")
    for k, v in stages.items():
        per_s = v["points_per_s"]
        rate = "-" if not per_s else f"{per_s:,.0f}" if per_s >= 10 else f"{per_s:.2f}"
        t.add_row(k, f"{v['points']:,}", f"{v['seconds']:.2f}", rate, "resumed" if v.get("resumed") else "")
    out.print(t)
    out.print("points by status: " + ", ".join(f"{k} {v:,}" for k, v in result.counts["by_status"].items()))
    if result.counts["by_rule"]:
        out.print("pruned by: " + ", ".join(f"{k} {v:,}" for k, v in result.counts["by_rule"].items()))
    if result.counts.get("upstream_rules"):
        out.print(
            "upstream start-up assertions broken (a point counts under each it breaks): "
            + ", ".join(f"{k} {v:,}" for k, v in result.counts["upstream_rules"].items())
        )
    ranked = result.counts["by_status"].get("ranked", 0) + sum(
        result.counts["by_status"].get(s, 0) for s in ("planned", "plan_failed", "submitted", "skipped")
    )
    if not ranked:
        out.print(
            Text.assemble(
                ("no point survived the rules and the memory model", "bold red"), f"; see {result.outputs['summary']}"
            )
        )
    elif not result.top:
        out.print(f"{ranked:,} points ranked; top K = 0: nothing planned")
    else:
        _print_top(out, result)
    out.print("outputs: " + ", ".join(str(p) for p in result.outputs.values()))


def _print_sweep_json(result, stages: dict) -> None:
    """``sweep --json``: name, folder, stages, counts, the top points (:data:`JSON_COLUMNS`), outputs."""
    top = [{k: r.get(k) for k in JSON_COLUMNS} for r in result.top]
    out = {"name": result.name, "dir": str(result.dir), "stages": stages, "counts": result.counts, "top": top}
    out["published"] = result.counts.get("published")
    typer.echo(json.dumps({**out, "outputs": {k: str(v) for k, v in result.outputs.items()}}, indent=2))


def _print_top(out: Console, result) -> None:
    """The top-K table (with a column for each field that alone separates look-alike rows), the ties, where the
    recipe's own configuration ranks, and the top points that could not be planned."""
    from bridgebench.results.sweep_report import flags

    shown = ("tp", "pp", "vp", "cp", "ep", "etp", "dp", "mbs", "gbs")
    extra = _separating_fields(result.top, shown)
    t = Table(title=f"top {len(result.top)} (predicted; +- band; tie = within the best point's band)")
    for c in ("rank", "TP", "PP", "VP", "CP", "EP", "ETP", "DP", "MBS", "GBS", "recompute", *extra, "GB/GPU",
              "step s", "TFLOP/s/GPU", "+-%", "tie", "twins", "flags", "status", "config hash"):  # fmt: skip
        t.add_column(c, justify="right", no_wrap=c not in ("recompute", *extra))
    for r in result.top:
        band = r.get("band_pct")
        t.add_row(
            str(r["rank"]), *(str(r[k] if r[k] is not None else "-") for k in shown), _recompute(r),
            *(_cell(r.get(k)) for k in extra), f"{r['mem_total_gb']:.1f}", f"{r['step_time_s']:.3f}",
            f"{r['tflops_per_gpu']:.1f}", "-" if band is None else f"{band:.1f}", "tie" if r.get("tie") else "",
            str(r.get("twins") or ""), flags(r), r["status"], str(r.get("config_hash") or "-"),
        )  # fmt: skip
    out.print(t)
    ranked_n = sum(1 for r in result.rows if r.get("rank") is not None)
    ties = result.counts.get("ties", 0)
    out.print(
        f"{ties:,} of {ranked_n:,} ranked points tie with the best (within its band); "
        f"{result.counts['by_status'].get('indistinct', 0):,} collapsed into indistinguishable twins; "
        f"{result.counts.get('ep_leaves_nvlink', 0):,} with an expert group beyond NVLink"
    )
    _print_published_place(out, result.counts.get("published"))
    failed = [r for r in result.top if r["status"] == "plan_failed"]
    for r in failed:
        out.print(f"rank {r['rank']} not planned: {r.get('reason')}")


def _print_published_place(out: Console, place: dict | None) -> None:
    """Where the recipe's own (published) configuration ranks in the sweep."""
    if place is None:
        out.print("the recipe's own configuration is not in this space")
    elif place["rank"] is None:
        out.print(f"the recipe's own configuration was not ranked: {place['status']}: {place['reason']}")
    else:
        out.print(
            Text.assemble(
                "the recipe's own configuration ranks ",
                (str(place["rank"]), "bold"),
                f" of {place['of']:,}",
                " (ties with the best)" if place["tie"] else " (outside the best point's band)",
            )
        )


def print_adaptive(res, as_json: bool) -> None:
    """An adaptive sweep's rounds (:class:`bridgebench.launch.adaptive.AdaptiveResult`) as a table, or JSON."""
    summary = {
        "name": res.sweep.name,
        "dir": str(res.sweep.dir),
        "stop": res.stop,
        "best": res.best,
        "gpu_hours": res.gpu_hours,
        "rounds": res.rounds,
        "outputs": {k: str(v) for k, v in res.outputs.items()},
    }
    if as_json:
        typer.echo(json.dumps(summary, indent=2, default=str))
        return
    out = Console(markup=False)
    out.width = max(out.width, 160)
    t = Table(title=f"adaptive sweep {res.sweep.name}: rounds (rule: {res.rounds and 'ei'})")
    for c in ("round", "point", "why chosen", "predicted TFLOP/s/GPU", "+-%", "measured step s", "status"):
        t.add_column(c, justify="right" if c not in ("why chosen",) else "left")
    for r in res.rounds:
        meas = f"{r['measured_step_s']:.3f}" if r["measured_step_s"] else (r["failed"] or "-")
        t.add_row(str(r["round"]), r["point_id"], str(r["why"]), f"{r['predicted_tflops']:.1f}",
                  f"{r['band_pct'] or 0:.1f}", meas, str(r["status"]))  # fmt: skip
    out.print(t)
    h = res.gpu_hours
    out.print(Text.assemble("stopped: ", (str(res.stop), "bold"), f"; GPU-hours {h['spent']:.1f} of a full grid's "
              f"{h['full_grid']:.1f} ({100 * h['share']:.1f} %)"))  # fmt: skip
    if res.best:
        out.print(f"best measured: {res.best['point_id']} at {res.best['tflops_per_gpu']:.1f} TFLOP/s/GPU "
                  f"(predicted rank {res.best['rank_predicted']})")  # fmt: skip
    out.print("outputs: " + ", ".join(str(p) for p in res.outputs.values()))


def _recompute(r: dict) -> str:
    """Recompute granularity and its modules (the column that tells near-identical points apart)."""
    text = str(r.get("recompute_granularity") or "none")
    mods = r.get("recompute_modules")
    if mods is not None and not isinstance(mods, str):
        mods = ",".join(map(str, mods))
    return f"{text} ({mods})" if mods else text


def _cell(value) -> str:
    if value is None or value != value:
        return "-"
    if not isinstance(value, str) and hasattr(value, "__iter__") and not isinstance(value, dict):
        return ",".join(map(str, value))
    return str(value)


#: Point fields that are results or bookkeeping, never what tells two configurations apart.
_NOT_CONFIG = {"rank", "status", "rule", "reason", "point_id", "config_hash", "plan_dir", "run_ids", "score", "base",
               "efficiency", "efficiency_source", "mem_stage", "recompute_granularity", "recompute_modules",
               "delta", "band_50_pct", "band_90_pct", "band_source"}  # fmt: skip


def _separating_fields(top: list[dict], shown: tuple[str, ...]) -> list[str]:
    """Fields on which top points that look identical in the shown columns (and recompute) differ, so the table can
    show what separates them (e.g. ``layout`` or ``sequence_parallel``)."""
    groups: dict[tuple, list[dict]] = {}
    for r in top:
        groups.setdefault(tuple(_cell(r.get(k)) for k in shown) + (_recompute(r),), []).append(r)
    out: list[str] = []
    for rows in groups.values():
        if len(rows) < 2:
            continue
        for key in rows[0]:
            if key in _NOT_CONFIG or key in shown or key.startswith(("mem_", "t_")) or key in out:
                continue
            if key in ("step_time_s", "tflops_per_gpu", "hbm_usable_gb"):
                continue
            if len({_cell(r.get(key)) for r in rows}) > 1:
                out.append(key)
    return out
