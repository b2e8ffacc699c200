"""The ``bridgebench`` command (typer), the top layer. Each subcommand takes Hydra overrides as trailing arguments.

Commands live in one module per job (:mod:`.analysis`, :mod:`.runs`, :mod:`.report`, :mod:`.logs`,
:mod:`.listing`); heavy imports (pandas, matplotlib, megatron) happen inside the commands that need them, so
``bridgebench flops`` starts fast and never imports torch or megatron. Errors: every deliberate error is a
:class:`bridgebench.errors.BridgebenchError`, caught once in :func:`main`, printed as ``error: <message>`` and exit
code 2. Everything :func:`main` prints passes one redaction step (:mod:`bridgebench.cli.redaction`): no
credential-shaped text leaves the command, whoever wrote it.
"""

from __future__ import annotations

import sys

import typer

from bridgebench import __version__
from bridgebench.cli import (  # noqa: F401  (register the commands)
    analysis,
    compare,
    diff_config,
    listing,
    logs,
    predict,
    quiet,
    recipes,
    report,
    runs,
    site,
    sweep,
)
from bridgebench.cli.app import app
from bridgebench.errors import BridgebenchError


def _version(value: bool) -> None:
    if value:
        typer.echo(f"bridgebench {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="print the version and exit"
    ),
    verbose: bool = typer.Option(
        False, "--verbose", "-v", help="show third-party warnings, logs and tracebacks here (always in the debug log)"
    ),
) -> None:
    """Benchmark recipes and analysis for Megatron-Bridge pretraining (Muon vs AdamW and more)."""
    quiet.configure(verbose)


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the command; a :class:`BridgebenchError` becomes ``error: …`` on stderr and exit code 2.
    stdout and stderr are scrubbed of credentials (:func:`bridgebench.cli.redaction.redacted_output`)."""
    from bridgebench.cli.redaction import redacted_output

    with redacted_output(sys.argv[1:] if argv is None else argv):
        try:
            app(args=argv, prog_name="bridgebench", standalone_mode=True)
        except BridgebenchError as err:
            typer.secho(f"error: {err}", fg=typer.colors.RED, err=True)
            return 2
        except SystemExit as exit_:
            return int(exit_.code or 0) if not isinstance(exit_.code, str) else 1
        except Exception as err:  # noqa: BLE001  (not bad input: its cause in one line, the traceback in the debug log)
            missing = quiet.missing_value(err)
            if missing:  # a value left '???' is bad input, not a bug
                typer.secho(f"error: {missing}", fg=typer.colors.RED, err=True)
                return 2
            return quiet.unexpected(err)
    return 0


def entry() -> None:
    """Console-script entry point (``bridgebench``)."""
    quiet.finish(main())
