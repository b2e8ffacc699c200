"""Run commands: ``plan``, ``submit``, ``status``, ``cancel``, ``collect`` (``report``: cli/report.py)."""

from __future__ import annotations

import json
import sys
from typing import Any, Optional

import typer

from bridgebench.cli.app import OVERRIDES, app
from bridgebench.cli.richsafe import plain


@app.command()
def plan(
    overrides: Optional[list[str]] = OVERRIDES,
    out: Optional[str] = typer.Option(None, "--out", help="plan directory (default plans/<experiment>-<time>)"),
    multirun: bool = typer.Option(False, "-m", "--multirun", help="sweep comma-separated override values"),
    as_json: bool = typer.Option(False, "--json", help="print the runs as JSON"),
) -> None:
    """Validate every run of an experiment or sweep, build its Megatron-Bridge ConfigContainer, and write the plan
    (config.yaml, megatron_bridge.yaml, submit.sh per run). Nothing is submitted; bad input writes nothing."""
    from pathlib import Path

    from rich.console import Console
    from rich.table import Table

    from bridgebench.config.compose import ConfigError, has_sweep
    from bridgebench.model.optimizer import family

    console = Console(file=sys.stderr, markup=False)  # values are data, never rich markup
    console.width = max(console.width, 150)
    overrides = overrides or []
    if has_sweep(overrides) and not multirun:
        raise ConfigError("an override sweeps values (a=x,y): add -m / --multirun to plan one run per value")
    with console.status("loading Megatron-Bridge ..."):
        from bridgebench.launch.plan import plan as make_plan
    invalid = []  # with -m, invalid runs are reported (rule and message) and the valid ones planned
    on_invalid = invalid.append if multirun else None
    with console.status("planning ...") as status:
        out_dir, runs = make_plan(
            overrides, Path(out) if out else None, progress=plain(status.update), on_invalid=on_invalid
        )
    if as_json:
        import dataclasses

        typer.echo(
            json.dumps(
                {
                    "plan": str(out_dir),
                    "runs": [r.to_json() for r in runs],
                    "invalid": [dataclasses.asdict(r) for r in invalid],
                },
                indent=2,
            )
        )
        return
    if invalid:
        bad = Table(title=f"{len(invalid)} invalid run(s), not planned")
        for col in ("run", "rule", "why"):
            bad.add_column(col, overflow="fold")
        for r in invalid:
            bad.add_row(r.label, r.rule, r.reason)
        console.print(bad)
    t = _plan_table(out_dir, runs)
    out_console = Console(markup=False)
    out_console.width = max(out_console.width, 190)
    out_console.print(t)
    for r in runs:
        out_console.print(f"{r.name}: {r.variant_note}")
    if any(family(r.optimizer) == "muon" for r in runs):
        out_console.print(
            "muon runs: the release's Muon switch (recipes/optimizer_switch/<release>/muon.yaml, Kimi K2's Muon "
            "changes) sets optimizer.use_distributed_optimizer=false, ddp.use_distributed_optimizer=false, "
            "ddp.overlap_param_gather=false, mixed_precision.fp8_param_gather=false and "
            "mixed_precision.reuse_grad_buf_for_mxfp8_param_ag=false, because dist_muon's layer-wise distributed "
            "optimizer replaces Megatron-Core's DistributedOptimizer and its param all-gather "
            "(bridgebench/rules.py muon_* rules reject overrides that turn them back on)"
        )
    policies = sorted({p for r in runs for p in r.policies})
    if policies:
        out_console.print(
            "bridgebench run policies (the only departures from the upstream recipes): " + "; ".join(policies)
        )
    skipped = sorted({s for r in runs for s in r.skipped_checks})
    if skipped:
        out_console.print("validated off-GPU; checks that need the compute node were skipped: " + "; ".join(skipped))
    _warn_cluster(runs, out_console)


def _plan_table(out_dir: Any, runs: list[Any]) -> Any:
    """The planned runs as a rich table: GPUs, nodes, parallel sizes, batch, config hash, model and NS FLOPs/step."""
    from rich.table import Table

    t = Table(title=f"plan {out_dir}")
    for col in (
        "run",
        "GPUs",
        "nodes",
        "TP",
        "PP",
        "VP",
        "CP",
        "EP",
        "ETP",
        "DP",
        "MBS",
        "GBS",
        "hash",
        "model FLOPs/step",
        "NS FLOPs/step",
    ):
        t.add_column(col, justify="right", no_wrap=True)
    for r in runs:
        t.add_row(
            r.name,
            str(r.num_gpus),
            str(r.nodes),
            str(r.tp),
            str(r.pp),
            str(r.vp or "-"),
            str(r.cp),
            str(r.ep),
            str(r.etp or "-"),
            str(r.dp),
            str(r.mbs),
            str(r.gbs),
            r.config_hash,
            f"{r.model_flops_per_step:.4e}",
            f"{r.newton_schulz_flops_per_step:.4e}",
        )
    return t


