"""Log commands: ``logs parse``."""

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


@logs_app.command("parse")
def logs_parse(
    files: list[str] = typer.Argument(..., help="log files"),
    warmup: Optional[int] = typer.Option(None, "--warmup", help="steps skipped as warm-up"),
    as_json: bool = typer.Option(False, "--json", help="one JSON object per file"),
) -> None:
    """Parse Megatron-Bridge / Megatron-LM / NeMo 2 logs: outcome class and steady-state step time and TFLOP/s."""
    from pathlib import Path

    from bridgebench.logs.parser import parse_log, to_json

    out = []
    for f in files:
        if not Path(f).is_file():
            raise LogFileError(f"no such log file: {f}")
        parsed = parse_log(f) if warmup is None else parse_log(f, warmup_steps=warmup)
        out.append(to_json(parsed) | {"file": f})
    if as_json:
        typer.echo(json.dumps(out if len(out) > 1 else out[0], indent=2, default=str))
        return
    for j in out:
        typer.echo(
            f"{j['file']}: format={j['format']} outcome={j['outcome']} steps={j['steps']} "
            f"step_time_s={j['step_time_s']} tflops_per_gpu={j['tflops_per_gpu']}"
        )
