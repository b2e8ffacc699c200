"""``bridgebench site``: the pages built from the shipped data, a results store written as ``bridgebench collect``
writes it (records of tests/results/test_compare.py's helpers, with predictions, provenance and a timed-out run) and a
real small sweep; then opened in headless Chromium (Debian's ``chromium`` driven by Playwright) from ``file://`` with
every non-file request refused: no console error, every chart drew marks, every internal link resolves, a filter
changes the visible rows; a screenshot per page goes to ``<site>/_screens/``."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from bridgebench.cli import main
from bridgebench.results.store import ResultStore
from bridgebench.site import MAX_PAGE_BYTES, PAGES
from bridgebench.site.layout import Page, SiteError, write_page
from tests.results.test_compare import optstep_record, pretrain_record

#: CPU-heavy (headless chromium on every page): make test runs it in the background half, beside the SLURM tests
#: (Makefile).
pytestmark = pytest.mark.background

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SWEEP = [
    "sweep",
    "recipe=qwen3_30b_a3b_gb300_mxfp8",
    "optimizer=muon",
    "model.tensor_model_parallel_size=1,2,3,4",
    "model.expert_model_parallel_size=1,2,4,8",
    "train.micro_batch_size=1,2,4,8",
    "--top-k",
    "0",
    "--name",
    "tiny",
]


def _records() -> list[dict]:
    rng = np.random.default_rng(7)
    recs = []
    for i in range(4):
        for opt, step in (("adam", 8.6), ("muon", 8.9)):
            r = pretrain_record(f"c1/{100 + i}/{opt}/pretrain", optimizer=opt, step=step, rng=rng)
            r["name"] = f"qwen3_30b_a3b-{opt}-gb300-mxfp8-abc"
            r["run_id"] = f"{opt}hash-r{i}"
            r["quality"] = "steady"  # Table 1 takes steady windows only (results/table1.py measured_step_times)
            r["predicted"] = {"step_time_s": step * 1.02, "band_pct": 3.4, "release": "26.02", "calibration": "default"}
            r["provenance"] |= {
                "git_commit": "0123456789abcdef0123",
                "git_dirty": False,
                "container_image": "nvcr.io/nvidia/nemo:26.02",
                "logs": [
                    {
                        "name": "log.out",
                        "sha256": hashlib.sha256(rid := r["record_id"].encode()).hexdigest(),
                        "bytes": len(rid),
                    }
                ],
            }
            recs.append(r)
    for i in range(3):
        o = optstep_record(f"c1/{200 + i}/x/optstep", "muon", 0.02, 0.004, rng)
        o["name"] = "optstep-qwen3_30b_a3b-muon-def"
        recs.append(o)
    t = pretrain_record("c1/300/t/pretrain", optimizer="muon", rng=rng, state="TIMEOUT")
    t |= {
        "name": "qwen3_30b_a3b-muon-gb300-mxfp8-abc",
        "outcome": "timeout",
        "step_time_s": None,
        "outcome_detail": "DUE TO TIME LIMIT",
    }
    recs.append(t)
    return recs


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("site")
    mp = pytest.MonkeyPatch()
    mp.setenv("BRIDGEBENCH_RESULTS", str(root / "runs"))
    mp.setenv("BRIDGEBENCH_SWEEPS", str(root / "sweeps"))
    mp.setenv("BRIDGEBENCH_TABLES", str(root / "tables"))
    mp.setenv("BRIDGEBENCH_PLANS", str(root / "plans"))
    try:
        ResultStore(root / "runs").add(_records())
        assert main(SWEEP) == 0
        assert main(["site", "--out", str(root / "out")]) == 0
    finally:
        mp.undo()
    return root / "out"


def _html(site: Path) -> dict[str, str]:
    return {f: (site / f).read_text() for f, _ in PAGES}


def test_every_page_is_written_small_and_references_nothing_remote(site):
    pages = _html(site)
    assert (site / "_static" / "plotly.min.js").stat().st_size > 1_000_000  # plotly.js written once, locally
    for name, text in pages.items():
        assert (site / name).stat().st_size <= MAX_PAGE_BYTES, name
        refs = re.findall(
            r"""<(?:script|img|iframe)[^>]*\ssrc=["']?([^"' >]+)|<link[^>]*\shref=["']?([^"' >]+)"""
            r"""|url\(\s*["']?([^"')]+)|@import\s+["']([^"']+)""",
            text,
        )
        for groups in refs:
            ref = next(g for g in groups if g)
            assert not re.match(r"(?i)(https?:)?//", ref), f"{name} loads {ref}"
            assert (site / ref).is_file(), f"{name}: {ref} is not in the site"
        assert "cdn." not in text.lower(), name
    # built from what: commit, every shipped data file with its sha256
    idx = pages["index.html"]
    csv = Path(__file__).resolve().parents[2] / "results/reference/published_pretrain_throughput.csv"
    assert hashlib.sha256(csv.read_bytes()).hexdigest() in idx
    assert re.search(r"commit <code>[0-9a-f]{40}</code>", idx)
    assert "tiny/points.parquet" in idx


def test_pages_show_what_the_data_says(site):
    pages = _html(site)
    t1 = pages["table1.html"]
    assert t1.count("independent check") >= 2 and t1.count("derived from the blog") >= 2
    assert "MFU BF16 (model only)" in t1 and "MFU BF16 (with NS)" in t1
    assert t1.count("your run c1/10") == 2 and 'id="tbl-table1-mine"' in t1  # your runs beside NVIDIA's
    runs = pages["runs.html"]
    assert "TIMEOUT 1, completed 4" in runs  # outcome counts of the muon pretrain experiment
    assert runs.count('class="plot"') == 2  # repeats (optimizer-step ones included) and measured vs predicted
    assert "nvcr.io/nvidia/nemo:26.02" in runs and "0123456789ab" in runs
    assert hashlib.sha256(b"c1/100/adam/pretrain").hexdigest()[:16] in runs
    assert "DUE TO TIME LIMIT" in runs
    sw = pages["sweeps.html"]
    assert "enumerated" in sw and "fits (memory per GPU)" in sw and "NVLink domain" in sw
    assert "EP group members per NVLink domain" in sw  # placement of the expert groups (ep_split columns)
    assert "world_size 16" in sw, "the rule that pruned TP=3 (8 GPUs), with its count"
    rel = pages["releases.html"]
    assert "published_pretrain_throughput.csv#" in rel and "config diff" in rel


def test_a_page_over_the_limit_is_refused(tmp_path):
    page = Page(file="big.html", title="big")
    page.raw("x" * (MAX_PAGE_BYTES + 1))
    with pytest.raises(SiteError, match="site_page_size"):
        write_page(tmp_path, page, "now")
    assert not (tmp_path / "big.html").exists()


def test_bad_selection_is_an_error_naming_it(capsys):
    assert main(["site", "--out", "/nonexistent-never-written", "model"]) == 2
    assert "error" in capsys.readouterr().err


def _playwright():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is missing: `make setup` installs it (requirements/base.txt)")
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is missing: `make setup` apt-installs it (or `apt-get install chromium`)")
    return sync_playwright


MARKS_JS = """() => Array.from(document.querySelectorAll('.plot')).map(el => ({id: el.id,
  drawn: el.classList.contains('js-plotly-plot'),
  marks: el.querySelectorAll('.point, path.js-line, path.box, .pielayer path').length}))"""
VISIBLE_JS = (
    "(id) => Array.from(document.getElementById(id).tBodies[0].rows).filter(r => r.style.display !== 'none').length"
)


def test_every_page_in_headless_chromium_offline(site):
    sync_playwright = _playwright()
    screens = site / "_screens"
    screens.mkdir(exist_ok=True)
    remote: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        errors: list[str] = []
        page.on("console", lambda m: errors.append(f"{m.type}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))

        def gate(route):  # the network is off: anything but file:// is refused and remembered
            if route.request.url.startswith("file://"):
                route.continue_()
            else:
                remote.append(route.request.url)
                route.abort()

        page.route("**/*", gate)
        counts = {}
        for name, _ in PAGES:
            page.goto((site / name).as_uri())
            page.wait_for_load_state("load")
            charts = page.evaluate(MARKS_JS)
            counts[name] = charts
            for c in charts:
                assert c["drawn"] and c["marks"] > 0, (name, c)
            # every internal link resolves to a file of the site, and its anchor to an element of that file
            for href in page.eval_on_selector_all("a[href]", "els => els.map(e => e.getAttribute('href'))"):
                assert not href.startswith(("http:", "https:", "//")), (name, href)
                file, _, anchor = href.partition("#")
                target = site / (file or name)
                assert target.is_file(), (name, href)
                if anchor:
                    assert f'id="{anchor}"' in target.read_text(), (name, href)
            page.screenshot(path=str(screens / f"{name.removesuffix('.html')}.png"))
        assert sum(len(c) for c in counts.values()) >= 15, counts
        assert all(counts[p] for p in ("table1.html", "releases.html", "runs.html", "sweeps.html", "validation.html"))
        # a filter changes the visible row count (and an impossible one hides every row)
        page.goto((site / "releases.html").as_uri())
        before = page.evaluate(VISIBLE_JS, "tbl-published")
        page.fill("input[data-table=tbl-published]", "kimi")
        after = page.evaluate(VISIBLE_JS, "tbl-published")
        assert 0 < after < before, (before, after)
        assert page.inner_text("#tbl-published-count").startswith(f"{after} of {before}")
        page.fill("input[data-table=tbl-published]", "no-such-row-xyz")
        assert page.evaluate(VISIBLE_JS, "tbl-published") == 0
        # sorting by a numeric column orders the rows by value
        page.goto((site / "runs.html").as_uri())
        page.click("#tbl-experiments th:has-text('median step s')")
        vals = page.eval_on_selector_all(
            "#tbl-experiments tbody tr td.num[data-v]", "tds => tds.map(t => t.getAttribute('data-v'))"
        )
        assert vals
        browser.close()
    assert not errors, errors
    assert not remote, remote
    shots = sorted(p.name for p in screens.glob("*.png"))
    assert shots == sorted(f"{f.removesuffix('.html')}.png" for f, _ in PAGES)
    (screens / "marks.json").write_text(json.dumps(counts, indent=1))


def test_a_selection_narrows_the_releases_page():
    from bridgebench.results.compare.selection import parse_selection
    from bridgebench.site import releases

    page = Page(file="releases.html", title="Releases")
    releases.build(page, parse_selection(["model=kimi_k2"]))
    text = "\n".join(page.parts)
    assert page.figures >= 1 and "kimi" in text.lower()
    assert "qwen" not in text.lower() and "llama" not in text.lower()  # only Kimi K2's histories and rows


def test_empty_store_and_no_sweep_say_how_to_fill_them(tmp_path):
    from bridgebench.results.compare.selection import Selection
    from bridgebench.site import runs, sweeps

    page = Page(file="runs.html", title="Your runs")
    runs.build(page, [], "results/runs", [], Selection())
    assert page.figures == 0 and "bridgebench submit experiment=optstep_local" in "".join(page.parts)
    page = Page(file="sweeps.html", title="Sweeps")
    assert sweeps.build(page, tmp_path / "none", "results/sweeps") == []
    assert "bridgebench sweep --space" in "".join(page.parts)
