"""Sweep commands: ``sweep`` (enumerate, prune, rank, plan and submit the best), ``muon-cost`` (the Muon overhead
model of one configuration) and ``calibrate`` (refit the time model on the published tables)."""

from __future__ import annotations

import json
import sys
from typing import Optional

import typer

from bridgebench.cli.app import OVERRIDES, app
from bridgebench.errors import BridgebenchError


@app.command()
def sweep(
    overrides: Optional[list[str]] = OVERRIDES,
    space: Optional[str] = typer.Option(
        None, "--space", help="search space configs/sweep/<NAME>.yaml (default: 'parallelism' when no override sweeps)"
    ),
    name: Optional[str] = typer.Option(None, "--name", help="sweep folder under paths.sweeps (default from the space)"),
    top_k: Optional[int] = typer.Option(None, "--top-k", min=0, help="points to plan (default: the space's, else 8)"),
    calibration: str = typer.Option("default", "--calibration", help="configs/calibration/<NAME>.yaml"),
    submit: bool = typer.Option(False, "--submit", help="submit the planned top K through the job ledger"),
    resume: bool = typer.Option(False, "--resume", help="continue an interrupted sweep; no stage is done twice"),
    repeats: int = typer.Option(1, "--repeats", min=1, help="submissions per planned point (with --submit)"),
    as_json: bool = typer.Option(False, "--json", help="print the summary and the top points as JSON"),
    adaptive: bool = typer.Option(
        False, "--adaptive", help="measure a few points, refit, re-rank, stop when the best is found (needs --budget)"
    ),
    budget: Optional[int] = typer.Option(None, "--budget", help="--adaptive: runs to spend at most"),
    per_round: int = typer.Option(1, "--per-round", min=1, help="--adaptive: points submitted per round"),
    wait: bool = typer.Option(False, "--wait", help="--adaptive: wait for each round (implied: the loop needs it)"),
    timeout: float = typer.Option(3600, "--timeout", help="--adaptive: seconds to wait for one round at most"),
) -> None:
    """Sweep parallelism without wasting GPU hours: enumerate the space on plain values, prune by the validity rules
    and the memory model, rank by the Muon-aware time model, plan the top K with real ConfigContainers, optionally
    submit them. Writes points.parquet, summary.md and points.png under paths.sweeps/<name>/.

    With --adaptive --budget N: rounds of choose -> submit -> wait -> collect -> refit -> re-rank
    (bridgebench.model.refit rule ei+info: expected improvement plus the expected reduction of the other points'
    prediction error, stop when the best measured point beats every unmeasured point's optimistic band edge or the
    budget is spent); adds rounds.parquet and an "Adaptive rounds" summary."""
    from rich.console import Console

    from bridgebench.cli.sweep_output import SweepProgress, print_sweep
    from bridgebench.config.compose import has_sweep
    from bridgebench.launch.sweep import run_sweep

    overrides = overrides or []
    if space is None and not has_sweep(overrides) and not any(o.startswith("experiment=") for o in overrides):
        space = "parallelism"
    err = Console(file=sys.stderr, markup=False)
    if adaptive or budget is not None:
        if not adaptive:
            from bridgebench.launch.adaptive import AdaptiveError

            raise AdaptiveError("adaptive_budget: --budget is for --adaptive sweeps")
        _adaptive(overrides, space, name, budget, calibration, per_round, resume, timeout, as_json, err)
        return
    with SweepProgress(err) as progress:
        result = run_sweep(
            overrides, space=space, name=name, top_k=top_k, calibration=calibration, submit=submit, resume=resume,
            repeats=repeats, progress=progress,
        )  # fmt: skip
    print_sweep(result, as_json)


