"""Analysis commands: ``flops``, ``table``, ``check-published``."""

from __future__ import annotations

import json
from typing import Any, Optional

import typer

from bridgebench.cli.app import OVERRIDES, app, source_option
from bridgebench.errors import BridgebenchError


@app.command()
def flops(
    overrides: Optional[list[str]] = OVERRIDES,
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """FLOPs per token and per step (model, and Newton-Schulz for Muon) of one composed run."""
    from bridgebench.config import rules
    from bridgebench.config.compose import compose, run_facts
    from bridgebench.config.run_flops import ns_policy, parallelism, step_flops
    from bridgebench.model.newton_schulz import ns_load

    cfg = compose(overrides or [])
    facts = run_facts(cfg)
    rules.validate(rules.Point.from_config(cfg))  # FLOPs of a layout Megatron-Core cannot run (num_gpus=7) mean nothing
    tp = facts.parallel["tensor_model_parallel_size"] or 1
    br = step_flops(facts)
    out = {
        "model": facts.model.name,
        "formula": br.formula,
        "release": facts.release["name"],
        "seq_length": br.seq_length,
        "global_batch_size": br.batch_size,
        "tensor_model_parallel_size": tp,
        "tokens_per_step": br.tokens,
        "model_flops_per_token": float(br.per_token),
        "model_flops_per_step": float(br.total),
        "model_flops_per_token_breakdown": {k: float(v / br.tokens) for k, v in br.terms.items()},
        "optimizer": facts.optimizer["optimizer"],
        "num_gpus": facts.num_gpus,
    }
    if facts.is_muon:
        policy = ns_policy(facts)
        load = ns_load(facts.model, parallelism(facts), policy)
        out |= {
            "newton_schulz_flops_per_step": load.total,
            "newton_schulz_flops_per_step_per_gpu_mean": load.per_gpu_mean,
            "newton_schulz_flops_per_step_per_gpu_busiest": load.per_gpu_max,
            "newton_schulz_flops_per_replica": load.per_replica,
            "newton_schulz_flops_by_family": load.by_family,
            "newton_schulz_matrices": load.num_matrices,
            "newton_schulz_policy": {
                "kernel": policy.kernel,
                "tp_mode": policy.tp_mode,
                "layer_wise": policy.layer_wise,
                "split_qkv": policy.split_qkv,
                "num_ns_steps": policy.num_ns_steps,
            },
        }
    if as_json:
        typer.echo(json.dumps(out, indent=2))
        return
    typer.echo(
        f"{out['model']}  seq_length={out['seq_length']}  GBS={out['global_batch_size']}  TP={tp}  "
        f"formula={out['formula']} (release {out['release']})"
    )
    typer.echo(f"  model FLOPs/token : {out['model_flops_per_token']:.6e}")
    for k, v in out["model_flops_per_token_breakdown"].items():
        typer.echo(f"    {k:<24s}{v:.6e}")
    typer.echo(f"  model FLOPs/step  : {out['model_flops_per_step']:.6e}  ({out['tokens_per_step']} tokens)")
    if facts.is_muon:
        typer.echo(
            f"  NS FLOPs/step     : {out['newton_schulz_flops_per_step']:.6e} over {facts.num_gpus} GPUs "
            f"(mean/GPU {out['newton_schulz_flops_per_step_per_gpu_mean']:.4e}, busiest "
            f"{out['newton_schulz_flops_per_step_per_gpu_busiest']:.4e}); policy {out['newton_schulz_policy']}"
        )


@app.command()
def table(
    overrides: Optional[list[str]] = OVERRIDES,
    source: str = source_option(
        "runs: your runs from the results store; published: NVIDIA's figures; auto: your runs where there are any"
    ),
    as_json: bool = typer.Option(False, "--json", help="print the rows as JSON instead of a table"),
    quality: str = typer.Option(
        "steady", "--quality", help="window qualities of your runs to use: steady (default), short, excerpt, incomplete"
    ),
) -> None:
    """Reproduce the blog's Muon vs AdamW Table 1 and write it under configs/paths' tables folder (default
    results/tables/table1/: CSV, Markdown, PNG; BRIDGEBENCH_TABLES moves it). Tracked files are never written."""
    from rich.console import Console

    from bridgebench.results.table1 import (
        independent_gaps,
        ns_policy_grid,
        reproduce,
        write_outputs,
    )

    console = Console(stderr=as_json, markup=False)
    console.width = max(console.width, 175)  # the table needs ~175 columns; rich wraps a narrower terminal anyway
    if source not in ("auto", "runs", "published"):
        raise BridgebenchError(f"--source must be runs, published or auto, got {source!r}")
    measured = _measured_runs(console, source, quality) if source != "published" else None
    with console.status("composing runs and counting FLOPs ..."):
        t = reproduce(tuple(overrides or ()), measured)
        grid = ns_policy_grid(tuple(overrides or ()))
        paths = write_outputs(t, grid)
    if as_json:
        typer.echo(t.to_json(orient="records", indent=2))
        return
    rt = _table1_rich(t)
    console.print(rt)
    console.print(
        "(blog values in parentheses)  step-time sources: "
        + "; ".join(f"{r.model}/{r.optimizer}: {r.step_time_source}" for r in t.itertuples())
    )
    console.print(
        "row proves: independent = the step time is a measurement the blog did not use, so model TFLOP/s is a "
        "prediction checked against the blog; blog-derived = computed from the blog's own model TFLOP/s (equal by "
        "construction: only NS and MFU are bridgebench's)"
    )
    for gap in independent_gaps(t):
        console.print(f"independent check: {gap}")
    best = grid.assign(err=grid.filter(like="_delta_pct").abs().max(axis=1)).sort_values("err").iloc[0]
    console.print(
        f"NS policies reproducing both blog NS figures within 5%: {int(grid.reproduces_both.sum())} of "
        f"{len(grid)}; closest: {best.kernel}, layer_wise={best.layer_wise}, split_qkv={best.split_qkv}, "
        f"{best.statistic} (worst delta {best.err:.1f}%)"
    )
    console.print("wrote " + ", ".join(str(p) for p in paths))


def _measured_runs(console: Any, source: str, quality: str) -> Any:
    """Your runs' step times for Table 1 from the results store (windows of the ``quality`` list), with what was
    skipped said on ``console``.

    Raises:
        BridgebenchError: a quality that is not one, or ``--source runs`` with no usable run.
    """
    from bridgebench.launch.collect import default_store
    from bridgebench.logs.steady import QUALITIES
    from bridgebench.results.table1 import measured_step_times

    wanted = tuple(q.strip() for q in quality.split(",") if q.strip())
    if not wanted or set(wanted) - set(QUALITIES):
        raise BridgebenchError(f"--quality must be a comma list of {', '.join(QUALITIES)}, got {quality!r}")
    store = default_store()
    records = store.records(kind="pretrain")
    for line in store.last_scan.notes():  # files skipped or counted once, by name (results/store.py)
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    replayed = len(store.records(kind="replay"))
    if replayed:  # never mixed into a table of measurements (bridgebench.payloads.replay)
        console.print(
            f"your runs: measured only; {replayed} replayed record(s) (payload: replay, step times from a "
            "published table) are not used (`bridgebench report --payload replayed` shows them)"
        )
    measured = measured_step_times(records, wanted)
    other = len(measured_step_times(records, QUALITIES + (None,))) - len(measured)
    if not records:
        console.print(
            f"your runs: none in the results store ({store.root}); every step time below is NVIDIA's "
            "(perf tables or the blog)"
        )
    else:
        console.print(
            f"your runs: {len(measured)} used (only windows of quality {'/'.join(wanted)})"
            + (f"; {other} run(s) with other window qualities skipped (see --quality)" if other > 0 else "")
        )
    if source == "runs" and not measured:
        raise BridgebenchError(
            "--source runs: the results store has no completed pretrain runs with a "
            f"{'/'.join(wanted)} window (submit experiment=table1 on a GPU cluster, then `bridgebench collect`;"
            " --quality widens the choice)"
        )
    return measured


def _table1_rich(t: Any) -> Any:
    """Table 1 as a rich table: per model and optimizer the step time, tokens/s, model / NS / total TFLOP/s per GPU
    (blog values in parentheses), the delta and MFU."""
    from rich.table import Table

    rt = Table(title="Table 1 reproduced: Muon vs AdamW, GB300 MXFP8 (TFLOP/s per GPU)")
    for col in (
        "model",
        "optimizer",
        "row proves",
        "step s",
        "tokens/s/GPU",
        "model",
        "NS",
        "NS busiest",
        "total",
        "blog total",
        "delta",
        "MFU bf16",
        "MFU mxfp8",
    ):
        rt.add_column(col, justify="right", no_wrap=True)
    for r in t.itertuples():
        rt.add_row(
            r.model,
            r.optimizer,
            {"independent check": "independent", "derived from the blog": "blog-derived"}.get(r.check, r.check),
            f"{r.step_time_s:.3f}",
            f"{r.tokens_per_sec_per_gpu:,.0f}",
            f"{r.model_tflops_per_gpu:.1f} ({r.published_model_tflops_per_gpu:.0f})",
            f"{r.newton_schulz_tflops_per_gpu:.1f} ({r.published_newton_schulz_tflops_per_gpu:.0f})",
            f"{r.newton_schulz_tflops_per_gpu_busiest:.1f}",
            f"{r.total_tflops_per_gpu:.1f}",
            f"{r.published_total_tflops_per_gpu:.0f}",
            f"{r.delta_total_pct:+.1f}%",
            f"{r.mfu_bf16:.1%}",
            f"{r.mfu_precision:.1%}",
        )
    return rt


@app.command("check-published")
def check_published_cmd(
    models: bool = typer.Option(
        False,
        "--models",
        help="also check the time and memory models on every row (held-out release and configuration; ~4 min)",
    ),
    calibration: str = typer.Option("default", "--calibration", help="configs/calibration/<NAME>.yaml (--models)"),
    as_json: bool = typer.Option(False, "--json", help="print the summary as JSON"),
) -> None:
    """FLOPs/token x tokens/s/GPU vs published model TFLOP/s/GPU over every published row of a known model; with
    --models, every row's TFLOP/s predicted by the time model calibrated WITHOUT the row's release, its band, and
    the memory model's verdict (every published row ran, so one that does not fit is a false prune)."""
    import dataclasses

    from bridgebench.paths import load_paths
    from bridgebench.validation.published_check import check_published

    df, summary = check_published()
    # generated output goes to configs/paths' tables folder, never over the tracked results/reference/ files
    tables = load_paths().tables
    out = tables / "flops_check.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".csv.tmp")
    df.to_csv(tmp, index=False, float_format="%.6g")
    tmp.replace(out)
    result = {"flops": dataclasses.asdict(summary)}
    mdf = msum = None
    if models:
        from bridgebench.validation.published_models import check_models

        mdf, msum = check_models(calibration=calibration, progress=lambda msg: typer.echo(msg, err=True))
        mout = tables / "models_check.csv"
        tmp = mout.with_suffix(".csv.tmp")
        mdf.to_csv(tmp, index=False, float_format="%.6g")
        tmp.replace(mout)
        result["models"] = {**dataclasses.asdict(msum), "per_row": str(mout)}
    if as_json:
        typer.echo(json.dumps(result if models else result["flops"], indent=2))
        return
    typer.echo(f"rows checked           : {summary.rows}")
    typer.echo(f"within rounding bound  : {summary.within_rounding}")
    typer.echo(f"max |error|            : {summary.max_abs_error:.4%}")
    typer.echo(f"median |error|         : {summary.median_abs_error:.4%}")
    typer.echo(
        f"outside rounding bound : {summary.rows_outside}, of which {summary.rows_outside_in_inconsistent_groups}"
        " belong to groups whose published rows fit no constant FLOPs/token"
    )
    typer.echo(f"per-row results        : {out}")
    if models and mdf is not None and msum is not None:
        _print_models(mdf, msum)
        typer.echo(f"per-row results        : {result['models']['per_row']}")


def _print_models(mdf: Any, msum: Any) -> None:
    """``check-published --models`` in words: the per-row table (rich), the time model's held-out errors and band
    coverage, the memory model's verdicts and the rows judged with their release launcher's sizes."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(markup=False)
    console.width = max(console.width, 150)
    t = Table(title="time and memory models vs published rows (time: calibration fitted without the row's release)")
    for c in ("release", "model", "GPU", "prec", "GPUs", "TP", "PP", "VP", "CP", "EP", "MBS", "published",
              "predicted", "error", "band", "memory GB", "usable GB", "fits"):  # fmt: skip
        t.add_column(c, justify="left" if c in ("release", "model", "GPU", "prec") else "right", no_wrap=True)
    for r in mdf.itertuples():
        pred = (
            "-"
            if r.predicted_tflops != r.predicted_tflops or r.predicted_tflops is None
            else f"{r.predicted_tflops:.0f}"
        )
        err = "-" if r.rel_error != r.rel_error or r.rel_error is None else f"{r.rel_error:+.1%}"
        t.add_row(
            r.release, r.model, r.system, r.precision, str(r.num_gpus), str(r.tp), str(r.pp), str(r.vp or "-"),
            str(r.cp), str(r.ep), str(r.mbs), f"{r.published_tflops:.0f}", pred, err, f"+-{r.band:.0%}",
            f"{r.memory_gb:.0f}", f"{r.usable_gb:.0f}", "yes" if r.fits else Text("NO", style="red"),
        )  # fmt: skip
    console.print(t)
    typer.echo(
        f"time model: {msum.predicted} of {msum.rows} rows predicted with their release held out; MAPE "
        f"{msum.mape:.1%}, median |error| {msum.median_abs_error:.1%}, max {msum.max_abs_error:.1%}; "
        f"{msum.within_band} within their band"
    )
    typer.echo("  MAPE by held-out release: " + ", ".join(f"{k} {v:.1%}" for k, v in msum.mape_by_release.items()))
    typer.echo(
        f"  leave one configuration out (every release of a configuration held out together): MAPE "
        f"{msum.loco_mape:.1%}, median |error| {msum.loco_median_abs_error:.1%}; by distance from the fit: "
        + ", ".join(f"{k} {v:.1%}" for k, v in msum.loco_mape_by_distance.items())
    )
    for name, label in (("loro", "release held out"), ("loco", "configuration held out")):
        cov = msum.coverage.get(name, {})
        typer.echo(
            f"  band coverage, {label}: " + ", ".join(f"{cov[lv]:.0%} inside the {lv} % band" for lv in sorted(cov))
        )
    typer.echo(
        f"memory model: {msum.fits} of {msum.rows} published rows fit; {msum.false_prunes} false prunes "
        f"(every published row ran); {msum.inconsistent} printed configuration(s) cannot have run as printed"
    )
    for r in mdf[~mdf["fits"]].itertuples():
        tag = "cannot have run as printed" if r.inconsistent else "FALSE PRUNE"
        typer.echo(f"  {r.release} {r.model} {r.system} {r.precision}: {tag}: {r.memory_error}")
    replaced = mdf[mdf["printed_replaced"].notna()]
    if len(replaced):
        typer.echo(
            f"  {len(replaced)} row(s) judged with their release launcher's sizes, not the printed ones "
            "(validation/published_settings.yaml names the source):"
        )
        for r in replaced.itertuples():
            verdict = "fits" if r.fits else "does not fit"
            typer.echo(f"    {r.release} {r.model} {r.system} {r.precision}: {r.printed_replaced}; {verdict}")
