"""Build the results site (``bridgebench site``): every page of :data:`bridgebench.site.layout.PAGES` into one
folder, plotly.js written once into ``_static/``, and an index that says what was built from what (commit, each
data file with its sha256, the results store, time).

Data flows one way: shipped reference data, the results store, sweep folders -> the pages; nothing here writes
anywhere but the site folder."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bridgebench.errors import BridgebenchError
from bridgebench.paths import REPO_ROOT
from bridgebench.site.layout import PAGES, Page, SiteError, esc, write_page, write_static


class SiteBuildError(BridgebenchError):
    """The site could not be built (a page over its size limit, an output folder that cannot be written)."""


@dataclass(kw_only=True)
class BuiltSite:
    out: Path
    pages: dict[str, int] = field(default_factory=dict)  # file -> bytes
    static_bytes: int = 0
    seconds: dict[str, float] = field(default_factory=dict)  # page -> CPU s


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_site(out: Path, selection: tuple[str, ...] = (), progress: Callable[[str], None] | None = None) -> BuiltSite:
    """Write the site into ``out`` (created) and return what was written (page -> bytes).

    ``selection``: ``key=value`` filters as ``bridgebench compare`` takes them (model, gpu, precision, num_gpus,
    optimizer, release), applied to the published histories, your runs and the validation rows.

    Raises:
        bridgebench.results.compare_stats.CompareError: a bad selection (the rule named).
        SiteBuildError: a page over 5 MB (rule ``site_page_size``) or an output folder that cannot be written.
    """
    from bridgebench.launch.collect import default_store
    from bridgebench.launch.provenance import code_version
    from bridgebench.paths import load_paths
    from bridgebench.results.compare.selection import parse_selection
    from bridgebench.site import releases, runs, sweeps, table1, validation

    say = progress or (lambda _msg: None)
    sel = parse_selection(list(selection))
    paths = load_paths()
    try:
        out.mkdir(parents=True, exist_ok=True)
        static = write_static(out)
    except OSError as err:
        raise SiteBuildError(f"site_output: cannot write the site into {out}: {err.strerror or err}") from err
    built_at = datetime.now(UTC).isoformat(timespec="seconds")
    store = default_store()
    store_records = store.records()
    notes = list(store.last_scan.notes())
    pages = {f: Page(file=f, title=t) for f, t in PAGES}
    files: list[tuple[str, str]] = []
    result = BuiltSite(out=out, static_bytes=static.stat().st_size)

    def timed(name: str, fn: Callable[[], Any]) -> Any:
        say(f"site: {name} ...")
        t = time.process_time()
        value = fn()
        result.seconds[name] = time.process_time() - t
        return value

    timed("table1.html", lambda: table1.build(pages["table1.html"], store_records))
    timed("releases.html", lambda: releases.build(pages["releases.html"], sel))
    timed("runs.html", lambda: runs.build(pages["runs.html"], store_records, _shown(Path(paths.results)), notes, sel))
    files += timed(
        "sweeps.html", lambda: sweeps.build(pages["sweeps.html"], Path(paths.sweeps), _shown(Path(paths.sweeps)))
    )
    files += timed("validation.html", lambda: validation.build(pages["validation.html"], Path(paths.tables), sel))
    ref = Path(paths.reference)
    for name in ("published_pretrain_throughput.csv", "blog_table1.csv"):
        if (ref / name).is_file():
            files.insert(0, (_shown(ref / name), _sha(ref / name)))
    cal = REPO_ROOT / "configs" / "calibration" / "default.yaml"
    if cal.is_file():
        files.append((_shown(cal), _sha(cal)))
    _index(
        pages["index.html"],
        pages,
        code_version(),
        built_at,
        files,
        _shown(Path(paths.results)),
        len(store_records),
        sel.text(),
        result,
    )
    try:
        for page in pages.values():
            result.pages[page.file] = write_page(out, page, built_at).stat().st_size
    except SiteError as err:
        raise SiteBuildError(str(err)) from err
    except OSError as err:
        raise SiteBuildError(f"site_output: cannot write the site into {out}: {err.strerror or err}") from err
    return result


def _index(
    page: Page,
    pages: dict[str, Page],
    code: dict[str, Any],
    built_at: str,
    files: list[tuple[str, str]],
    store: str,
    n_records: int,
    sel_text: str,
    result: BuiltSite,
) -> None:
    page.note(
        "bridgebench's results as pages: NVIDIA's blog table reproduced, the published release histories, your "
        "runs from the results store, sweeps, and the time model against published data. Every figure is "
        "interactive (hover, zoom) and works offline; every table sorts (click a header) and filters."
    )
    rows = [
        {
            "page": f'<a href="{f}">{esc(p.title)}</a>',
            "charts": str(p.figures),
            "tables": str(p.tables),
            "built from": esc("; ".join(p.sources) or "-"),
        }
        for f, p in pages.items()
        if f != "index.html"
    ]
    page.h(2, "Pages", "pages")
    page.table(rows, ident="pages", filterable=False, html_columns=["page", "charts", "tables", "built from"])
    page.h(2, "What it was built from", "sources")
    commit = code.get("git_commit") or "not a git checkout"
    dirty = " (uncommitted changes in tracked files)" if code.get("git_dirty") else ""
    page.raw(
        f"<p>built {esc(built_at)} by bridgebench {esc(code.get('bridgebench_version'))}, commit "
        f"<code>{esc(commit)}</code>{esc(dirty)}; selection: {esc(sel_text)}; results store: {esc(store)} "
        f"({n_records} records).</p>"
    )
    page.table([{"file": f, "sha256": s} for f, s in files], ident="files", filterable=False)
    page.note("plotly.js: _static/plotly.min.js, from the installed plotly package (no network at view time).")
