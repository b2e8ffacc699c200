"""The outputs of ``bridgebench sweep``: ``points.parquet`` (every point, its stage, status, rule / reason, memory
and predicted time), ``summary.md`` (counts, per-stage throughput, what pruned the points, the top K) and
``points.png`` (predicted TFLOP/s/GPU against memory per GPU, HBM lines, top K marked). Each file is written to a
temporary name and renamed into place."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from bridgebench.config.rules import RULES
from bridgebench.sweep.row import write_rows

#: pruning reasons that are not a ``bridgebench.config.rules`` rule.
OTHER_REASONS = {
    "memory": "predicted peak memory per GPU x (1 + lowest measured allocator fragmentation) above the GPU's memory "
    "(bridgebench.model.memory, configs/calibration)",
    "model_spec": "the swept architecture breaks a model rule (bridgebench.model.spec)",
    "memory_model": "the memory model cannot evaluate the point",
    "time_model": "the time model cannot evaluate the point (e.g. no peak for the precision on this GPU)",
}


def _replace(path: Path, write) -> Path:
    """Write ``path`` through a temporary file renamed over it: whole or not at all. An ``OSError`` (a full disk)
    comes back with ``filename`` set to ``path``, so the caller can name the file."""
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
        os.close(fd)
        write(tmp)
        os.replace(tmp, path)
    except BaseException as err:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise OSError(err.errno, err.strerror or str(err), str(path)) from err
        raise
    return path


def _fmt(value: Any, spec: str = "") -> str:
    if value is None or value != value:
        return "-"
    return format(value, spec) if spec else str(value)


def flags(r: dict[str, Any]) -> str:
    """Short flags of a point: ``published`` (the recipe's own configuration), ``NVL>`` (its expert group leaves
    the NVLink domain), ``tight`` (fits only below the median measured allocator fragmentation)."""
    out = []
    if r.get("published"):
        out.append("published")
    if r.get("ep_leaves_nvlink"):
        out.append(f"NVL>{r.get('ep_span')}")
    if r.get("tight"):
        out.append("tight")
    return " ".join(out)


def _recompute(r: dict[str, Any]) -> str:
    rec = r.get("recompute_granularity") or "none"
    if r.get("recompute_modules"):
        rec += f" ({r['recompute_modules']})"
    return rec


def _trust_lines(rows: list[dict[str, Any]], counts: dict[str, Any]) -> list[str]:
    """The band, ties, collapsed points, the recipe's own configuration and the expert groups beyond NVLink."""
    ranked = [r for r in rows if r.get("rank") is not None]
    if not ranked:
        return ["Nothing was ranked."]
    best = min(ranked, key=lambda r: r["rank"])
    bands = sorted({round(r["band_pct"], 1) for r in ranked if r.get("band_pct") is not None})
    ties = [r for r in ranked if r.get("tie")]
    collapsed = sum(1 for r in rows if r.get("status") == "indistinct")
    out = [
        f"- every prediction carries a band of +-{', '.join(f'{b:g}' for b in bands) or '?'} % (the time model's "
        f"cross-validated error, `band_pct`); the best point predicts {best['tflops_per_gpu']:.1f} TFLOP/s/GPU",
        f"- **{len(ties):,} of {len(ranked):,} ranked points tie with the best** (within its band): the model cannot "
        "order them -- measure them rather than trusting the rank",
        f"- {collapsed:,} points were collapsed into a twin the model cannot tell apart on any term (same predicted "
        "terms: e.g. CP = 1 / CP = 2 pairs whose terms are equal, recompute variants with the same time); the "
        "ranking and the top K hold one of each",
    ]
    nvl = counts.get("ep_leaves_nvlink", sum(1 for r in ranked if r.get("ep_leaves_nvlink")))
    out.append(
        f"- {nvl:,} ranked points have an EP x ETP group larger than the NVLink domain (`NVL>`): their expert "
        "all-to-all crosses the scale-out network"
    )
    tight = sum(1 for r in ranked if r.get("tight"))
    if tight:
        out.append(f"- {tight:,} ranked points fit only below the median measured allocator fragmentation (`tight`)")
    place = counts.get("published")
    if place is None:
        out.append("- the recipe's own (published) configuration is not in this space")
    elif place["rank"] is None:
        out.append(
            f"- the recipe's own configuration (point `{place['point_id']}`) was not ranked: {place['status']} -- "
            f"{place['reason']}"
        )
    else:
        twin = f" (indistinct from `{place['collapsed_into']}`)" if place.get("collapsed_into") else ""
        out.append(
            f"- **the recipe's own configuration ranks {place['rank']} of {place['of']:,}**{twin}"
            + (" and ties with the best" if place["tie"] else " and is outside the best point's band")
        )
    return out