def _adaptive(overrides, space, name, budget, calibration, per_round, resume, timeout, as_json, err) -> None:
    """``sweep --adaptive``: the rounds (bridgebench.launch.adaptive), printed as a table (or JSON)."""
    from bridgebench.cli.sweep_output import SweepProgress, print_adaptive
    from bridgebench.launch.adaptive import run_adaptive

    try:
        with SweepProgress(err) as progress:
            res = run_adaptive(
                overrides, space=space, name=name, budget=budget, calibration=calibration, per_round=per_round,
                resume=resume, wait_timeout_s=timeout, progress=progress,
            )  # fmt: skip
    except KeyboardInterrupt:  # the state is on disk after every plan and submission: say how to go on
        err.print(
            "interrupted: the submitted runs keep running; `bridgebench sweep ... --adaptive --resume` (the same "
            "overrides, space and --name) goes on and submits nothing twice"
        )
        raise typer.Exit(130) from None
    print_adaptive(res, as_json)


@app.command("muon-cost")
def muon_cost(
    overrides: Optional[list[str]] = OVERRIDES,
    calibration: str = typer.Option("default", "--calibration", help="configs/calibration/<NAME>.yaml"),
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """The Muon overhead model of one configuration at its release: Newton-Schulz FLOPs and time per GPU, the
    layer-wise deal's load balance (busiest vs mean GPU), the TP mode's and the param all-gather's cost, the predicted
    Muon / AdamW step times, and Muon's choices as what-ifs: Megatron-Core 0.19.2's deal vs a cost-balanced packing
    (Megatron-LM PR #6379), TP modes duplicated / distributed / blockwise, SYRK (hypothetical here)."""
    from bridgebench import sweep as engine
    from bridgebench.config import calibration as calib_mod
    from bridgebench.model.optimizer import family
    from bridgebench.model.steptime.muon import muon_cost as model

    overrides = list(overrides or [])
    if not any(o.split("=", 1)[0] == "optimizer" for o in overrides):
        overrides.append("optimizer=muon")
    base = engine.base_of(overrides)
    v = engine.effective(base, {})
    if family(str(v["optimizer"])) != "muon":
        from bridgebench.config.compose import ConfigError

        raise ConfigError(f"muon-cost models Muon; optimizer.optimizer is {v['optimizer']!r} (use optimizer=muon)")
    calib = calib_mod.load(calibration)
    cost = model(base.spec, engine.time_config(v, base.gpu, base.spec), calib.time)
    summary = _muon_cost_summary(base, v, cost, calib)
    summary["cluster_refit"] = _muon_cost_refit(calib, cost, f"{base.gpu.name}/{v['precision']}", base.spec.name)
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    _print_muon_cost(summary, base.spec.name, base.gpu.name, v, cost, calib)


def _muon_cost_summary(base, v: dict, cost, calib) -> dict:
    """``muon-cost``'s figures (the ``--json`` output): NS FLOPs and time on the busiest and the mean GPU under
    Megatron-Core's deal and the cost-balanced one, the TP mode's and the all-gather's cost, Muon and AdamW steps
    and their terms, the what-ifs, the calibration's efficiency and software level."""
    pp, ba = cost.ping_pong, cost.balanced
    n = len(pp.ns_flops)
    return {
        "model": base.spec.name,
        "gpu": base.gpu.name,
        "num_gpus": v["num_gpus"],
        "release": cost.release,
        "parallelism": {k: v[k] for k in ("tp", "pp", "vp", "cp", "ep", "etp_effective")},
        "optimizer": v["optimizer"],
        "choices": {"assignment": cost.assignment, "muon_tp_mode": cost.tp_mode, "ns_kernel": cost.kernel},
        "ns_rate_tflops": cost.ns_rate / 1e12,
        "kappa_s": cost.kappa,
        "ns_flops_total": sum(pp.ns_flops),
        "ns_flops_busiest": max(pp.ns_flops),
        "ns_flops_mean": sum(pp.ns_flops) / n,
        "matrices_busiest": max(pp.matrices),
        "ns_time_busiest_s": cost.busiest_s(pp),
        "ns_time_mean_s": cost.mean_s(pp),
        "load_balance": cost.busiest_s(pp) / cost.mean_s(pp),
        "balanced_ns_time_busiest_s": cost.busiest_s(ba),
        "balanced_load_balance": cost.busiest_s(ba) / cost.mean_s(ba),
        "tp_mode_comm_s": cost.muon.opt.tp_mode,
        "allgather_bytes_per_gpu": cost.allgather_bytes,
        "allgather_s": cost.allgather_s,
        "elementwise_s": cost.elementwise_s,
        "muon_step_s": cost.muon.total,
        "adamw_step_s": cost.adam.total,
        "muon_over_adamw": cost.ratio,
        "muon_step_balanced_s": cost.balanced_step_s,
        "muon_over_adamw_balanced": cost.balanced_step_s / cost.adam.total,
        "band_pct": cost.muon.band_pct,
        "muon_terms_s": cost.muon.terms,
        "adamw_terms_s": cost.adam.terms,
        "what_ifs": [
            {
                "assignment": w.assignment,
                "muon_tp_mode": w.tp_mode,
                "ns_kernel": w.kernel,
                "step_s": w.step_s,
                "optimizer_s": w.optimizer_s,
                "ns_s": w.ns_s,
                "tp_mode_comm_s": w.tp_mode_s,
                "muon_over_adamw": w.step_s / cost.adam.total,
                "status": w.status,
            }
            for w in cost.variants
        ],  # fmt: skip
        "calibration": calib.name,
        "efficiency": cost.muon.efficiency,
        "efficiency_source": cost.muon.efficiency_source,
        "software_level": cost.muon.level,
        "software_level_source": cost.muon.level_source,
    }


def _print_muon_cost(summary: dict, model_name: str, gpu_name: str, v: dict, cost, calib) -> None:
    """``muon-cost`` as tables: the two deals side by side, the what-ifs (``*`` = this configuration), the
    provenance line and, for a cluster calibration, the refitted steps."""
    from rich.console import Console
    from rich.table import Table

    pp, ba = cost.ping_pong, cost.balanced
    n = len(pp.ns_flops)
    out = Console(markup=False)  # names, paths, reasons: data, never rich markup
    out.width = max(out.width, 140)
    par = " ".join(f"{k.split('_')[0].upper()}{val}" for k, val in summary["parallelism"].items() if val)
    t = Table(
        title=f"Muon cost: {model_name} on {v['num_gpus']} {gpu_name} ({par}, {v['optimizer']}) at release "
        f"{cost.release}"
    )
    t.add_column("quantity")
    t.add_column("Megatron-Core order (ping-pong)", justify="right")
    t.add_column("cost-balanced (PR #6379)", justify="right")
    t.add_row("NS TFLOP on the busiest GPU", f"{max(pp.ns_flops) / 1e12:.2f}", f"{max(ba.ns_flops) / 1e12:.2f}")
    t.add_row("NS TFLOP per GPU, mean", f"{sum(pp.ns_flops) / n / 1e12:.2f}", f"{sum(ba.ns_flops) / n / 1e12:.2f}")
    t.add_row("matrices on the busiest GPU", str(max(pp.matrices)), str(max(ba.matrices)))
    t.add_row("NS + per-matrix time, busiest GPU (s)", f"{cost.busiest_s(pp):.3f}", f"{cost.busiest_s(ba):.3f}")
    t.add_row("NS + per-matrix time, mean GPU (s)", f"{cost.mean_s(pp):.3f}", f"{cost.mean_s(ba):.3f}")
    t.add_row("load balance (busiest / mean)", f"{cost.busiest_s(pp) / cost.mean_s(pp):.2f}",
              f"{cost.busiest_s(ba) / cost.mean_s(ba):.2f}")  # fmt: skip
    t.add_row("Muon step (s)", f"{cost.muon.total:.3f}", f"{cost.balanced_step_s:.3f}")
    t.add_row("Muon / AdamW step time", f"{cost.ratio:.4f}", f"{cost.balanced_step_s / cost.adam.total:.4f}")
    out.print(t)
    w = Table(title=f"what-ifs at release {cost.release} (AdamW step {cost.adam.total:.3f} s)")
    for c in ("deal", "TP mode", "NS kernel", "Muon step s", "optimizer s", "NS s", "TP-mode comm s", "Muon/AdamW",
              "status"):  # fmt: skip
        w.add_column(c, justify="right" if c.endswith(("s", "AdamW")) else "left")
    for x in cost.variants:
        mark = " *" if (x.assignment, x.tp_mode, x.kernel) == (cost.assignment, cost.tp_mode, cost.kernel) else ""
        w.add_row(x.assignment + mark, x.tp_mode, x.kernel, f"{x.step_s:.3f}", f"{x.optimizer_s:.3f}",
                  f"{x.ns_s:.3f}", f"{x.tp_mode_s:.4f}", f"{x.step_s / cost.adam.total:.4f}", x.status)  # fmt: skip
    out.print(w)
    out.print(
        f"release {cost.release}: AdamW step {cost.adam.total:.3f} s, Muon step {cost.muon.total:.3f} s "
        f"(+-{cost.muon.band_pct:.1f} %, band from held-out published rows: {cost.muon.band_source}). NS rate "
        f"{cost.ns_rate / 1e12:.0f} TFLOP/s (BF16 peak x ns_efficiency {calib.time.ns_efficiency}), "
        f"{cost.kappa * 1e6:.0f} us per matrix (first-principles values, no GPU measurement); all-gather of updated "
        f"bf16 params {cost.allgather_bytes / 1e9:.2f} GB per GPU -> {cost.allgather_s:.3f} s; element-wise update "
        f"{cost.elementwise_s:.3f} s. Calibration {calib.name!r}: efficiency {cost.muon.efficiency:.3f} "
        f"({cost.muon.efficiency_source}, software level x{cost.muon.level:.3f} from the {cost.muon.level_source}). "
        "* = this configuration."
    )
    ref = summary["cluster_refit"]
    if ref:
        out.print(
            f"Refitted on this cluster's runs ({calib.name!r}, bridgebench.model.refit): Muon step "
            f"{ref['muon_step_s']:.3f} s, AdamW step {ref['adamw_step_s']:.3f} s (+-{ref['band_pct']:.1f} %), Muon / "
            f"AdamW {ref['muon_over_adamw']:.4f}; the figures above are the published model's."
        )


def _muon_cost_refit(calib, cost, group: str, model: str = "") -> dict | None:
    """Muon and AdamW steps through a cluster's refit (``calibrate --from-runs``), or None for a published
    calibration: each step's terms weighted by the refit's level and term factors (bridgebench.model.refit)."""
    from bridgebench.model.refit import Candidate
    from bridgebench.sweep.scoring import cluster_refit

    post = cluster_refit(calib)
    if post is None:
        return None
    out = {}
    for key, b in (("muon", cost.muon), ("adamw", cost.adam)):
        c = Candidate(
            point_id=key, step_s=b.total, flops=b.flops, num_gpus=int(b.num_gpus), band_pct=float(b.band_pct),
            group=group, terms=dict(b.terms), ep_scale_out=bool(getattr(b, "ep_scale_out", False)), model=model,
        )  # fmt: skip
        out[f"{key}_step_s"], sd = post.step(c)
        out["band_pct"] = 100 * sd
    out["muon_over_adamw"] = out["muon_step_s"] / out["adamw_step_s"]
    return out


@app.command()
def calibrate(
    selection: Optional[list[str]] = typer.Argument(None, help="--from-runs: key=value selection of records"),
    write: bool = typer.Option(False, "--write", help="write the fit into configs/calibration/<NAME>.yaml"),
    name: str = typer.Option("default", "--calibration", help="calibration file to write (or, --from-runs, refine)"),
    from_runs: bool = typer.Option(False, "--from-runs", help="calibrate this cluster from its completed records"),
    out_name: Optional[str] = typer.Option(None, "--name", help="--from-runs: the new calibration's name"),
    as_json: bool = typer.Option(False, "--json", help="print the fitted constants as JSON"),
) -> None:
    """Fit the time model on every published perf-table row of a model bridgebench knows
    (results/reference/published_pretrain_throughput.csv): efficiency per GPU and precision class, per-layer
    overhead, the release-level process, Muon's constants (fitted on the blog's Table 1), and the conformal
    uncertainty bands by distance from the calibration (rows held out by release, configuration, group, model and
    GPU, model, GPU: about 140 fits, 3-8 minutes here).

    With --from-runs [selection] --name NAME: a calibration of this cluster from its completed records (their
    plans' predictions refitted on the measured step times, shrunk towards --calibration in proportion to the
    evidence; bridgebench.model.refit), with the leave-one-run-out error and the new bands; written to
    configs/calibration/NAME.yaml or $BRIDGEBENCH_CONFIG_DIR/calibration/NAME.yaml. Replayed records only with
    payload=replay in the selection."""
    if from_runs:
        _calibrate_from_runs(list(selection or []), name, out_name, as_json)
        return
    if selection:
        raise BridgebenchError(f"calibrate: a selection ({' '.join(selection)}) is for --from-runs")
    import math

    from bridgebench.config import calibration as calib_mod
    from bridgebench.validation.time_calibration import fit_report

    report = fit_report(progress=lambda msg: typer.echo(msg, err=True))
    cal, source = report.calibration, report.source
    if write:
        path = calib_mod.write_time(name, cal, source)
        typer.echo(f"wrote {path}", err=True)
    if as_json:
        typer.echo(json.dumps({"source": source, "time": cal.to_mapping()}, indent=2))
        return
    typer.echo(source)
    typer.echo(
        f"c_layer {cal.c_layer * 1e3:.3f} ms per layer per microbatch; host_moe {cal.host_moe * 1e3:.1f} ms of host "
        f"work per MoE layer per microbatch + {cal.host_moe_expert * 1e3:.2f} ms per expert the GPU holds (exposed "
        "where the dispatch waits on the host)"
    )
    typer.echo(
        f"Muon: ns_efficiency {cal.ns_efficiency:.3f} of the BF16 peak, kappa {cal.kappa * 1e6:.0f} us per matrix "
        "(fitted on the blog's Table 1); Muon / AdamW step, measured vs predicted:"
    )
    for name, measured, predicted in report.muon.residuals if report.muon else ():
        typer.echo(f"  {name:45s} {measured:.3f} vs {predicted:.3f} ({100 * (predicted - measured):+.1f} points)")
    for (gpu, pclass), value in sorted(cal.efficiency.items()):
        band = cal.band_by_gpu.get((gpu, pclass))
        extra = f", band +-{band:.1%}" if band is not None else ""
        typer.echo(f"  {gpu:6s} {pclass:6s} efficiency {value:.3f} ({cal.rows[(gpu, pclass)]} rows{extra})")
    typer.echo(
        f"release levels: {len(cal.groups)} published groups ("
        + ", ".join(f"{f} mean x{math.exp(v):.3f}" for f, v in sorted(cal.family_level.items()))
        + f"); band over all rows +-{cal.band_default:.1%} (held out by release)"
    )
    if cal.conformal is not None:
        from bridgebench.model.steptime.bands import LEVELS, TIERS

        typer.echo(f"conformal bands by distance from the calibration ({cal.conformal.method}):")
        for tier in TIERS:
            q = cal.conformal.quantiles[tier]
            cov = cal.conformal.coverage.get(tier, {})
            typer.echo(
                f"  {tier:20s} n={cal.conformal.counts.get(tier, 0):3d}  "
                + "  ".join(
                    f"{lv} %: +-{math.exp(q[lv]) - 1:6.1%} (held out {cov.get(lv, float('nan')):.0%})" for lv in LEVELS
                )  # fmt: skip
            )
        cb = cal.conformal
        if cb.beyond and cb.seen.releases:
            lo, hi = cb.seen.releases
            typer.echo(
                f"  a release before / after the calibrated ones (index {lo:g} - {hi:g}) adds, in variance, "
                + ", ".join(f"{lv} %: +-{math.exp(q) - 1:.1%}" for lv, q in sorted(cb.beyond.items()))
                + f" ({cb.beyond_counts[0]} rows of the edge releases held out against {cb.beyond_counts[1]} inside)"
            )


def _calibrate_from_runs(selection: list[str], base: str, name: str | None, as_json: bool) -> None:
    """``calibrate --from-runs``: select, refit, print the leave-one-run-out error and the new bands, write."""
    import math

    from bridgebench.launch.collect import default_store
    from bridgebench.results import cluster_calibration as cc
    from bridgebench.validation import metrics

    if not name:
        raise cc.ClusterCalibrationError("calibrate_from_runs: --name NAME is needed (the new calibration's name)")
    cc.output_path(name)  # a bad or shipped name: refused before anything is read
    store = default_store()
    recs, notes = cc.select(store.records(), selection)
    for line in notes:
        typer.echo(line, err=True)
    res = cc.fit(recs, base)
    path = cc.write(name, res, selection)
    post = res["posterior"]
    loo = res["loo"]
    by = {c.point_id: c for c in res["candidates"]}
    bands = {p: 100 * post.log_ratio(c)[1] for p, c in by.items()}
    mape = 100 * metrics.mape(r["error_pct"] / 100 for r in loo) if len(loo) > 1 else None
    groups = sorted({r["group"] for r in loo if r["group_measured"]})
    by_group = {g: 100 * metrics.mape(r["error_pct"] / 100 for r in loo if r["group"] == g and r["group_measured"])
                for g in groups}  # fmt: skip
    summary = {
        "name": name,
        "path": str(path),
        "base": base,
        "payload": "replay" if "payload=replay" in [t.replace(" ", "") for t in selection] else "measured",
        "configurations": len(by),
        "records": len(recs),
        "coefficients": post.coefficients(),
        "band_scale": post.band_scale,
        "leave_one_run_out": loo,
        "leave_one_run_out_mape_pct": mape,
        "leave_one_run_out_mape_pct_by_group": by_group,
        "new_bands_pct": bands,
    }
    if as_json:
        typer.echo(json.dumps(summary, indent=2, default=float))
        return
    typer.echo(
        f"calibration {name!r} of this cluster from {len(recs)} {summary['payload']} record(s) of {len(by)} "
        f"configuration(s), refitted on {base!r} (bridgebench.model.refit: shrunk to it in proportion to the evidence)"
    )
    for k, (m, sd) in post.coefficients().items():
        typer.echo(f"  {k:24s} x{math.exp(m):.3f} (log {m:+.3f} +- {sd:.3f})")
    typer.echo(f"  band scale {post.band_scale:.3f} (the prediction's bands x this, from the runs' residuals)")
    typer.echo("leave-one-run-out (each configuration predicted by a refit on the others):")
    for r in loo:
        typer.echo(
            f"  {r['point_id']}: measured {r['measured_s']:.3f} s, predicted {r['predicted_s']:.3f} s, error "
            f"{r['error_pct']:+.1f} %, band +-{r['band_pct']:.1f} % {'inside' if r['inside'] else 'OUTSIDE'}"
        )
    if mape is not None:
        typer.echo(f"leave-one-run-out MAPE {mape:.1f} % over {len(loo)} configurations")
        typer.echo(
            "  by (GPU, precision), runs whose group kept another run (what predict does for that group's other "
            "points): " + (", ".join(f"{g} {v:.1f} %" for g, v in by_group.items()) or "none")
        )
    else:
        typer.echo("leave-one-run-out: one configuration, nothing to hold out (its refit is the prior)")
    typer.echo("new bands (posterior predictive, +-%): " + ", ".join(f"{p} {b:.1f}" for p, b in bands.items()))
    typer.echo(f"wrote {path}")
