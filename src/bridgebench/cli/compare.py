"""``bridgebench compare``: release histories of NVIDIA's published numbers and your own runs, with statistics."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Optional

import typer

from bridgebench.cli.app import app, out_folder, source_option
from bridgebench.cli.richsafe import plain

KEYS = typer.Argument(
    None,
    help="config keys, key=value (comma = alternatives): model, gpu, precision, num_gpus, optimizer, release "
    "(26.04 or a range 26.02..26.06); with --source runs also any record field (config_hash=, name=, job.layers=)",
)


def _fmt_interval(value, lo, hi) -> str:
    if value is None or value != value:
        return "-"
    return f"{value:,.0f} [{lo:,.1f}, {hi:,.1f}]" if hi - lo < 2 else f"{value:,.0f} [{lo:,.0f}, {hi:,.0f}]"


@app.command()
def compare(
    keys: Optional[list[str]] = KEYS,
    source: str = source_option(
        "published: NVIDIA's tables; runs: your results store; both: published with your runs beside it; "
        "auto: runs when --a/--b are given, else published plus your runs of the same keys if the store has any",
    ),
    side_a: Optional[list[str]] = typer.Option(None, "--a", help="side A of a runs comparison: key=value ..."),
    side_b: Optional[list[str]] = typer.Option(None, "--b", help="side B of a runs comparison: key=value ..."),
    metric: str = typer.Option(
        "step_time", "--metric", help="runs: step_time, tflops, tokens, or optimizer-step muon_step/adamw_step/ns_time"
    ),
    threshold: float = typer.Option(
        0.01, "--threshold", help="relative change a verdict (runs) or a real change (published) must exceed"
    ),
    noise_cv: float = typer.Option(
        0.01, "--noise-cv", help="assumed run-to-run CV of a published value (change-point penalty)"
    ),
    confidence: float = typer.Option(0.95, "--confidence", help="confidence level of the intervals"),
    resamples: int = typer.Option(2000, "--resamples", help="bootstrap resamples (run level)"),
    bootstrap: str = typer.Option("stationary", "--bootstrap", help="block bootstrap of iterations: stationary|moving"),
    block_length: Optional[float] = typer.Option(
        None, "--block-length", help="iterations per block (default: Politis-White optimal length)"
    ),
    min_runs: int = typer.Option(3, "--min-runs", help="fewer runs per side give 'insufficient: need N repeats'"),
    skip: float = typer.Option(0.1, "--skip", help="leading fraction of each run's iterations dropped as warm-up"),
    fdr_alpha: float = typer.Option(0.05, "--fdr-alpha", help="false discovery rate across many comparisons (BH)"),
    seed: int = typer.Option(0, "--seed", help="seed of every random draw"),
    out: Optional[Path] = typer.Option(
        None, "--out", help="output folder (default <configs/paths tables>/compare/<source>_<keys>)"
    ),
    plots: bool = typer.Option(True, "--plots/--no-plots", help="draw the PNG plots"),
    payload: str = typer.Option(
        "measured", "--payload", help="your runs: measured, replayed (bridgebench.payloads.replay) or all (labelled)"
    ),
    as_json: bool = typer.Option(False, "--json", help="print the result as JSON"),
) -> None:
    """Compare releases and runs: published values as rounding intervals with real changes, config changes and change
    points marked; your runs as a ratio with a bootstrap CI, a rank test and a verdict. Writes CSV, Parquet, plots and
    provenance.json."""
    stats = {  # run_compare's statistics options, in the order the reproducing command spells them
        "metric": metric,
        "threshold": threshold,
        "noise_cv": noise_cv,
        "confidence": confidence,
        "n_resamples": resamples,
        "bootstrap": bootstrap,
        "block_length": block_length,
        "min_runs": min_runs,
        "skip_fraction": skip,
        "fdr_alpha": fdr_alpha,
        "seed": seed,
    }
    _compare(keys, source, side_a, side_b, stats, out=out, plots=plots, payload=payload, as_json=as_json)


def _compare(
    keys: Optional[list[str]],
    source: str,
    side_a: Optional[list[str]],
    side_b: Optional[list[str]],
    stats: dict[str, Any],
    *,
    out: Optional[Path],
    plots: bool,
    payload: str,
    as_json: bool,
) -> None:
    """``compare``: select, read your runs (unless ``--source published``), compare
    (:func:`bridgebench.results.compare.run_compare` with ``stats``), write the outputs, print them."""
    from rich.console import Console

    from bridgebench.paths import load_paths
    from bridgebench.results import compare as cmp

    out_folder(out)  # an existing file is refused before any work (rule out_is_folder)
    console = Console(file=sys.stderr, markup=False)
    common = cmp.parse_selection(keys or [])
    sel_a = cmp.parse_selection(" ".join(side_a)) if side_a else None
    sel_b = cmp.parse_selection(" ".join(side_b)) if side_b else None
    paths = load_paths()
    records = None
    which = ""
    with console.status("comparing ...") as status:
        if source != "published":
            records, which = _own_runs(paths.results, payload, console, status)
        status.update("computing ...")
        result = cmp.run_compare(
            source,
            common,
            sel_a=sel_a,
            sel_b=sel_b,
            store_records=records,
            store_root=paths.results,
            **stats,
            command=_command(keys, source, side_a, side_b, stats),
        )
        target = out or cmp.output_dir(paths.tables, result, common, [sel_a, sel_b] if sel_a else [])
        written = cmp.write_outputs(result, target, plots=plots, progress=plain(status.update))
    if as_json:
        typer.echo(json.dumps({**result.to_json(), "files": [str(p) for p in written]}, indent=2, default=str))
        return
    _print(result, stats["threshold"])
    if records:
        sides = [x for x in (sel_a, sel_b) if x is not None]
        _print_vs_predicted(records, sides or [common], which)
    typer.echo(f"wrote {written[0].parent}/: " + ", ".join(p.name for p in written))


def _own_runs(root: Path, payload: str, console, status) -> tuple[list[dict], str]:
    """Your runs from the results store at ``root`` (its scan notes printed), measured or replayed as ``payload``
    asks (never mixed unasked), and which they are.

    Raises:
        bridgebench.results.compare.CompareError: an unknown ``payload``.
    """
    from bridgebench.results import vs_predicted
    from bridgebench.results.compare import CompareError
    from bridgebench.results.store import ResultStore

    plain(status.update)(f"reading the results store {root} ...")
    store = ResultStore(root)
    records = store.records()
    for line in store.last_scan.notes():  # files skipped or counted once, by name (results/store.py)
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    if payload not in vs_predicted.SHOW:
        raise CompareError(f"--payload must be one of {', '.join(vs_predicted.SHOW)}, got {payload!r}")
    records, which = vs_predicted.choose(records, payload)  # replayed and measured never mixed unasked
    console.print(f"your runs: {which}", markup=False, highlight=False)
    return records, which


def _print_vs_predicted(records, selections, which: str) -> None:
    """Your runs of the selections, measured beside what their plans predicted (results/vs_predicted.py)."""
    from rich.console import Console

    from bridgebench.results import vs_predicted
    from bridgebench.results.compare import run_matches

    picked = [r for r in records if any(run_matches(r, s) for s in selections)]
    c = Console(markup=False)
    c.width = max(c.width, 200)
    vs_predicted.print_table(c, picked, f"your runs: measured vs predicted ({which})")


#: the reproducing command's flag of each statistics option
_FLAGS = {"n_resamples": "--resamples", "skip_fraction": "--skip"}


def _command(keys, source, side_a, side_b, stats: dict[str, Any]) -> list[str]:
    """The command line that reproduces this comparison, every option spelled out (for provenance)."""
    cmd = ["bridgebench", "compare", *(keys or []), "--source", source]
    for flag, values in (("--a", side_a), ("--b", side_b)):
        if values:
            cmd += [flag, " ".join(values)]
    for key, value in stats.items():
        if value is not None:
            cmd += [_FLAGS.get(key, "--" + key.replace("_", "-")), str(value)]
    return cmd


def _print(result, threshold: float) -> None:
    from rich.console import Console
    from rich.table import Table

    c = Console(markup=False)
    c.width = max(c.width, 240 if any(h.own for h in result.histories) else 180)
    for h in result.histories:
        t = Table(title=f"{h.key.label()}: {len(h.points)} release(s)", title_justify="left")
        cols = ["release", "formula", "TFLOP/s/GPU", "tokens/s/GPU", "vs previous", "mark", "config changes", "CP"]
        if h.own:
            cols += ["your runs (mean of run medians [CI])", "vs published"]
        for col in cols:
            t.add_column(col, no_wrap=col not in ("config changes", "vs published"))
        own = {o.release: o for o in h.own}
        for i, p in enumerate(h.points):
            s = h.steps[i - 1] if i else None
            row = [
                p.release + ("*" if p.precision_inferred else ""),
                p.formula,
                _fmt_interval(*(p.tflops.value, p.tflops.lo, p.tflops.hi) if p.tflops else (None, 0, 0)),
                _fmt_interval(p.tokens.value, p.tokens.lo, p.tokens.hi),
                f"{s.metric} {s.ratio:.4f} [{s.ratio_lo:.4f}, {s.ratio_hi:.4f}]" if s else "",
                s.mark if s else "",
                (
                    ", ".join(f"{k} {a}→{b}" for k, (a, b) in s.changed_fields.items())
                    + (" (not like-for-like)" if not s.like_for_like else "")
                )
                if s
                else "",
                "◆" if i in h.change_points.indices else "",
            ]
            if h.own:
                o = own.get(p.release)
                row += [
                    (
                        f"{o.value:,.1f} [{o.ci_low:,.1f}, {o.ci_high:,.1f}] n={o.n_runs}"
                        if o and o.ci_low is not None
                        else (f"{o.value:,.1f} n={o.n_runs}" if o else "")
                    ),
                    o.verdict if o else "",
                ]
            t.add_row(*row)
        c.print(t)
        cp = h.change_points
        c.print(
            f"  change points (ruptures PELT, noise CV {cp.params['noise_cv']:.1%}): "
            + (", ".join(cp.releases) or "none")
            + ("" if cp.status == "ok" else f" ({cp.status})")
        )
        for s in h.steps:
            if s.metric == "tokens":
                c.print(f"  {s.release_a}→{s.release_b} compared on tokens/s: {s.metric_reason}")
        for x, y, r in h.own_steps:
            c.print(f"  your runs {y} vs {x}: {_verdict_text(r)}")
    for note in result.notes:  # rows left out of every history (counted, with why), inferred precisions
        c.print(f"note: {note}", highlight=False)
    if result.histories:
        c.print(
            f"marks: ▲/▼ real change (the ratio's rounding interval lies beyond 1 ± {threshold:.1%}); "
            f"= within rounding; ~ beyond rounding but within ±{threshold:.1%}; "
            "† not like-for-like (fields listed); ◆ change point. "
            "Ratios: TFLOP/s where both releases count FLOPs the same, tokens/s otherwise."
        )
    if result.sides is not None:
        _print_sides(c, result.sides)
    for h in result.own:
        c.print(f"your runs {'/'.join(h.key)} ({h.metric}):")
        for x, y, r in h.steps:
            c.print(f"  {y} vs {x}: {_verdict_text(r)}")


def _print_sides(c: Any, sd: Any) -> None:
    """Two sides of own runs (``--a`` / ``--b``): what each holds, skipped and flagged records, and the B vs A table
    with each comparison's verdict."""
    from rich.table import Table

    from bridgebench.results.compare import side_statistic

    c.print(f"A: {sd.a.selection.text()}  ({len(sd.a.records)} runs: {', '.join(sd.a.record_ids)})")
    c.print(f"B: {sd.b.selection.text()}  ({len(sd.b.records)} runs: {', '.join(sd.b.record_ids)})")
    for s in (sd.a, sd.b):
        c.print(f"{s.name}: {s.summary}")
        for why in s.skipped:
            c.print(f"  skipped {why}")
        for why in s.flags:
            c.print(f"  flagged {why}")
    stat = side_statistic(sd.comparisons[0][1].params) if sd.comparisons else "mean of run medians"
    t = Table(title=f"B vs A, metric {sd.metric}: A and B = {stat}", title_justify="left")
    for col in (
        "comparison",
        f"A ({stat})",
        f"B ({stat})",
        "ratio B/A",
        "CI",
        "Mann-Whitney p (runs)",
        "q (FDR)",
        "verdict",
    ):
        t.add_column(col, no_wrap=True)
    for label, r in sd.comparisons:
        t.add_row(
            label,
            f"{r.side_values[0]:.4g}",
            f"{r.side_values[1]:.4g}",
            f"{r.ratio:.4f}",
            f"[{r.ci_low:.4f}, {r.ci_high:.4f}]" if r.ci_low is not None else "-",
            f"{r.mannwhitney_runs_p:.3g}" if r.mannwhitney_runs_p is not None else "-",
            f"{r.q_value:.3g}" if r.q_value is not None else "-",
            r.verdict,
        )
    c.print(t)
    for label, r in sd.comparisons:
        c.print(f"  {label}: {_verdict_text(r)}")


def _verdict_text(r) -> str:
    from bridgebench.results.compare import side_statistic

    if r.verdict == "insufficient" or r.ci_low is None:  # too few runs, or no spread to test against
        return f"{r.verdict}: {r.reason}" if r.verdict != "insufficient" else r.reason
    return (
        f"{r.verdict}: ratio {r.ratio:.4f} (of the sides' {side_statistic(r.params)}), "
        f"{r.params['confidence']:.0%} CI [{r.ci_low:.4f}, {r.ci_high:.4f}], "
        f"threshold {r.params['threshold']:.1%}, {r.n_runs[0]} vs {r.n_runs[1]} runs"
        + (f", Mann-Whitney p (run medians) {r.mannwhitney_runs_p:.3g}" if r.mannwhitney_runs_p is not None else "")
        + (
            f", FDR q {r.q_value:.3g} (alpha {r.params['fdr_alpha']:g}, {r.params['fdr_tests']} comparisons)"
            if r.q_value is not None
            else ""
        )
    )
