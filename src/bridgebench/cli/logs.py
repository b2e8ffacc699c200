"""Log commands: ``logs parse`` (logs, gzipped logs, TensorBoard events) and ``logs follow`` (a running job)."""

from __future__ import annotations

import json
from typing import Optional

import typer

from bridgebench.cli.app import app
from bridgebench.errors import BridgebenchError


class LogFileError(BridgebenchError):
    """A log path that does not exist or cannot be read as a log."""


logs_app = typer.Typer(help="Training-log tools.")
app.add_typer(logs_app, name="logs")


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _line(j: dict) -> str:
    """One self-explaining line per file: figures, their quality, and why they are short or missing."""
    state = f" ({j['job_state']})" if j.get("job_state") else ""
    head = f"{j['file']}: format={j['format']} outcome={j['outcome']}{state} steps={j['steps']}"
    if j["step_time_s"] is None:
        quality = f" quality={j['quality']}" if j.get("quality") else ""
        return f"{head} step_time_s=- tflops_per_gpu=-{quality} ({j['note']})"
    n = j["window"]["count"] if j.get("window") else None
    return (
        f"{head} step_time_s={_fmt(j['step_time_s'], '.4g')} ({j['statistic']} of {n} steps, median "
        f"{_fmt(j['step_time_s_median'], '.4g')}) tflops_per_gpu={_fmt(j['tflops_per_gpu'], '.5g')} "
        f"({j['statistic']}) quality={j['quality']} ({j['note']})"
    )


@logs_app.command("parse")
def logs_parse(
    files: list[str] = typer.Argument(..., help="log files (plain or .gz) or TensorBoard event files/directories"),
    warmup: Optional[int] = typer.Option(None, "--warmup", min=0, help="warm-up iterations skipped (default 10)"),
    min_steps: int = typer.Option(5, "--min-steps", min=1, help="steps a window needs to be 'steady'"),
    as_json: bool = typer.Option(False, "--json", help="one JSON object per file"),
    series: bool = typer.Option(True, "--series/--no-series", help="include the per-iteration series in --json"),
) -> None:
    """Step time, TFLOP/s/GPU and outcome of Megatron-Bridge / Megatron-LM / NeMo logs, with the window they come
    from and its quality (steady, short, excerpt, incomplete). Figures are the window's means (the median beside the
    step time; --json has both); warm-up is counted per attempt after a restart. A log without an end is
    'incomplete', or 'running' when the job ledger says its job is running."""
    from pathlib import Path

    from bridgebench.logs.events import is_events, parse_events
    from bridgebench.logs.parser import LogReadError, parse_log, to_json

    w = 10 if warmup is None else warmup
    out, errors = [], []
    for f in files:
        p = Path(f)
        if not p.exists():
            errors.append(f"no such log file: {f}")
            continue
        try:
            if p.is_dir() or ".tfevents." in p.name:
                if not is_events(p):
                    raise LogReadError(f"{f}: a directory without TensorBoard event files")
                parsed = parse_events(p, warmup_steps=w, min_steps=min_steps)
            else:
                parsed = parse_log(p, warmup_steps=w, min_steps=min_steps)
        except LogReadError as err:
            errors.append(str(err))
            continue
        if (
            parsed.format == "unknown"
            and not parsed.step_count
            and not parsed.signals
            and not parsed.memory
            and parsed.end_marker is None
            and not parsed.invalid_iterations
        ):
            errors.append(
                f"{f}: not a training log: no iteration, Step Time, NeMo timing, memory, failure or "
                "end-of-training lines"
            )
            continue
        j = to_json(parsed, series=series) | {"file": f, "job_state": None}
        if j["outcome"] == "incomplete":  # a log alone cannot tell a running job from one that died silently
            from bridgebench.launch.live import running_attempt_for

            a = running_attempt_for(p)
            if a is not None:
                j |= {"outcome": "running", "job_state": f"job {a.slurm_job_id} {a.state} per the job ledger"}
        out.append(j)
    if as_json and out:
        typer.echo(json.dumps(out if len(out) > 1 else out[0], indent=2, default=str))
    elif out:
        for j in out:
            typer.echo(_line(j))
    if errors:
        raise LogFileError("; ".join(errors))


@logs_app.command("follow")
def logs_follow(
    run_id: str = typer.Argument(..., help="run id from `bridgebench status` (its latest attempt is followed)"),
    interval: float = typer.Option(5.0, "--interval", min=0.2, help="seconds between updates"),
    timeout: float = typer.Option(86400.0, "--timeout", min=1.0, help="give up after this many seconds"),
    cluster: str = typer.Option("local", "--cluster", help="cluster config name"),
) -> None:
    """Keep showing a running job's latest step time, TFLOP/s/GPU, iteration / total and ETA until it ends."""
    from bridgebench.config.compose import compose
    from bridgebench.launch.live import follow

    final = follow(compose([f"cluster={cluster}"]), run_id, interval_s=interval, timeout_s=timeout, echo=typer.echo)
    if not final.finished:
        raise BridgebenchError(f"run {run_id} still {final.state} after {timeout:g} s")