def _upstream_lines(rows: list[dict[str, Any]], counts: dict[str, Any], space: Any) -> list[str]:
    """Which of upstream's start-up assertions removed how many points (every rule a point breaks counts, so a
    point can count under several), what was set for the user and said (``sequence_parallel: auto``), and which
    points are priced with a dispatcher other than the one asked for (DeepEP on GB200/GB300)."""
    ups = counts.get("upstream_rules") or {}
    out = ["", "## Upstream's start-up assertions", ""]
    if ups:
        out += ["| rule | points breaking it | first rule of | source |", "|---|---:|---:|---|"]
        for rule, n in ups.items():
            first = counts["by_rule"].get(rule, 0)
            out.append(f"| `{rule}` | {n:,} | {first:,} | {RULES[rule].source if rule in RULES else ''} |")
    else:
        out.append("No point broke an upstream start-up assertion.")
    if space is not None and any(a.key == "model.sequence_parallel" and "auto" in a.values for a in space.axes):
        out.append(
            "- `model.sequence_parallel: auto` set sequence parallelism on every point with TP > 1 (Megatron-Core "
            "requires it for MoE with TP > 1: rule `moe_tp_needs_sp`)"
        )
    notes = {r["dispatcher_note"] for r in rows if r.get("dispatcher_note")}
    for note in sorted(notes):
        n = sum(1 for r in rows if r.get("dispatcher_note") == note)
        out.append(f"- {n:,} points: {note}")
    return out


def summary_markdown(result: Any, state: dict[str, Any], calib: Any) -> str:
    """The Markdown summary of a sweep (see the module docstring)."""
    rows = result.rows
    counts = result.counts
    sp = result.space
    lines = [f"# Sweep `{result.name}`", ""]
    if sp is not None:
        lines += [
            f"- space: {sp.source}" + (f" -- {sp.description}" if sp.description else ""),
            f"- fixed overrides: `{' '.join(sp.fixed) or '(none)'}`",
            "- axes: " + ", ".join(f"`{a.key}` ({len(a.values)})" for a in sp.axes),
            f"- points: {len(rows):,} (space size {sp.size:,}); top K = {sp.top_k}",
        ]
    lines += [
        f"- calibration: `{calib.name}` ({calib.source}); pruned above the GPU's memory / (1 + {calib.fragmentation:g})"
        f" (lowest measured allocator fragmentation); `tight` above / (1 + {calib.fragmentation_typical:g}) (median)",
        "",
    ]
    lines += ["## Stages", "", "| stage | points in | seconds | points/s | |", "|---|---:|---:|---:|---|"]
    for stage, t in result.stages.items():
        rate = t["points"] / t["seconds"] if t["seconds"] else float("nan")
        lines.append(
            f"| {stage} | {t['points']:,} | {t['seconds']:.2f} | {_fmt(rate, ',.0f' if rate >= 10 else '.2f')} | "
            f"{'done before, resumed' if t.get('resumed') else ''} |"
        )
    lines += ["", "## Outcome", "", "| status | points |", "|---|---:|"]
    lines += [f"| {k} | {v:,} |" for k, v in sorted(counts["by_status"].items(), key=lambda x: -x[1])]
    if counts["by_rule"]:
        lines += ["", "## Pruned by", "", "| rule | points | what it checks | example |", "|---|---:|---|---|"]
        for rule, n in counts["by_rule"].items():
            what = RULES[rule].summary if rule in RULES else OTHER_REASONS.get(rule, "")
            example = next((r["reason"] for r in rows if r.get("rule") == rule), "")
            lines.append(f"| `{rule}` | {n:,} | {what} | {example[:160]} |")
    lines += _upstream_lines(rows, counts, sp)
    top = result.top
    lines += ["", "## How far to trust the ranking", ""]
    lines += _trust_lines(rows, counts)
    lines += ["", "## Top points (predicted)", ""]
    survivors = sum(1 for r in rows if r.get("rank") is not None)
    if not survivors:
        lines.append(
            "No point survived the rules and the memory model: nothing was planned. See *Pruned by* above for the "
            "rules that removed them."
        )
    elif not top:
        lines.append(f"{survivors:,} points ranked; top K = 0, so nothing was planned.")
    else:
        lines += [
            "| rank | TP | PP | VP | CP | EP | ETP | DP | MBS | GBS | recompute | memory GB | step s | TFLOP/s/GPU | "
            "+- % | tie | twins | flags | status | config hash |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---|---:|---|---|---|",
        ]
        for r in top:
            lines.append(
                f"| {r['rank']} | {r['tp']} | {r['pp']} | {_fmt(r['vp'])} | {r['cp']} | {r['ep']} | {r['etp']} | "
                f"{_fmt(r['dp'])} | {r['mbs']} | {r['gbs']} | {_recompute(r)} | {r['mem_total_gb']:.1f} | "
                f"{r['step_time_s']:.3f} | {r['tflops_per_gpu']:.1f} | {_fmt(r.get('band_pct'), '.1f')} | "
                f"{'tie' if r.get('tie') else ''} | {r.get('twins') or ''} | {flags(r)} | {r['status']} | "
                f"{_fmt(r.get('config_hash'))} |"
            )
        failed = [r for r in top if r["status"] == "plan_failed"]
        for r in failed:
            lines.append(f"\nrank {r['rank']} was not planned: {r.get('reason')}")
        lines += [
            "",
            "*tie*: within the prediction band of the best point (the model cannot order them); *twins*: points "
            "collapsed into this one because the model predicts the same on every term (status `indistinct` in "
            "points.parquet); flags: `published` = the recipe's own configuration, `NVL>` = the EP x ETP group "
            "leaves the NVLink domain, `tight` = fits only below the median measured allocator fragmentation.",
        ]
    lines += ["", "![points](points.png)", ""]
    return "\n".join(lines)


