"""The shared layout of every page of the results site: the page frame (navigation, style, the sort/filter script),
HTML tables from rows, plotly figures embedded without their library, and the page list.

Each page is one self-contained HTML file apart from ``_static/plotly.min.js`` (plotly.js as the installed plotly
package ships it, written once per site by :func:`write_static`) and opens from ``file://`` with no network: no
CDN, no web font, no remote image. Tables are sortable (click a header) and filterable (the box above them) by a
small inline script (:data:`TABLE_JS`); nothing needs a server.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: (file, title) of every page, in navigation order.
PAGES: tuple[tuple[str, str], ...] = (
    ("index.html", "Index"),
    ("table1.html", "Table 1"),
    ("releases.html", "Releases"),
    ("runs.html", "Your runs"),
    ("sweeps.html", "Sweeps"),
    ("validation.html", "Model validation"),
)

STATIC = "_static"
PLOTLY_JS = f"{STATIC}/plotly.min.js"
#: the most bytes one page may have (the issue's limit; :func:`write_page` refuses more).
MAX_PAGE_BYTES = 5_000_000

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d2430;background:#fafbfc}
nav{background:#1d2430;padding:.5em 1.2em;position:sticky;top:0;z-index:10}
nav a{color:#cfd8e3;margin-right:1.2em;text-decoration:none}nav a.here{color:#fff;font-weight:600}
main{max-width:1400px;margin:0 auto;padding:1em 1.5em 3em}
h1{font-size:1.5em;margin:.4em 0}h2{font-size:1.2em;margin:1.6em 0 .4em;border-bottom:1px solid #dde3ea}
h3{font-size:1.05em;margin:1.2em 0 .3em}
p.note{color:#4b5565;max-width:70em}
table.data{border-collapse:collapse;font-size:12.5px;margin:.3em 0 1em;background:#fff}
table.data th,table.data td{border:1px solid #dde3ea;padding:2px 6px;text-align:left;vertical-align:top}
table.data th{background:#eef2f6;cursor:pointer;white-space:nowrap;position:sticky;top:0}
table.data td.num{text-align:right;font-variant-numeric:tabular-nums}
.scroll{max-height:36em;overflow:auto;border:1px solid #dde3ea}
input.filter{margin:.3em 0;padding:3px 6px;width:24em}
span.count{color:#4b5565;margin-left:1em}
.tag{display:inline-block;padding:0 5px;border-radius:3px;font-size:11.5px;background:#e8edf3}
.tag.indep{background:#d7f0dd}.tag.derived{background:#fbe7c6}.tag.bad{background:#f8d4d4}
.plot{width:100%;min-height:320px}
code{font-size:12px}
"""

#: Sort a table by clicking a header (numbers by value, text by text); filter its rows by a case-insensitive text
#: that every row must contain (terms separated by spaces, all of them); the count of shown rows beside the box.
TABLE_JS = """
(function(){
function cellValue(td){var v=td.getAttribute('data-v');if(v===null)v=td.textContent;var n=parseFloat(v);
 return (v!==''&&!isNaN(n)&&isFinite(v))?n:v.toLowerCase();}
function sortBy(table,col,th){var body=table.tBodies[0];var rows=Array.prototype.slice.call(body.rows);
 var asc=th.getAttribute('data-sort')!=='asc';
 Array.prototype.forEach.call(table.tHead.rows[0].cells,function(c){c.removeAttribute('data-sort');});
 th.setAttribute('data-sort',asc?'asc':'desc');
 rows.sort(function(a,b){var x=cellValue(a.cells[col]),y=cellValue(b.cells[col]);
  if(typeof x===typeof y){return (x<y?-1:x>y?1:0)*(asc?1:-1);}return (typeof x==='number'?-1:1)*(asc?1:-1);});
 rows.forEach(function(r){body.appendChild(r);});}
function applyFilter(input){var table=document.getElementById(input.getAttribute('data-table'));
 var terms=input.value.toLowerCase().split(/\\s+/).filter(Boolean);var shown=0;
 Array.prototype.forEach.call(table.tBodies[0].rows,function(r){var t=r.textContent.toLowerCase();
  var ok=terms.every(function(w){return t.indexOf(w)>=0;});r.style.display=ok?'':'none';if(ok)shown++;});
 var c=document.getElementById(input.getAttribute('data-table')+'-count');
 if(c)c.textContent=shown+' of '+table.tBodies[0].rows.length+' rows';}
document.addEventListener('DOMContentLoaded',function(){
 Array.prototype.forEach.call(document.querySelectorAll('table.data'),function(table){
  Array.prototype.forEach.call(table.tHead.rows[0].cells,function(th,i){th.addEventListener('click',function(){sortBy(table,i,th);});});});
 Array.prototype.forEach.call(document.querySelectorAll('input.filter'),function(input){
  input.addEventListener('input',function(){applyFilter(input);});applyFilter(input);});});
})();
"""


class SiteError(Exception):
    """A page that breaks the site's rules (too large); raised through :class:`bridgebench.errors.BridgebenchError`
    by :func:`bridgebench.site.build.build_site`."""


