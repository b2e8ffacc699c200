"""``bridgebench diff-config A B``: the resolved Megatron-Bridge ConfigContainers of two configurations side by side,
only the fields that differ (e.g. one recipe at two releases)."""

from __future__ import annotations

import json
import shlex

import typer

from bridgebench.cli.app import app
from bridgebench.errors import BridgebenchError


class DiffConfigError(BridgebenchError):
    """A side that is not a list of overrides."""


def _side(text: str) -> list[str]:
    try:
        parts = shlex.split(text)
    except ValueError as err:
        raise DiffConfigError(f"cannot split {text!r} into overrides: {err}") from err
    if not parts or any("=" not in p for p in parts):
        raise DiffConfigError(
            f"{text!r}: each side is space-separated Hydra overrides such as 'recipe=X release=26.08'"
        )
    return parts


def _cell(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


@app.command("diff-config")
def diff_config(
    a: str = typer.Argument(..., help='overrides of side A, quoted: "recipe=qwen3_30b_a3b_gb300_mxfp8 release=26.02"'),
    b: str = typer.Argument(..., help='overrides of side B, quoted: "recipe=qwen3_30b_a3b_gb300_mxfp8 release=26.08"'),
    as_json: bool = typer.Option(False, "--json", help="print the differing fields as JSON"),
    shared_only: bool = typer.Option(False, "--shared-only", help="leave out fields that exist on one side only"),
) -> None:
    """Fields in which the two resolved ConfigContainers differ (built as `bridgebench plan` builds them)."""
    from bridgebench.mbridge.diff import MISSING, to_rows
    from bridgebench.mbridge.diff import diff_config as compute

    side_a, side_b = _side(a), _side(b)
    diffs = compute(side_a, side_b)
    if shared_only:
        diffs = [d for d in diffs if MISSING not in (d.a, d.b)]
    if as_json:
        typer.echo(json.dumps({"a": side_a, "b": side_b, "fields": to_rows(diffs)}, indent=2, default=str))
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{len(diffs)} fields differ", show_lines=False)
    t.add_column("field", no_wrap=True)
    t.add_column(" ".join(side_a), overflow="fold")
    t.add_column(" ".join(side_b), overflow="fold")
    for d in diffs:
        t.add_row(d.field, _cell(d.a), _cell(d.b))
    console = Console(markup=False)
    console.width = max(console.width, 160)
    console.print(t)