def points_plot(result: Any, path: Path, calib: Any) -> Path:
    """Scatter of predicted model TFLOP/s/GPU against predicted memory per GPU (GB): ranked points, points over
    memory (grey crosses, timed for the plot only), the top K (numbered stars), each GPU's HBM (solid) and usable
    HBM (dashed); the x axis stops at twice the HBM (the title counts the points beyond). Writes a PNG."""
    from bridgebench.results.plot_canvas import save_png

    fig = points_figure(result, calib)
    _replace(path, lambda tmp: save_png(fig, Path(tmp)))
    return path


def points_figure(result: Any, calib: Any) -> Any:
    """The figure of :func:`points_plot` (top-K points numbered, near-identical ones sharing one label)."""
    from bridgebench.results.plot_canvas import label_points, new_figure

    rows = [r for r in result.rows if r.get("tflops_per_gpu") is not None and r.get("mem_total_gb") is not None]
    hbm = sorted({(r["gpu"], r["hbm_gb"]) for r in result.rows if r.get("hbm_gb")})
    limit = 2.0 * max((cap for _, cap in hbm), default=0.0)  # x axis up to twice the largest HBM
    hidden = [r for r in rows if limit and r["mem_total_gb"] > limit]
    rows = [r for r in rows if not (limit and r["mem_total_gb"] > limit)]
    fig = new_figure((8, 5), dpi=120)
    ax = fig.add_subplot()
    ok = [r for r in rows if r["status"] != "over_memory"]
    over = [r for r in rows if r["status"] == "over_memory"]
    if over:
        ax.scatter([r["mem_total_gb"] for r in over], [r["tflops_per_gpu"] for r in over], s=8, marker="x",
                   color="#999999", alpha=0.5, label=f"over memory ({len(over):,})")  # fmt: skip
    if ok:
        ax.scatter([r["mem_total_gb"] for r in ok], [r["tflops_per_gpu"] for r in ok], s=8, color="#4C72B0",
                   alpha=0.5, label=f"fits ({len(ok):,})")  # fmt: skip
    for r in result.top:
        ax.scatter([r["mem_total_gb"]], [r["tflops_per_gpu"]], s=90, marker="*", color="#C44E52", zorder=3)
    if result.top:
        ax.scatter([], [], s=90, marker="*", color="#C44E52", label=f"top {len(result.top)}")
    for gpu, cap in hbm:
        ax.axvline(cap, color="black", lw=1.2, label=f"{gpu} HBM {cap:.0f} GB")
        ax.axvline(cap * (1 - calib.hbm_margin), color="black", lw=1, ls="--",
                   label=f"usable ({1 - calib.hbm_margin:.0%})")  # fmt: skip
    ax.set_xlabel("predicted memory per GPU, busiest rank (GB)")
    ax.set_ylabel("predicted model TFLOP/s per GPU")
    title = f"sweep {result.name}: {len(result.rows):,} points"
    if hidden:
        title += f"\n({len(hidden):,} points over {limit:.0f} GB per GPU not shown)"
    ax.set_title(title, fontsize=10)
    if limit:
        ax.set_xlim(0, limit)
    ax.grid(alpha=0.3)
    ax.margins(y=0.12)  # room above the best points for their numbers
    if rows or hbm:
        fig.legend(loc="outside right upper", fontsize=8)
    if result.top:
        label_points(ax, [(r["mem_total_gb"], r["tflops_per_gpu"], r["rank"]) for r in result.top])
    return fig


def write_outputs(result: Any, state: dict[str, Any], calib: Any) -> dict[str, Path]:
    """Write ``points.parquet``, ``summary.md`` and ``points.png`` into the sweep folder; returns their paths."""
    out = Path(result.dir)
    paths = {"points": out / "points.parquet", "summary": out / "summary.md", "plot": out / "points.png"}
    _replace(paths["points"], lambda tmp: write_rows(Path(tmp), result.rows))  # through the typed row
    points_plot(result, paths["plot"], calib)
    text = summary_markdown(result, state, calib)
    _replace(paths["summary"], lambda tmp: Path(tmp).write_text(text))
    return paths