@dataclass(kw_only=True)
class Page:
    """One page being assembled: its file, title and body parts (HTML strings), and what it was built from."""

    file: str
    title: str
    parts: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)  # data files (site-relative labels) the page read
    figures: int = 0
    tables: int = 0

    def h(self, level: int, text: str, anchor: str | None = None) -> None:
        ident = f' id="{esc(anchor)}"' if anchor else ""
        self.parts.append(f"<h{level}{ident}>{esc(text)}</h{level}>")

    def note(self, text: str) -> None:
        self.parts.append(f'<p class="note">{esc(text)}</p>')

    def raw(self, markup: str) -> None:
        self.parts.append(markup)

    def figure(self, fig: Any, height: int = 380) -> None:
        """Embed a plotly figure (its data inline, plotly.js from ``_static``)."""
        self.figures += 1
        div = f"fig-{self.file.split('.')[0]}-{self.figures}"
        fig.update_layout(height=height, margin=dict(l=60, r=20, t=40, b=50), template="plotly_white")
        spec = fig.to_json(validate=False, engine="json")
        self.parts.append(
            f'<div class="plot" id="{div}"></div><script>(function(){{var f={spec};'
            f'Plotly.newPlot("{div}",f.data,f.layout,{{responsive:true,displaylogo:false}});}})();</script>'
        )

    def table(
        self,
        rows: Sequence[Mapping[str, Any]],
        columns: Sequence[str] | None = None,
        *,
        ident: str,
        filterable: bool = True,
        formats: Mapping[str, str] | None = None,
        html_columns: Iterable[str] = (),
    ) -> None:
        """An HTML table of ``rows`` (dicts); ``formats``: column -> format spec for numbers; ``html_columns``: cells
        already HTML (links, tags). A filter box above it when ``filterable``."""
        self.tables += 1
        self.parts.append(
            table_html(
                rows, columns, ident=ident, filterable=filterable, formats=formats or {}, html_columns=set(html_columns)
            )
        )

    def html(self, built: str) -> str:
        nav = "".join(f'<a href="{f}"{" class=here" if f == self.file else ""}>{esc(t)}</a>' for f, t in PAGES)
        plotly = f'<script src="{PLOTLY_JS}"></script>' if self.figures else ""
        return (
            "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
            f"<title>bridgebench: {esc(self.title)}</title><style>{STYLE}</style>{plotly}"
            f"<script>{TABLE_JS}</script></head><body><nav>{nav}</nav><main><h1>{esc(self.title)}</h1>"
            + "\n".join(self.parts)
            + f'<p class="note">built {esc(built)} by <code>bridgebench site</code>; what it was built from: '
            '<a href="index.html#sources">index</a></p></main></body></html>\n'
        )


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def fmt(value: Any, spec: str = "") -> str:
    """A cell's text: ``-`` for None / NaN, numbers by ``spec`` (default: up to 4 significant digits)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return format(value, spec or ".4g")
    if isinstance(value, int):
        return format(value, spec or "d")
    return str(value)


def _is_num(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and not (isinstance(value, float) and math.isnan(value))
    )


def table_html(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[str] | None,
    *,
    ident: str,
    filterable: bool,
    formats: Mapping[str, str],
    html_columns: set[str],
) -> str:
    rows = list(rows)
    ident = f"tbl-{ident}"  # tables live in their own id space: a heading's anchor never shadows one
    if columns is None:
        columns = list(dict.fromkeys(k for r in rows for k in r))
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    body = []
    for r in rows:
        cells = []
        for c in columns:
            v = r.get(c)
            if c in html_columns:
                cells.append(f"<td>{'-' if v is None else v}</td>")
            elif _is_num(v):
                cells.append(f'<td class=num data-v="{v!r}">{esc(fmt(v, formats.get(c, "")))}</td>')
            else:
                cells.append(f"<td>{esc(fmt(v, formats.get(c, '')))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    box = ""
    if filterable:
        box = (
            f'<div><input class="filter" type="search" placeholder="filter rows (all words)" data-table="{ident}">'
            f'<span class="count" id="{ident}-count"></span></div>'
        )
    return (
        f'{box}<div class="scroll"><table class="data" id="{ident}"><thead><tr>{head}</tr></thead><tbody>'
        + "".join(body)
        + "</tbody></table></div>"
    )


def tag(text: str, kind: str = "") -> str:
    return f'<span class="tag {kind}">{esc(text)}</span>'


def write_static(out: Path) -> Path:
    """Write plotly.js of the installed plotly package to ``out/_static/plotly.min.js`` (once per site; its bytes
    are the package's own, so the page works offline). Returns the path."""
    from plotly.offline import get_plotlyjs

    path = out / PLOTLY_JS
    path.parent.mkdir(parents=True, exist_ok=True)
    data = get_plotlyjs().encode()
    if not path.exists() or path.read_bytes() != data:
        path.write_bytes(data)
    return path


def write_page(out: Path, page: Page, built: str) -> Path:
    """Write one page; refuse it (rule ``site_page_size``) when it exceeds :data:`MAX_PAGE_BYTES`."""
    data = page.html(built).encode()
    if len(data) > MAX_PAGE_BYTES:
        raise SiteError(f"site_page_size: {page.file} would be {len(data):,} bytes, over {MAX_PAGE_BYTES:,}")
    path = out / page.file
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return path


def json_script(ident: str, value: Any) -> str:
    """Data for a page's own script, as ``<script type=application/json>``."""
    text = json.dumps(value, default=str).replace("</", "<\\/")
    return f'<script type="application/json" id="{esc(ident)}">{text}</script>'
