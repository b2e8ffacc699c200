"""The analysis notebooks execute headless (jupytext -> nbclient, a real ipykernel) and render to HTML with their
plots; a notebook whose cell raises fails. Same code path as ``make notebooks`` (analysis/render_notebooks.py)."""

from __future__ import annotations

import html as htmllib
import importlib.util
import re

import numpy as np
import pytest

from bridgebench.paths import REPO_ROOT
from bridgebench.results.store import ResultStore

spec = importlib.util.spec_from_file_location("render_notebooks", REPO_ROOT / "analysis" / "render_notebooks.py")
render_notebooks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(render_notebooks)

from tests.results.test_compare import pretrain_record  # noqa: E402  (store records as collect writes them)

#: notebook -> (minimum number of <img> plots in its HTML, texts the executed notebook must show)
EXPECTED = {
    "table1": (3, ["policies reproducing both blog NS figures within 5 %", "step time from perf table 26.02.01"]),
    "release_comparison": (
        3,
        [
            "26.02.01 -> 26.04: ▲ tflops x1.0511",
            "8 releases; change points: ['26.02', '26.04', '26.06']",
            "26.04 vs 26.02",
        ],
    ),
}


def test_every_analysis_notebook_is_listed():
    assert sorted(p.stem for p in render_notebooks.notebooks()) == sorted(EXPECTED)
    readme = (REPO_ROOT / "analysis" / "README.md").read_text()
    assert "jupytext" in readme and "percent" in readme


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_notebook_executes_and_renders_plots(name, tmp_path, monkeypatch):
    monkeypatch.setenv("BRIDGEBENCH_RESULTS", str(tmp_path / "runs"))
    monkeypatch.setenv("BRIDGEBENCH_TABLES", str(tmp_path / "tables"))
    if name == "release_comparison":  # own runs in two releases, so the "your runs" cells have work to do
        rng = np.random.default_rng(0)
        ResultStore(tmp_path / "runs").add(
            [pretrain_record(f"{i}/a0/pretrain", release="26.02", rng=rng) for i in range(3)]
            + [pretrain_record(f"{10 + i}/a0/pretrain", release="26.04", step=8.0, rng=rng) for i in range(3)]
        )
    html_path, nb_path = render_notebooks.render(REPO_ROOT / "analysis" / f"{name}.py", tmp_path / "out")
    html = html_path.read_text()
    n_img, texts = EXPECTED[name]
    assert len(re.findall(r'<img [^>]*src="data:image/png;base64,', html)) >= n_img
    shown = htmllib.unescape(html)
    for text in texts:
        assert text in shown, text
    assert "Traceback" not in html and nb_path.exists()


def test_a_raising_cell_fails_the_notebook(tmp_path):
    from nbclient.exceptions import CellExecutionError

    nb = tmp_path / "broken.py"
    nb.write_text(
        "# ---\n# jupyter:\n#   jupytext:\n#     text_representation:\n#       extension: .py\n"
        "#       format_name: percent\n#   kernelspec:\n#     display_name: Python 3\n#     language: python\n"
        "#     name: python3\n# ---\n\n# %%\n"
        "print('first cell ran')\n\n# %%\nraise ValueError('deliberate')\n"
    )
    with pytest.raises(CellExecutionError, match="deliberate"):
        render_notebooks.render(nb, tmp_path / "out")
    assert not (tmp_path / "out" / "broken.html").exists()
