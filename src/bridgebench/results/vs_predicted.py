"""Measured beside predicted, and replayed apart from measured.

A record of a pretrain or replay run carries what its plan predicted (``predicted``: step time, TFLOP/s/GPU, band,
release, calibration name and sha256; ``launch/plan.py``) and ``vs_predicted`` (error and inside-band, ``collect``).
:func:`rows` aggregates them per configuration (config hash): the median measured step over its completed records
against the prediction, and whether the median fell inside the band (``|log(measured / predicted)| <= band``).

Replayed records (``payload: replay``: their step times are a published table's, replayed on the local cluster by
``bridgebench.payloads.replay``) are never mixed with measured ones unless asked: :func:`choose` keeps one kind (or
both, labelled) and says which, and what it left out.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Iterable, Mapping

SHOW = ("measured", "replayed", "all")


def payload_of(r: Mapping[str, Any]) -> str:
    """``replayed`` for a replay record (``payload: replay`` or kind ``replay``), else ``measured``."""
    return "replayed" if r.get("payload") == "replay" or r.get("kind") == "replay" else "measured"


def choose(records: Iterable[Mapping[str, Any]], show: str = "measured") -> tuple[list[Mapping[str, Any]], str]:
    """The records of ``show`` (``measured``, ``replayed`` or ``all``) and a line saying which are shown and what
    was left out.

    Raises:
        ValueError: an unknown ``show``.
    """
    if show not in SHOW:
        raise ValueError(f"show must be one of {', '.join(SHOW)}, got {show!r}")
    records = list(records)
    kept = [r for r in records if show == "all" or payload_of(r) == show]
    other = len(records) - len(kept)
    what = {"measured": "measured runs only", "replayed": "replayed runs only (step times from a published table)",
            "all": "measured and replayed runs, labelled"}[show]  # fmt: skip
    left = ""
    if other:
        flag = "--payload replayed" if show == "measured" else "--payload measured"
        left = f"; {other} {'replayed' if show == 'measured' else 'measured'} record(s) left out ({flag} shows them)"
    return kept, f"showing {what}{left}"


def rows(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per configuration (config hash) with a kept prediction and completed records: ``config_hash``, ``name``,
    ``payload``, ``n``, ``measured_s`` (median), ``predicted_s``, ``error_pct`` (measured / predicted - 1),
    ``band_pct``, ``inside_band``, ``calibration``, ``release``; sorted by name."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in records:
        if r.get("outcome") == "completed" and r.get("step_time_s") and (r.get("predicted") or {}).get("step_time_s"):
            groups.setdefault(str(r.get("run_id") or "").split("-r")[0], []).append(r)
    out = []
    for h, rs in groups.items():
        p = rs[0]["predicted"]
        m = statistics.median(float(r["step_time_s"]) for r in rs)
        band = float(p.get("band_pct") or 0.0)
        pred = float(p["step_time_s"])
        out.append({
            "config_hash": h, "name": rs[0].get("name"), "payload": payload_of(rs[0]), "n": len(rs),
            "measured_s": m, "predicted_s": pred, "error_pct": 100 * (m / pred - 1),
            "band_pct": band, "inside_band": abs(math.log(m / pred)) <= band / 100,
            "calibration": p.get("calibration"), "release": p.get("release"),
        })  # fmt: skip
    return sorted(out, key=lambda r: str(r["name"]))


def print_table(console, records: Iterable[Mapping[str, Any]], title: str) -> list[dict[str, Any]]:
    """Print :func:`rows` as a rich table (nothing when no record kept a prediction); returns the rows."""
    from rich.table import Table

    out = rows(records)
    if not out:
        return out
    t = Table(title=title)
    for c in ("run", "payload", "n", "measured step s", "predicted s", "error %", "band +-%", "inside band",
              "calibration", "release"):  # fmt: skip
        t.add_column(c, justify="left" if c in ("run", "payload", "calibration") else "right")
    for r in out:
        t.add_row(str(r["name"]), r["payload"], str(r["n"]), f"{r['measured_s']:.3f}", f"{r['predicted_s']:.3f}",
                  f"{r['error_pct']:+.1f}", f"{r['band_pct']:.1f}", "yes" if r["inside_band"] else "NO",
                  str(r["calibration"]), str(r["release"]))  # fmt: skip
    console.print(t)
    inside = sum(r["inside_band"] for r in out)
    console.print(f"{inside} of {len(out)} configuration(s) measured inside their predicted band")
    return out
