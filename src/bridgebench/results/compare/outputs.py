"""A comparison's files: its output folder, the tables (CSV and parquet with provenance in the file's metadata), the
plots and the provenance JSON; refuses to overwrite tracked files."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from bridgebench.paths import REPO_ROOT
from bridgebench.results.compare.histories import speedup_matrix
from bridgebench.results.compare.result import CompareResult
from bridgebench.results.compare.selection import Selection
from bridgebench.results.compare_stats import CompareError


def output_dir(tables_root: Path, result: CompareResult, common: Selection, sides: Sequence[Selection] = ()) -> Path:
    """``<tables>/compare/<source>_<selection slug>[_A_<side A>_vs_B_<side B>]`` (``configs/paths`` ``tables``)."""

    def slug_of(sel: Selection) -> str:
        text = "_".join(f"{k}-{'+'.join(v)}" for k, v in sel.items if k != "release")
        if sel.get("release"):
            text += f"_{sel.get('release')[0]}..{sel.get('release')[-1]}"
        return text.strip("_")

    slug = slug_of(common) or "all"
    if len(sides) == 2:
        slug += f"_A_{slug_of(sides[0])}_vs_B_{slug_of(sides[1])}"
    slug = "".join(c if c.isalnum() or c in "-_.+" else "_" for c in slug)
    if len(slug) > 120:  # keep names short and still distinct
        slug = slug[:100] + "_" + hashlib.sha256(slug.encode()).hexdigest()[:12]
    return Path(tables_root) / "compare" / f"{result.source}_{slug}"


def _tracked(paths: Sequence[Path]) -> list[Path]:
    """Those of ``paths`` git tracks in the repository (empty when git or the repository is unavailable)."""
    inside = []
    for p in paths:
        try:
            inside.append(str(Path(p).resolve().relative_to(REPO_ROOT)))
        except ValueError:
            continue
    if not inside or not (REPO_ROOT / ".git").exists():
        return []
    try:
        out = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "ls-files", "--", *inside], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    tracked = set(out.stdout.split())
    return [Path(REPO_ROOT / t) for t in inside if t in tracked]


def write_outputs(
    result: CompareResult, out_dir: Path, *, plots: bool = True, progress: Callable[[str], None] = lambda s: None
) -> list[Path]:
    """Write the tables (CSV and Parquet, the provenance in the Parquet metadata), ``provenance.json`` and the plots
    (``history.png``, ``speedup_heatmap.png``, ``runs.png``) into ``out_dir``.

    Everything is written into a temporary folder beside ``out_dir`` first and then renamed into place file by file,
    so a failure leaves the previous outputs intact and a reader never sees half a file.

    Raises:
        CompareError: a target file is tracked by git (the outputs never overwrite the repository's files).
    """
    out_dir = Path(out_dir)
    tables = result.tables()
    names = [f"{n}.{ext}" for n in tables for ext in ("csv", "parquet")] + ["provenance.json"]
    if plots:
        names += (["history.png", "speedup_heatmap.png"] if result.histories else []) + (
            ["runs.png"] if (result.sides or result.own) else []
        )
    targets = [out_dir / n for n in names]
    tracked = _tracked(targets)
    if tracked:
        raise CompareError(
            f"refusing to overwrite tracked file(s) {[str(t) for t in tracked]}; choose another --out "
            "or BRIDGEBENCH_TABLES"
        )
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".compare-", dir=out_dir.parent) as tmp:
        tmp = Path(tmp)
        meta = json.dumps(result.provenance, sort_keys=True, default=str)
        for name, df in tables.items():
            df.to_csv(tmp / f"{name}.csv", index=False, float_format="%.6g")
            _parquet(df, tmp / f"{name}.parquet", meta)
        (tmp / "provenance.json").write_text(
            json.dumps(result.provenance, indent=2, sort_keys=True, default=str) + "\n"
        )
        if plots:
            from bridgebench.results.compare import plots as cp

            if result.histories:
                progress("plotting the release histories ...")
                cp.history_plot(result.histories, tmp / "history.png")
                cp.speedup_heatmap(*speedup_matrix(result.histories), tmp / "speedup_heatmap.png")
            if result.sides or result.own:
                progress("plotting the run comparison ...")
                cp.runs_plot(result, tmp / "runs.png")
        out_dir.mkdir(parents=True, exist_ok=True)
        for n in names:
            os.replace(tmp / n, out_dir / n)
    return targets


def _parquet(df: pd.DataFrame, path: Path, provenance: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(df, preserve_index=False)
    table = table.replace_schema_metadata(
        {**(table.schema.metadata or {}), b"bridgebench.provenance": provenance.encode()}
    )
    pq.write_table(table, path)


def parquet_provenance(path: Path) -> dict[str, Any]:
    """The provenance stored in a compare Parquet file's metadata."""
    import pyarrow.parquet as pq

    return json.loads(pq.read_schema(path).metadata[b"bridgebench.provenance"])
