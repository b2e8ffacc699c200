"""Execute the analysis notebooks headless and render them to HTML (``make notebooks``; also used by the tests).

Each ``analysis/*.py`` with a jupytext header (percent format) is converted with jupytext, executed with nbclient in
a fresh ``python3`` kernel (working directory: the repository root; ``MPLBACKEND=Agg``; ``src/`` on ``PYTHONPATH`` so
a checkout works without installing), and exported with nbconvert's ``HTMLExporter`` (plots embedded as ``<img>``).
A cell that raises stops that notebook with nbclient's ``CellExecutionError`` (exit code 1). Outputs:
``<out>/<name>.html`` and the executed ``<out>/<name>.ipynb``, written to temporary names and renamed.

    python analysis/render_notebooks.py [--out results/notebooks] [NOTEBOOK.py ...]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ANALYSIS = REPO / "analysis"
DEFAULT_OUT = REPO / "results" / "notebooks"


def notebooks() -> list[Path]:
    """The analysis notebooks: ``analysis/*.py`` files with a jupytext header."""
    return sorted(p for p in ANALYSIS.glob("*.py") if "jupytext:" in p.read_text(errors="replace")[:400])


def render(src: Path, out_dir: Path = DEFAULT_OUT, timeout: int = 900) -> tuple[Path, Path]:
    """Execute one jupytext notebook and write its HTML and executed ``.ipynb`` into ``out_dir``.

    Raises:
        nbclient.exceptions.CellExecutionError: a cell raised (the message names the cell and the error).
    """
    import jupytext
    import nbformat
    from nbclient import NotebookClient
    from nbconvert import HTMLExporter

    src = Path(src)
    nb = jupytext.read(src)
    env_before = dict(os.environ)
    os.environ["MPLBACKEND"] = "Agg"
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH")) if p)
    try:
        NotebookClient(
            nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(REPO)}}
        ).execute()
    finally:
        os.environ.clear()
        os.environ.update(env_before)
    html, _ = HTMLExporter().from_notebook_node(nb)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = (out_dir / f"{src.stem}.html", out_dir / f"{src.stem}.ipynb")
    tmp_html, tmp_nb = (p.with_name(f".{p.name}.{os.getpid()}.tmp") for p in paths)
    tmp_html.write_text(html, encoding="utf-8")
    nbformat.write(nb, str(tmp_nb))
    tmp_html.replace(paths[0])
    tmp_nb.replace(paths[1])
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="*", type=Path, help="jupytext .py notebooks (default: every analysis/*.py one)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default results/notebooks)")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    args = ap.parse_args(argv)
    for nb in args.notebooks or notebooks():
        t0 = time.monotonic()
        print(f"executing {nb} ...", file=sys.stderr, flush=True)
        html, _ = render(nb, args.out, args.timeout)
        print(f"  {html} ({time.monotonic() - t0:.0f} s)", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
