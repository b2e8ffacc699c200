"""Figures without pyplot, and the layout check every plot bridgebench writes must pass.

:func:`new_figure` makes a ``matplotlib.figure.Figure`` on an Agg canvas: no pyplot, no global backend switch, no
GUI backend probing (``matplotlib.get_backend()`` resolving the automatic backend tries GUI toolkits: a second of
import on a headless machine), and safe in notebooks, whose inline backend it leaves alone. Layout is matplotlib's
constrained layout, which makes room for titles, colour bars and legends placed outside the axes.

:func:`layout_problems` draws a figure and lists every text artist (titles, labels, tick labels, annotations,
legend entries, colour-bar labels) whose box is not inside the figure, and every pair of texts whose boxes overlap
-- what a reader sees as clipped or colliding text. The plot tests call it on each PNG bridgebench writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: Pixels a text box may stick out of the figure or into another text box (anti-aliasing), at the figure's dpi.
TOLERANCE_PX = 1.0


def new_figure(figsize: tuple[float, float], dpi: float = 110, layout: str | None = "constrained") -> Any:
    """A ``matplotlib.figure.Figure`` of ``figsize`` inches on an Agg canvas (see the module docstring)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, dpi=dpi, layout=layout)
    FigureCanvasAgg(fig)
    return fig


def save_png(fig: Any, path: Path) -> Path:
    """Write ``fig`` as a PNG to ``path`` (the figure's dpi) and return the path."""
    fig.savefig(path, format="png")
    return Path(path)


def _live_tick_labels(fig: Any) -> set[int]:
    """ids of the tick labels that are drawn (ticks inside the view limits); the others are never rendered."""
    live: set[int] = set()
    for ax in fig.get_axes():
        for axis in (ax.xaxis, ax.yaxis):
            for tick in axis._update_ticks():  # the ticks matplotlib draws (private, stable since 3.1)
                for label in (tick.label1, tick.label2):
                    if label.get_visible():
                        live.add(id(label))
    return live


def text_boxes(fig: Any) -> list[tuple[str, Any, Any]]:
    """(description, text artist, window box in pixels) of every drawn, non-empty text of ``fig``."""
    from matplotlib.text import Text

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    live = _live_tick_labels(fig)
    tick_labels = {
        id(label)
        for ax in fig.get_axes()
        for axis in (ax.xaxis, ax.yaxis)
        for label in axis.get_ticklabels(minor=False) + axis.get_ticklabels(minor=True)
    }
    out = []
    seen: set[int] = set()
    for t in fig.findobj(Text):
        if id(t) in seen or not t.get_visible() or not t.get_text().strip():
            continue
        seen.add(id(t))
        if id(t) in tick_labels and id(t) not in live:
            continue
        box = t.get_window_extent(renderer)
        if box.width <= 0 or box.height <= 0:
            continue
        out.append((repr(t.get_text()[:60]), t, box))
    return out


def layout_problems(fig: Any, tolerance: float = TOLERANCE_PX) -> list[str]:
    """Every text box outside the figure and every overlapping pair of text boxes, as sentences (empty: fine)."""
    boxes = text_boxes(fig)
    w, h = fig.bbox.width, fig.bbox.height
    problems = []
    for name, _, b in boxes:
        if b.x0 < -tolerance or b.y0 < -tolerance or b.x1 > w + tolerance or b.y1 > h + tolerance:
            problems.append(
                f"text {name} is clipped: box x {b.x0:.0f}..{b.x1:.0f}, y {b.y0:.0f}..{b.y1:.0f} px; figure {w:.0f} x "
                f"{h:.0f} px"
            )
    for i in range(len(boxes)):
        name_a, _, a = boxes[i]
        for name_b, _, b in boxes[i + 1 :]:
            dx = min(a.x1, b.x1) - max(a.x0, b.x0)
            dy = min(a.y1, b.y1) - max(a.y0, b.y0)
            if dx > tolerance and dy > tolerance:
                problems.append(f"texts {name_a} and {name_b} overlap ({dx:.0f} x {dy:.0f} px)")
    return problems


def rank_text(ranks: list[int]) -> str:
    """``[1, 2, 3, 5]`` -> ``"1-3,5"``."""
    ranks = sorted({int(r) for r in ranks})
    parts, i = [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        parts.append(f"{ranks[i]}-{ranks[j]}" if j - i >= 2 else ",".join(map(str, ranks[i : j + 1])))
        i = j + 1
    return ",".join(parts)


def label_points(ax: Any, points: list[tuple[float, float, int]], fontsize: float = 8, merge_px: float = 14) -> list:
    """Number the points ``(x, y, rank)`` of ``ax`` without overlapping labels: points closer than ``merge_px`` on
    screen share one label (``"1-3,5"``), and each label takes the first offset around its point (then further out,
    with a leader line) whose box stays inside the axes and clear of the labels placed before. Freezes the figure's
    layout first (a later layout pass would move the axes under the labels). Returns the annotations."""
    fig = ax.figure
    fig.canvas.draw()
    fig.set_layout_engine("none")
    renderer = fig.canvas.get_renderer()
    xy = ax.transData.transform([(x, y) for x, y, _ in points]) if points else []
    groups: list[list[int]] = []
    for i in sorted(range(len(points)), key=lambda k: points[k][2]):
        px, py = xy[i]
        near = next(
            (g for g in groups if any(abs(px - xy[j][0]) < merge_px and abs(py - xy[j][1]) < merge_px for j in g)),
            None,
        )
        if near is None:
            groups.append([i])
        else:
            near.append(i)
    ring = [(5, 5), (5, -13), (-5, 5), (-5, -13), (0, 9), (0, -17), (9, -4), (-9, -4)]
    offsets = [(dx * k, dy * k) for k in (1, 2, 3, 4) for dx, dy in ring]
    placed: list[Any] = []
    boxes: list[Any] = []
    inside = ax.get_window_extent(renderer)
    for g in groups:
        x = sum(points[i][0] for i in g) / len(g)
        y = sum(points[i][1] for i in g) / len(g)
        text = rank_text([points[i][2] for i in g])
        chosen = None
        for n, (dx, dy) in enumerate(offsets):
            leader = {"arrowstyle": "-", "lw": 0.6, "color": "0.3"} if n >= len(ring) else None
            ha = "left" if dx > 0 else "right" if dx < 0 else "center"
            ann = ax.annotate(
                text, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=fontsize, ha=ha, arrowprops=leader
            )
            box = ann.get_window_extent(renderer)
            fits = box.x0 >= inside.x0 and box.x1 <= inside.x1 and box.y0 >= inside.y0 and box.y1 <= inside.y1
            clear = all(box.x1 <= b.x0 or box.x0 >= b.x1 or box.y1 <= b.y0 or box.y0 >= b.y1 for b in boxes)
            if fits and clear:
                chosen = (ann, box)
                break
            ann.remove()
        if chosen is None:  # nowhere free: the first offset, so the number is at least there
            ann = ax.annotate(text, (x, y), xytext=offsets[0], textcoords="offset points", fontsize=fontsize)
            chosen = (ann, ann.get_window_extent(renderer))
        placed.append(chosen[0])
        boxes.append(chosen[1])
    return placed
