"""``bridgebench site``: the results as a static site of plain HTML pages (:mod:`bridgebench.site`)."""

from __future__ import annotations

from typing import Optional

import typer

from bridgebench.cli.app import app


@app.command()
def site(
    selection: Optional[list[str]] = typer.Argument(
        None, help="key=value filters as for `compare` (model=kimi_k2 gpu=gb300 release=26.02..26.08)"
    ),
    out: Optional[str] = typer.Option(None, "--out", help="site folder (default: configs/paths site, results/site)"),
) -> None:
    """Write the results site: Table 1, Releases, Your runs, Sweeps, Model validation and an index, as HTML pages
    that open from file:// with no network (plotly.js written once into _static/). Open <out>/index.html."""
    import time
    from pathlib import Path

    from bridgebench.paths import load_paths
    from bridgebench.site import build_site

    target = Path(out) if out else Path(load_paths().site)
    t0 = time.process_time()
    built = build_site(target, tuple(selection or ()), progress=lambda msg: typer.echo(msg, err=True))
    for page, size in built.pages.items():
        typer.echo(f"{target / page}  {size / 1e3:,.0f} kB")
    typer.echo(f"{target / '_static/plotly.min.js'}  {built.static_bytes / 1e3:,.0f} kB (shared)")
    typer.echo(
        f"site: {len(built.pages)} pages in {time.process_time() - t0:.1f} s CPU; open {target / 'index.html'}",
        err=True,
    )
