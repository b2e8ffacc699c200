"""The typer application and the arguments every subcommand shares. Command modules register on :data:`app`."""

from __future__ import annotations

import typer

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    # click's plain help: flags read `--json  print ...`, not `--json <bool>` (typer's rich panels type every option)
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    help="Benchmark recipes and analysis for Megatron-Bridge pretraining (Muon vs AdamW and more).",
)

OVERRIDES = typer.Argument(None, help="Hydra overrides, e.g. model=kimi_k2 optimizer=muon model.seq_length=4096")
