"""Every plot bridgebench writes reads: no text outside the figure, no text on top of another, colour bars in the
units the cells print (issue 18). Plots: table1.png (``bridgebench table``), history.png, speedup_heatmap.png and
runs.png (``bridgebench compare``), points.png (``bridgebench sweep``). Each is built as the command builds it and
checked with :func:`bridgebench.results.plot_canvas.layout_problems`, which draws it and compares every text box."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from bridgebench.results import compare as cmp
from bridgebench.results.compare import plots as cp
from bridgebench.results.plot_canvas import layout_problems, new_figure, rank_text


def test_the_checker_sees_clipped_and_overlapping_text():
    """The check itself can fail: text past the edge and two texts on one spot are reported."""
    fig = new_figure((4, 3), layout=None)
    ax = fig.add_subplot()
    ax.text(0.5, 0.5, "here", transform=ax.transAxes)
    ax.text(0.5, 0.5, "here too", transform=ax.transAxes)
    ax.text(1.3, 0.5, "past the edge", transform=ax.transAxes)
    problems = layout_problems(fig)
    assert any("'here' and 'here too' overlap" in p for p in problems)
    assert any("'past the edge' is clipped" in p for p in problems)


@pytest.fixture(scope="module")
def table():
    from bridgebench.results.table1 import reproduce

    return reproduce()


def test_table1_png(table):
    from bridgebench.results.plots import table1_figure

    fig = table1_figure(table)
    assert layout_problems(fig) == []
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert "AdamW\nindependent check" in labels and "Muon\nderived from blog" in labels  # what each row proves


@pytest.mark.parametrize("selection", ["model=kimi_k2 gpu=gb300", "model=qwen3_30b_a3b gpu=gb200", ""])
def test_history_and_heatmap_pngs(selection):
    result = cmp.run_compare("published", cmp.parse_selection(selection))
    hist = cp.history_figure(result.histories)
    assert layout_problems(hist) == []
    ratio, real, like = cmp.speedup_matrix(result.histories)
    heat = cp.speedup_figure(ratio, real, like)
    assert layout_problems(heat) == []
    # the colour bar speaks the cells' language: its tick labels are speedup ratios at log2 positions, and its range
    # reaches the data (clipped beyond 2x with arrows, said in the label)
    image = heat.axes[0].images[0]
    bar = heat.axes[1]
    ticks = [(float(t.get_text()), pos) for t, pos in zip(bar.get_yticklabels(), bar.get_yticks())]
    assert (1.0, 0.0) in ticks and all(math.isclose(math.log2(r), pos, abs_tol=1e-9) for r, pos in ticks)
    data = np.log2(ratio.to_numpy(dtype=float))
    top = float(np.nanmax(np.abs(data)))
    assert image.norm.vmax == pytest.approx(min(max(top, math.log2(1.05)), 1.0))
    if top > 1.0:
        assert "clipped" in bar.get_ylabel()


def test_history_marks_and_formula_notes_stay_inside_their_axes():
    """Issue 18: the last release's mark was clipped and the 'FLOPs v1->v2' note ran out of the axes."""
    result = cmp.run_compare("published", cmp.parse_selection("model=kimi_k2 gpu=gb300"))
    fig = cp.history_figure(result.histories)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    box = ax.get_window_extent(renderer)
    inner = [t for t in ax.texts if t.get_text().strip()]
    assert any("FLOPs v1→v2" in t.get_text() for t in inner)
    for t in inner:
        b = t.get_window_extent(renderer)
        assert box.x0 - 1 <= b.x0 and b.x1 <= box.x1 + 1 and box.y0 - 1 <= b.y0 and b.y1 <= box.y1 + 1, t.get_text()


def test_runs_png():
    from tests.results.test_compare import pretrain_record

    rng = np.random.default_rng(3)
    recs = [pretrain_record(f"{100 + i}/a0/pretrain", optimizer="adam", step=8.6, rng=rng) for i in range(4)]
    recs += [pretrain_record(f"{200 + i}/a0/pretrain", optimizer="dist_muon", step=9.0, rng=rng) for i in range(4)]
    result = cmp.run_compare(
        "runs",
        cmp.parse_selection("model=qwen3_30b_a3b"),
        sel_a=cmp.parse_selection("optimizer=adamw"),
        sel_b=cmp.parse_selection("optimizer=muon"),
        store_records=recs,
        n_resamples=200,
        n_inner=20,
    )
    assert layout_problems(cp.runs_figure(result)) == []


def _sweep_points(n: int = 300, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        mem = float(rng.uniform(40, 320))
        rows.append(
            {
                "rank": None,
                "status": "over_memory" if mem > 259 else "ranked",
                "gpu": "gb300",
                "hbm_usable_gb": 288 * 0.9,
                "mem_total_gb": mem,
                "tflops_per_gpu": float(rng.uniform(200, 760)),
            }
        )
    return rows


@pytest.mark.parametrize("spread", ["clump", "spread", "pairs"])
def test_sweep_points_png_numbers_the_top_points_without_overlap(spread):
    """Issue 18: the eight top-point labels of a Kimi K2 sweep overlapped in one clump. Points that sit on top of each
    other share one label ('1-8'); the others get labels that do not collide."""
    from bridgebench.config import calibration
    from bridgebench.results.sweep_report import points_figure

    rows = _sweep_points()
    where = {
        "clump": [(140.0 + 0.3 * i, 740.0 - 0.2 * i) for i in range(8)],
        "spread": [(60.0 + 30 * i, 700.0 + 5 * (i % 3)) for i in range(8)],
        "pairs": [(100.0 + 40 * (i // 2) + 0.5 * (i % 2), 745.0) for i in range(8)],
    }[spread]
    top = [
        dict(rows[0], rank=i + 1, status="planned", mem_total_gb=m, tflops_per_gpu=t) for i, (m, t) in enumerate(where)
    ]
    fig = points_figure(SimpleNamespace(rows=rows + top, top=top, name=f"test-{spread}"), calibration.load("default"))
    assert layout_problems(fig) == []
    labels = sorted(t.get_text() for t in fig.axes[0].texts)
    numbered = sorted(int(x) for label in labels for part in label.split(",") for x in _expand(part))
    assert numbered == list(range(1, 9))  # every rank named exactly once
    if spread == "clump":
        assert labels == ["1-8"]


def _expand(part: str) -> list[int]:
    a, _, b = part.partition("-")
    return list(range(int(a), int(b) + 1)) if b else [int(a)]


def test_rank_text():
    assert rank_text([3, 1, 2, 5, 8, 7]) == "1-3,5,7,8"
    assert rank_text([4.0]) == "4"