def _warn_cluster(runs, console) -> None:
    """The plan is a dry run for any cluster; say which runs its cluster could not start (submit refuses them),
    the ``--segment`` each run sends and the placement the time model priced, and where the two differ."""
    for r in runs:
        for problem in r.cluster_can_run:
            console.print(f"cluster {r.cluster} cannot run {r.name}: {problem} (submit would refuse)", style="yellow")
        priced = getattr(r, "segment_priced", None)
        if priced and getattr(r, "segment", None) == priced:
            console.print(
                f"{r.name}: sbatch --segment {priced} ({r.domain_gpus_priced}-GPU NVLink domains, as the time model "
                "priced it)"
            )
        elif priced:
            console.print(
                f"{r.name}: the time model priced sbatch --segment {priced} ({r.domain_gpus_priced}-GPU NVLink "
                f"domains), but cluster {r.cluster} cannot request segments (supports_segment: false): ranks may "
                "straddle racks",
                style="yellow",
            )


def _cluster_cfg(overrides: list[str]):
    """The composed config whose ``cluster`` ``--wait`` / ``status`` ask: ``overrides`` themselves, or for a sweep
    (``-m optimizer=muon,adamw``, the README's walkthrough) its first point -- every point goes to the same cluster.

    Raises:
        ConfigError: the sweep varies the cluster (``cluster=a,b``, ``cluster.partition=x,y``): one submit per cluster.
    """
    from bridgebench.config.compose import ConfigError, compose, expand_sweep, has_sweep, normalize_overrides

    if not has_sweep(overrides):
        return compose(overrides)
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(normalize_overrides(overrides))
    swept = [ov.key_or_group.lstrip("+~") for ov in parsed if ov.is_sweep_override()]
    if any(k == "cluster" or k.startswith("cluster.") for k in swept):
        raise ConfigError(
            "submit --wait follows one cluster, and this sweep varies it "
            f"({', '.join(k for k in swept if k.split('.')[0] == 'cluster')}): submit each cluster's runs separately"
        )
    return compose(expand_sweep(overrides)[0])


@app.command()
def submit(
    overrides: Optional[list[str]] = OVERRIDES,
    repeats: int = typer.Option(1, "--repeats", min=1, help="submissions per planned run (run one after another)"),
    again: bool = typer.Option(
        False, "--again", help="submit new repeats of runs the ledger has already (default: skip them)"
    ),
    wait: bool = typer.Option(False, "--wait", help="wait until every attempt finished (retries included)"),
    timeout: float = typer.Option(3600, "--timeout", help="seconds to wait at most"),
    multirun: bool = typer.Option(False, "-m", "--multirun", help="sweep comma-separated override values"),
    as_json: bool = typer.Option(False, "--json", help="print the attempts as JSON"),
) -> None:
    """Plan and submit every run through nemo-run's SlurmExecutor; record each in the job ledger. With --wait, wait
    for every run and exit 0 only when each run's last attempt COMPLETED: 3 when a run ended otherwise (FAILED,
    TIMEOUT, CANCELLED, ...), 4 when --timeout ran out first, 2 for bad input or a refused submission."""
    from rich.console import Console

    from bridgebench.config.compose import ConfigError, has_sweep

    console = Console(file=sys.stderr, markup=False)
    overrides = overrides or []
    if has_sweep(overrides) and not multirun:
        raise ConfigError("an override sweeps values (a=x,y): add -m / --multirun")
    from bridgebench.launch import submit as sub

    with console.status("planning and submitting ...") as status:
        attempts = sub.submit(
            overrides, repeats=repeats, again=again, progress=plain(status.update), notify=lambda m: console.print(m)
        )
        if wait:
            run_ids = sorted({a.run_id for a in attempts})
            attempts = sub.wait(
                _cluster_cfg(overrides), timeout_s=timeout, run_ids=run_ids, progress=plain(status.update)
            )
    _print_attempts(attempts, as_json)
    if wait:  # one line, and an exit code that says whether every run completed (README: exit codes)
        code, line = sub.wait_summary(attempts)
        console.print(f"submit: {line}", style=None if code == 0 else "red", highlight=False)
        if code:
            raise typer.Exit(code)


