"""The ``bridgebench`` command (typer). Each subcommand takes Hydra overrides as trailing arguments.

Heavy imports (pandas, matplotlib, megatron) happen inside the commands that need them, so ``bridgebench flops``
starts fast and never imports torch or megatron.
"""

from __future__ import annotations

import json
import sys
import warnings
from typing import Optional

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Benchmark recipes and analysis for Megatron-Bridge pretraining (Muon vs AdamW and more).")

OVERRIDES = typer.Argument(None, help="Hydra overrides, e.g. model=kimi_k2 optimizer=muon model.seq_length=4096")


def _fail(err: Exception) -> None:
    typer.secho(f"error: {err}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code=2)


@app.command()
def flops(overrides: Optional[list[str]] = OVERRIDES,
          as_json: bool = typer.Option(False, "--json", help="print one JSON object")) -> None:
    """FLOPs per token and per step (model, and Newton-Schulz for Muon) of one composed run."""
    from analysis.flops import UnsupportedModelError
    from analysis.newton_schulz import ns_load
    from analysis.run_flops import ns_policy, parallelism, step_flops
    from bridgebench.config import ConfigError, compose, run_facts

    try:
        facts = run_facts(compose(overrides or []))
        tp = facts.parallel["tensor_model_parallel_size"] or 1
        br = step_flops(facts)
        out = {
            "model": facts.model.name, "formula": br.formula, "release": facts.release["name"],
            "seq_length": br.seq_length, "global_batch_size": br.batch_size, "tensor_model_parallel_size": tp,
            "tokens_per_step": br.tokens,
            "model_flops_per_token": float(br.per_token), "model_flops_per_step": float(br.total),
            "model_flops_per_token_breakdown": {k: float(v / br.tokens) for k, v in br.terms.items()},
            "optimizer": facts.optimizer["optimizer"], "num_gpus": facts.num_gpus,
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
                "newton_schulz_policy": {"kernel": policy.kernel, "tp_mode": policy.tp_mode,
                                         "layer_wise": policy.layer_wise, "split_qkv": policy.split_qkv,
                                         "num_ns_steps": policy.num_ns_steps},
            }
    except (ConfigError, UnsupportedModelError, ValueError) as err:
        _fail(err)
    if as_json:
        typer.echo(json.dumps(out, indent=2))
        return
    typer.echo(f"{out['model']}  seq_length={out['seq_length']}  GBS={out['global_batch_size']}  TP={tp}  "
               f"formula={out['formula']} (release {out['release']})")
    typer.echo(f"  model FLOPs/token : {out['model_flops_per_token']:.6e}")
    for k, v in out["model_flops_per_token_breakdown"].items():
        typer.echo(f"    {k:<24s}{v:.6e}")
    typer.echo(f"  model FLOPs/step  : {out['model_flops_per_step']:.6e}  ({out['tokens_per_step']} tokens)")
    if facts.is_muon:
        typer.echo(f"  NS FLOPs/step     : {out['newton_schulz_flops_per_step']:.6e} over {facts.num_gpus} GPUs "
                   f"(mean/GPU {out['newton_schulz_flops_per_step_per_gpu_mean']:.4e}, busiest "
                   f"{out['newton_schulz_flops_per_step_per_gpu_busiest']:.4e}); policy {out['newton_schulz_policy']}")


@app.command()
def table(overrides: Optional[list[str]] = OVERRIDES,
          source: str = typer.Option("auto", "--source",
                                     help="runs: your runs from the results store; published: NVIDIA's figures; "
                                          "auto: your runs where there are any"),
          as_json: bool = typer.Option(False, "--json", help="print the rows as JSON instead of a table")) -> None:
    """Reproduce the blog's Muon vs AdamW Table 1 and write results/table1/ (CSV, Markdown, PNG)."""
    from rich.console import Console
    from rich.table import Table

    from analysis.table1 import measured_step_times, ns_policy_grid, reproduce, write_outputs
    from bridgebench.config import ConfigError

    console = Console(stderr=as_json)
    console.width = max(console.width, 150)  # the table needs ~150 columns; rich wraps a narrower terminal anyway
    try:
        if source not in ("auto", "runs", "published"):
            raise ValueError(f"--source must be runs, published or auto, got {source!r}")
        measured = None
        if source != "published":
            from launch.collect import default_store

            measured = measured_step_times(default_store().records(kind="pretrain"))
            if source == "runs" and not measured:
                raise ValueError("--source runs: the results store has no completed pretrain runs (submit "
                                 "experiment=table1 on a GPU cluster, then `bridgebench collect`)")
        with console.status("composing runs and counting FLOPs ..."):
            t = reproduce(tuple(overrides or ()), measured)
            grid = ns_policy_grid(tuple(overrides or ()))
            paths = write_outputs(t, grid)
    except (ConfigError, ValueError) as err:
        _fail(err)
    if as_json:
        typer.echo(t.to_json(orient="records", indent=2))
        return
    rt = Table(title="Table 1 reproduced: Muon vs AdamW, GB300 MXFP8 (TFLOP/s per GPU)")
    for col in ("model", "optimizer", "step s", "tokens/s/GPU", "model", "NS", "NS busiest", "total", "blog total",
                "delta", "MFU bf16", "MFU mxfp8"):
        rt.add_column(col, justify="right", no_wrap=True)
    for r in t.itertuples():
        rt.add_row(r.model, r.optimizer, f"{r.step_time_s:.3f}", f"{r.tokens_per_sec_per_gpu:,.0f}",
                   f"{r.model_tflops_per_gpu:.1f} ({r.published_model_tflops_per_gpu:.0f})",
                   f"{r.newton_schulz_tflops_per_gpu:.1f} ({r.published_newton_schulz_tflops_per_gpu:.0f})",
                   f"{r.newton_schulz_tflops_per_gpu_busiest:.1f}",
                   f"{r.total_tflops_per_gpu:.1f}", f"{r.published_total_tflops_per_gpu:.0f}",
                   f"{r.delta_total_pct:+.1f}%", f"{r.mfu_bf16:.1%}", f"{r.mfu_precision:.1%}")
    console.print(rt)
    console.print("(blog values in parentheses)  step-time sources: " +
                  "; ".join(f"{r.model}/{r.optimizer}: {r.step_time_source}" for r in t.itertuples()))
    best = grid.assign(err=grid.filter(like="_delta_pct").abs().max(axis=1)).sort_values("err").iloc[0]
    console.print(f"NS policies reproducing both blog NS figures within 5%: {int(grid.reproduces_both.sum())} of "
                  f"{len(grid)}; closest: {best.kernel}, layer_wise={best.layer_wise}, split_qkv={best.split_qkv}, "
                  f"{best.statistic} (worst delta {best.err:.1f}%)")
    console.print("wrote " + ", ".join(str(p) for p in paths))


@app.command()
def plan(overrides: Optional[list[str]] = OVERRIDES,
         out: Optional[str] = typer.Option(None, "--out", help="plan directory (default plans/<experiment>-<time>)"),
         multirun: bool = typer.Option(False, "-m", "--multirun", help="sweep comma-separated override values"),
         as_json: bool = typer.Option(False, "--json", help="print the runs as JSON")) -> None:
    """Validate every run of an experiment or sweep, build its Megatron-Bridge ConfigContainer, and write the plan
    (config.yaml, megatron_bridge.yaml, submit.sh per run). Nothing is submitted; bad input writes nothing."""
    from pathlib import Path

    from rich.console import Console
    from rich.table import Table

    from bridgebench.config import ConfigError, has_sweep

    console = Console(stderr=True)
    console.width = max(console.width, 150)
    overrides = overrides or []
    try:
        if has_sweep(overrides) and not multirun:
            raise ConfigError("an override sweeps values (a=x,y): add -m / --multirun to plan one run per value")
        warnings.filterwarnings("ignore")  # Megatron's import-time and config warnings; errors still raise
        with console.status("loading Megatron-Bridge ..."):
            from launch.plan import plan as make_plan
        with console.status("planning ...") as status:
            out_dir, runs = make_plan(overrides, Path(out) if out else None, progress=status.update)
    except (ConfigError, ValueError) as err:
        _fail(err)
    if as_json:
        import dataclasses

        typer.echo(json.dumps({"plan": str(out_dir), "runs": [dataclasses.asdict(r) for r in runs]}, indent=2))
        return
    t = Table(title=f"plan {out_dir}")
    for col in ("run", "GPUs", "nodes", "TP", "PP", "VP", "CP", "EP", "ETP", "DP", "MBS", "GBS", "hash",
                "model FLOPs/step", "NS FLOPs/step"):
        t.add_column(col, justify="right", no_wrap=True)
    for r in runs:
        t.add_row(r.name, str(r.num_gpus), str(r.nodes), str(r.tp), str(r.pp), str(r.vp or "-"), str(r.cp),
                  str(r.ep), str(r.etp or "-"), str(r.dp), str(r.mbs), str(r.gbs), r.config_hash,
                  f"{r.model_flops_per_step:.4e}", f"{r.newton_schulz_flops_per_step:.4e}")
    out_console = Console()
    out_console.width = max(out_console.width, 190)
    out_console.print(t)
    if any("muon" in r.optimizer for r in runs):
        out_console.print(
            "muon runs: configs/optimizer/muon.yaml sets optimizer.use_distributed_optimizer=false, "
            "ddp.use_distributed_optimizer=false, ddp.overlap_param_gather=false, mixed_precision.fp8_param_gather="
            "false and mixed_precision.reuse_grad_buf_for_mxfp8_param_ag=false, because dist_muon's layer-wise "
            "distributed optimizer replaces Megatron-Core's DistributedOptimizer and its param all-gather "
            "(bridgebench/rules.py muon_* rules reject overrides that turn them back on)")
    skipped = sorted({s for r in runs for s in r.skipped_checks})
    if skipped:
        out_console.print("validated off-GPU; checks that need the compute node were skipped: " + "; ".join(skipped))


def _cluster_cfg(overrides: list[str]):
    from bridgebench.config import compose

    return compose(overrides)


@app.command()
def submit(overrides: Optional[list[str]] = OVERRIDES,
           repeats: int = typer.Option(1, "--repeats", min=1, help="submissions per planned run"),
           wait: bool = typer.Option(False, "--wait", help="wait until every attempt finished (retries included)"),
           timeout: float = typer.Option(3600, "--timeout", help="seconds to wait at most"),
           multirun: bool = typer.Option(False, "-m", "--multirun", help="sweep comma-separated override values"),
           as_json: bool = typer.Option(False, "--json", help="print the attempts as JSON")) -> None:
    """Plan and submit every run through nemo-run's SlurmExecutor; record each in the job ledger."""
    from rich.console import Console

    from bridgebench.config import ConfigError, has_sweep

    warnings.filterwarnings("ignore")
    console = Console(stderr=True)
    overrides = overrides or []
    try:
        if has_sweep(overrides) and not multirun:
            raise ConfigError("an override sweeps values (a=x,y): add -m / --multirun")
        from launch import submit as sub

        with console.status("planning and submitting ...") as status:
            attempts = sub.submit(overrides, repeats=repeats, progress=status.update)
            if wait:
                attempts = sub.wait(_cluster_cfg(overrides), timeout_s=timeout, progress=status.update)
    except (ConfigError, ValueError, RuntimeError) as err:
        _fail(err)
    _print_attempts(attempts, as_json)


def _print_attempts(attempts, as_json: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    from launch.submit import json_attempts

    if as_json:
        typer.echo(json_attempts(attempts))
        return
    t = Table(title="job ledger")
    for col in ("run", "attempt", "name", "type", "SLURM job", "state", "exit", "reason", "nodes", "collected"):
        t.add_column(col, no_wrap=col != "reason")
    for a in attempts:
        t.add_row(a.run_id, str(a.attempt), a.name, a.job_type, a.slurm_job_id or "-", a.state, a.exit_code or "",
                  (a.reason or "")[:80], a.node_list or "", "yes" if a.collected else "")
    c = Console()
    c.width = max(c.width, 170)
    c.print(t)


@app.command()
def status(overrides: Optional[list[str]] = OVERRIDES,
           as_json: bool = typer.Option(False, "--json", help="print the attempts as JSON")) -> None:
    """Refresh the ledger from SLURM accounting (sacct), retry known-flaky failures, and show it."""
    from launch import submit as sub

    try:
        attempts = sub.refresh(_cluster_cfg(overrides or []))
    except (ValueError, RuntimeError) as err:
        _fail(err)
    _print_attempts(attempts, as_json)


@app.command()
def cancel(run_ids: Optional[list[str]] = typer.Argument(None, help="run ids (default: every unfinished run)"),
           cluster: str = typer.Option("local", "--cluster", help="cluster config name")) -> None:
    """scancel unfinished attempts and mark them CANCELLED in the ledger."""
    from launch import submit as sub

    try:
        done = sub.cancel(_cluster_cfg([f"cluster={cluster}"]), run_ids or None)
    except (ValueError, RuntimeError) as err:
        _fail(err)
    typer.echo(f"cancelled {len(done)} attempt(s): " + ", ".join(f"{a.run_id}/a{a.attempt}" for a in done))


@app.command()
def collect(as_json: bool = typer.Option(False, "--json", help="print a JSON summary")) -> None:
    """Parse finished jobs' logs into records in the results store (idempotent)."""
    from rich.console import Console

    from launch.collect import collect as do_collect

    with Console(stderr=True).status("collecting ...") as st:
        added = do_collect(progress=st.update)
    typer.echo(json.dumps({"added": added}) if as_json else f"added {added} new record(s) to the results store")


logs_app = typer.Typer(help="Training-log tools.")
app.add_typer(logs_app, name="logs")


@logs_app.command("parse")
def logs_parse(files: list[str] = typer.Argument(..., help="log files"),
               warmup: Optional[int] = typer.Option(None, "--warmup", help="steps skipped as warm-up"),
               as_json: bool = typer.Option(False, "--json", help="one JSON object per file")) -> None:
    """Parse Megatron-Bridge / Megatron-LM / NeMo 2 logs: outcome class and steady-state step time and TFLOP/s."""
    from pathlib import Path

    from launch.logparse import parse_log, to_json

    out = []
    for f in files:
        if not Path(f).is_file():
            _fail(FileNotFoundError(f"no such log file: {f}"))
        parsed = parse_log(f) if warmup is None else parse_log(f, warmup_steps=warmup)
        out.append(to_json(parsed) | {"file": f})
    if as_json:
        typer.echo(json.dumps(out if len(out) > 1 else out[0], indent=2, default=str))
        return
    for j in out:
        typer.echo(f"{j['file']}: format={j['format']} outcome={j['outcome']} steps={j['steps']} "
                   f"step_time_s={j['step_time_s']} tflops_per_gpu={j['tflops_per_gpu']}")


@app.command()
def report(as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """Measured optimizer-step benchmark results from the store: Muon vs AdamW step ratio and NS FLOP/s."""
    from rich.console import Console
    from rich.table import Table

    from launch.collect import default_store

    recs = [r for r in default_store().records(kind="optstep") if r.get("optstep")]
    if not recs:
        _fail(ValueError("no optimizer-step results in the store: run `bridgebench submit experiment=optstep_local "
                         "--wait` and `bridgebench collect` first"))
    rows = []
    for r in recs:
        for fam, v in {**r["optstep"]["families"], "total": r["optstep"]["total"]}.items():
            rows.append({"record": r["record_id"], "model": r.get("model"), "device": r["optstep"].get("device"),
                         "family": fam, **v})
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    t = Table(title="optimizer-step benchmark (measured)")
    for col in ("record", "model", "device", "family", "matrices", "Muon step s", "AdamW step s", "Muon/AdamW",
                "NS s", "NS GFLOP/s"):
        t.add_column(col, justify="right", no_wrap=True)
    for r in rows:
        t.add_row(r["record"], str(r["model"]), str(r["device"]), r["family"], str(r.get("matrices")),
                  f"{r['muon_step_s']:.4g}", f"{r['adamw_step_s']:.4g}", f"{r['ratio']:.2f}",
                  f"{r['ns_time_s']:.4g}", f"{r['ns_flops_per_s'] / 1e9:.2f}")
    c = Console()
    c.width = max(c.width, 150)
    c.print(t)


@app.command("check-published")
def check_published_cmd(as_json: bool = typer.Option(False, "--json", help="print the summary as JSON")) -> None:
    """FLOPs/token x tokens/s/GPU vs published model TFLOP/s/GPU over every published row of a known model."""
    import dataclasses

    from analysis.published_check import check_published
    from bridgebench.config import REPO_ROOT

    df, summary = check_published()
    out = REPO_ROOT / "results" / "reference" / "flops_check.csv"
    df.to_csv(out, index=False, float_format="%.6g")
    if as_json:
        typer.echo(json.dumps(dataclasses.asdict(summary), indent=2))
        return
    typer.echo(f"rows checked           : {summary.rows}")
    typer.echo(f"within rounding bound  : {summary.within_rounding}")
    typer.echo(f"max |error|            : {summary.max_abs_error:.4%}")
    typer.echo(f"median |error|         : {summary.median_abs_error:.4%}")
    typer.echo(f"outside rounding bound : {summary.rows_outside}, of which {summary.rows_outside_in_inconsistent_groups}"
               " belong to groups whose published rows fit no constant FLOPs/token")
    typer.echo(f"per-row results        : {out}")


def main() -> None:  # entry point
    app(prog_name="bridgebench")


if __name__ == "__main__":
    sys.exit(main())
