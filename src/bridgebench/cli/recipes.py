"""Recipe commands: ``recipes generate`` (per-release recipe files from Megatron-Bridge's own perf recipes),
``recipes list`` (which release has which recipe) and ``recipes fields`` (the Megatron-Bridge field catalogue the
config schema checks keys against)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Optional

import typer

from bridgebench.cli.app import app
from bridgebench.errors import BridgebenchError

recipes_app = typer.Typer(help="Per-release recipes generated from Megatron-Bridge's perf recipes.")
app.add_typer(recipes_app, name="recipes")


class RecipeCommandError(BridgebenchError):
    """Bad arguments to a recipes command."""


def _write(path: Path, text: str) -> None:
    """Write atomically (temporary file + rename): an interrupted run leaves the old file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


@recipes_app.command("generate")
def generate(
    release: str = typer.Option(..., "--release", help="NeMo release, e.g. 26.08 (installed) or 26.02 (shipped dumps)"),
    recipe: Optional[list[str]] = typer.Option(None, "--recipe", help="only these recipes (default: all entries)"),
    check: bool = typer.Option(False, "--check", help="write nothing; exit 1 if a file would change"),
) -> None:
    """Write recipes/<recipe>/<release>.yaml (and the release's Muon switch) from upstream.

    The installed Megatron-Bridge's release calls its perf_recipes; any other release reads the dumps shipped in
    tests/data/upstream_recipes/<release>/. A recipe with no upstream source at that release gets no file.
    """
    from bridgebench.config.compose import group_options
    from bridgebench.mbridge import setup, upstream
    from bridgebench.mbridge.recipes import generate_recipe, installed_release, muon_switch

    setup()
    have = [installed_release(), *upstream.dumped_releases()]
    if release not in have:
        raise RecipeCommandError(f"no upstream source for release {release}: sources exist for {sorted(set(have))}")
    names = recipe or [n for n in group_options("recipe")]
    unknown = sorted(set(names) - set(group_options("recipe")))
    if unknown:
        raise RecipeCommandError(f"unknown recipe(s) {unknown}; known: {group_options('recipe')}")
    changed = []
    jobs = [(n, lambda n=n: generate_recipe(n, release)) for n in names]
    if not recipe:
        jobs.append(("optimizer_switch", lambda: muon_switch(release)))
    for i, (name, job) in enumerate(jobs, 1):
        typer.echo(f"[{i}/{len(jobs)}] {name} @ {release}", err=True)
        try:
            path, text = job()
        except upstream.UpstreamError as err:
            typer.echo(f"  skipped: {err}", err=True)
            continue
        if path.exists() and path.read_text() == text:
            continue
        changed.append(path)
        if not check:
            _write(path, text)
    for path in changed:
        typer.echo(f"{'would change' if check else 'wrote'} {path}")
    if check and changed:
        raise typer.Exit(1)


@recipes_app.command("list")
def list_recipes() -> None:
    """Each recipe and the releases that have values for it."""
    from bridgebench.config.compose import group_options, recipe_releases

    for name in group_options("recipe"):
        typer.echo(f"{name}: {', '.join(recipe_releases(name)) or '(none)'}")


@recipes_app.command("fields")
def fields(check: bool = typer.Option(False, "--check", help="exit 1 if a shipped catalogue is out of date")) -> None:
    """Write src/bridgebench/config/mbridge_fields.json (the installed Megatron-Bridge's dataclass fields),
    mbridge_starts.json (its base recipes' and mixed-precision recipes' values of the fields bridgebench's models read
    when a config leaves them out) and mbridge_perf.json (its perf recipes' parallel and memory settings, which the
    published tables do not print)."""
    import json

    from bridgebench.config.schema import FIELDS_FILE, PERF_FILE, STARTS_FILE
    from bridgebench.mbridge import setup
    from bridgebench.mbridge.catalogs import field_catalog, perf_catalog, start_catalog

    setup()
    stale = []
    for path, make in ((FIELDS_FILE, field_catalog), (STARTS_FILE, start_catalog), (PERF_FILE, perf_catalog)):
        text = json.dumps(make(), indent=1, sort_keys=True) + "\n"
        if path.exists() and path.read_text() == text:
            typer.echo(f"{path} is up to date")
            continue
        if check:
            typer.echo(f"{path} differs from the installed Megatron-Bridge")
            stale.append(path)
            continue
        _write(path, text)
        typer.echo(f"wrote {path}")
    if stale:
        raise typer.Exit(1)