def _print_attempts(attempts, as_json: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    from bridgebench.launch.submit import json_attempts

    if as_json:
        typer.echo(json_attempts(attempts))
        return
    t = Table(title="job ledger")
    for col in ("run", "attempt", "name", "type", "SLURM job", "state", "exit", "reason", "nodes", "collected"):
        t.add_column(col, no_wrap=col != "reason")
    for a in attempts:
        t.add_row(
            a.run_id,
            str(a.attempt),
            a.name,
            a.job_type,
            a.slurm_job_id or "-",
            a.state,
            a.exit_code or "",
            (a.reason or "")[:80],
            a.node_list or "",
            "yes" if a.collected else "",
        )
    c = Console(markup=False)  # reasons are log lines: data, never rich markup
    c.width = max(c.width, 170)
    c.print(t)


@app.command()
def status(
    overrides: Optional[list[str]] = OVERRIDES,
    as_json: bool = typer.Option(False, "--json", help="print the attempts as JSON"),
) -> None:
    """Refresh the ledger from SLURM (squeue: pending reasons; sacct: final states), retry known-flaky failures,
    and show it. When SLURM does not answer, the ledger is shown anyway (unfinished jobs UNKNOWN, LOST after
    cluster.lost_after_s)."""
    from rich.console import Console

    from bridgebench.launch import submit as sub

    report = sub.refresh_report(_cluster_cfg(overrides or []))
    for note in report.notes:  # cluster unreachable, controller down ...: the ledger is shown anyway
        # soft_wrap: a note names paths and commands, which a hard wrap at 80 columns would split
        Console(file=sys.stderr, soft_wrap=True).print(f"note: {note}", style="yellow", markup=False, highlight=False)
    _print_attempts(report.attempts, as_json)
    if not as_json:  # live step figures of running jobs, from their logs (launch/live.py)
        from bridgebench.launch.live import live_lines

        for line in live_lines(report.attempts):
            typer.echo(line)


@app.command()
def cancel(
    run_ids: Optional[list[str]] = typer.Argument(None, help="run ids (default: every unfinished run)"),
    cluster: str = typer.Option("local", "--cluster", help="cluster config name"),
) -> None:
    """scancel unfinished attempts and mark them CANCELLED in the ledger."""
    from bridgebench.launch import submit as sub
    from bridgebench.launch.ledger import Ledger

    ledger = Ledger()
    done = sub.cancel(_cluster_cfg([f"cluster={cluster}"]), run_ids or None, ledger)
    if done:
        typer.echo(f"cancelled {len(done)} attempt(s): " + ", ".join(f"{a.run_id}/a{a.attempt}" for a in done))
    elif run_ids:  # known runs, all ended already: say how
        last = {a.run_id: a for a in ledger.attempts() if a.run_id in run_ids}
        typer.echo("nothing to cancel: " + ", ".join(f"{r} ended {a.state}" for r, a in sorted(last.items())))
    else:
        typer.echo("nothing to cancel: no unfinished run in the job ledger")


@app.command()
def collect(as_json: bool = typer.Option(False, "--json", help="print a JSON summary")) -> None:
    """Parse finished jobs' logs into records in the results store (idempotent). An attempt that cannot be collected
    (unreadable job folder, a clashing record, logs not fetched) is set aside with its reason and the rest are
    collected: exit code 5 ("partial", README: Exit codes), the set-aside attempts named on stderr (``--json``: under
    ``skipped``)."""
    from rich.console import Console

    from bridgebench.launch.collect import EXIT_PARTIAL, CollectPartial
    from bridgebench.launch.collect import collect as do_collect

    outcomes: dict[str, int] = {}
    partial: CollectPartial | None = None
    with Console(file=sys.stderr, markup=False).status("collecting ...") as st:
        try:
            added = do_collect(progress=plain(st.update), outcomes=outcomes)
        except CollectPartial as err:
            partial, added = err, err.added
    if as_json:
        summary: dict = {"added": added, "outcomes": outcomes}
        if partial is not None:
            summary |= {"partial": True, "skipped": partial.skipped}
        typer.echo(json.dumps(summary))
    else:
        what = ", ".join(f"{n} {k}" for k, n in sorted(outcomes.items(), key=lambda kv: (kv[0] != "completed", kv[0])))
        typer.echo(f"added {added} new record(s) to the results store" + (f": {what}" if what else ""))
    if partial is not None:
        typer.secho(f"partial: {partial}", fg=typer.colors.YELLOW, err=True)
        raise typer.Exit(EXIT_PARTIAL)
