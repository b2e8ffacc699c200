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


def source_option(help: str):
    """``--source`` (default ``auto``): where a command's figures come from (NVIDIA's published tables, your runs),
    ``help`` saying which values the command takes."""
    return typer.Option("auto", "--source", help=help)


def out_folder(path):
    """``--out`` names a folder: an existing file (or a link to one) there is refused, never written into or over
    (rule ``out_is_folder``). Returns ``path``.

    Raises:
        BridgebenchError: naming the file and the fix.
    """
    from pathlib import Path

    from bridgebench.errors import BridgebenchError

    if path is not None and Path(path).exists() and not Path(path).is_dir():
        raise BridgebenchError(
            f"out_is_folder: --out {path} is an existing file; --out names a folder the outputs go into (nothing "
            "was written): give a folder, or a name that does not exist yet"
        )
    return path
