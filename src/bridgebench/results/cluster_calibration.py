"""A calibration of *this* cluster from its completed runs (``bridgebench calibrate --from-runs [selection] --name
NAME``): the time model's predictions for the runs (kept by their plans: ``record["predicted"]``) refitted on their
measured step times with :func:`bridgebench.model.refit.refit` -- a level per cluster and per (GPU, precision) from
the first run, per-term factors as runs accumulate, each shrunk towards the published calibration in proportion to
the evidence -- with the leave-one-run-out error and the new bands, written as ``<calibration dir>/NAME.yaml``: the
base calibration's ``memory`` and ``time`` nodes unchanged, plus ``cluster_refit`` (the posterior, the base's name
and sha256, and provenance: run ids, record ids, the sha256 of every log the figures came from). ``sweep``,
``predict`` and ``muon-cost`` with ``--calibration NAME`` then price every point through the refit
(``bridgebench.sweep.scoring.cluster_refit``).

Replayed records (``payload: replay``) and measured ones are never mixed: the selection must say ``payload=replay``
to use replayed records, and then uses only those.
"""

from __future__ import annotations

import os
import statistics
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from bridgebench.config import calibration as calib_mod
from bridgebench.errors import BridgebenchError
from bridgebench.model import refit
from bridgebench.paths import CONFIG_DIR, USER_CONFIG_ENV


class ClusterCalibrationError(BridgebenchError):
    """No usable run, a bad name or a name that would overwrite a shipped calibration (rule ``calibrate_from_runs``)."""


def candidate_of_record(r: Mapping[str, Any]) -> refit.Candidate | None:
    """The refit's view of a record's prediction (None when its plan kept none, or kept no terms)."""
    p = r.get("predicted") or {}
    if not p.get("step_time_s") or not p.get("terms_s") or not p.get("flops_per_step"):
        return None
    return refit.Candidate(
        point_id=str(r.get("run_id") or "").split("-r")[0],
        step_s=float(p["step_time_s"]),
        flops=float(p["flops_per_step"]),
        num_gpus=int(p.get("num_gpus") or r.get("num_gpus") or 1),
        band_pct=float(p.get("band_pct") or 0.0),
        group=str(p.get("group") or f"{r.get('gpu_planned')}/{r.get('precision')}"),
        model=str(p.get("model") or r.get("model") or ""),
        terms={k: float(v) for k, v in p["terms_s"].items()},
        ep_scale_out=bool(p.get("ep_scale_out")),
    )


def select(records: Iterable[Mapping[str, Any]], tokens: list[str]) -> tuple[list[Mapping[str, Any]], list[str]]:
    """The completed records matching the selection (``key=value`` as ``compare`` reads them), replayed ones only
    when it says ``payload=replay``; returns them and what was left out and why."""
    from bridgebench.results.compare import parse_selection, run_matches

    replayed = any(t.replace(" ", "") == "payload=replay" for t in tokens)
    rest = [t for t in tokens if t.replace(" ", "") != "payload=replay"]
    sel = parse_selection(rest)
    out, notes = [], []
    counts = {"replayed (add payload=replay)": 0, "measured (payload=replay given)": 0, "not completed": 0,
              "no prediction kept by its plan": 0}  # fmt: skip
    for r in records:
        if r.get("kind") not in ("pretrain", "replay") or not run_matches(r, sel):
            continue
        is_replay = r.get("payload") == "replay" or r.get("kind") == "replay"
        if is_replay != replayed:
            counts["replayed (add payload=replay)" if is_replay else "measured (payload=replay given)"] += 1
        elif r.get("outcome") != "completed" or not r.get("step_time_s"):
            counts["not completed"] += 1
        elif candidate_of_record(r) is None:
            counts["no prediction kept by its plan"] += 1
        else:
            out.append(r)
    notes = [f"{n} record(s) left out: {why}" for why, n in counts.items() if n]
    return out, notes


def fit(records: list[Mapping[str, Any]], base: str = "default") -> dict[str, Any]:
    """The refit of the selected records: ``posterior`` (:class:`bridgebench.model.refit.Posterior`), ``loo``
    (leave-one-run-out rows), ``candidates``, ``measured`` (config hash -> median step s over its records),
    ``runs`` (per config: run ids, record ids, log sha256s).

    Raises:
        ClusterCalibrationError: no record.
    """
    if not records:
        raise ClusterCalibrationError("calibrate_from_runs: no completed record with a kept prediction matches")
    cands: dict[str, refit.Candidate] = {}
    steps: dict[str, list[float]] = {}
    runs: dict[str, dict[str, list]] = {}
    for r in records:
        c = candidate_of_record(r)
        cands.setdefault(c.point_id, c)
        steps.setdefault(c.point_id, []).append(float(r["step_time_s"]))
        info = runs.setdefault(c.point_id, {"run_ids": [], "record_ids": [], "log_sha256": []})
        info["run_ids"].append(r.get("run_id"))
        info["record_ids"].append(r.get("record_id"))
        info["log_sha256"] += [
            b.get("sha256") for b in (r.get("provenance") or {}).get("logs") or [] if b.get("sha256")
        ]
    measured = {p: statistics.median(v) for p, v in steps.items()}
    cl = list(cands.values())
    return {
        "posterior": refit.refit(cl, measured),
        "loo": refit.leave_one_run_out(cl, measured),
        "candidates": cl,
        "measured": measured,
        "runs": runs,
        "base": base,
    }


def output_path(name: str) -> Path:
    """``$BRIDGEBENCH_CONFIG_DIR/calibration/NAME.yaml`` when the user has a config folder, else
    ``configs/calibration/NAME.yaml``.

    Raises:
        ClusterCalibrationError: a name that is not a plain file stem, or that names a shipped calibration.
    """
    if not name or "/" in name or name.startswith(".") or not name.replace("_", "").replace("-", "").isalnum():
        raise ClusterCalibrationError(
            f"calibrate_from_runs: --name must be a plain name (letters, digits, _ -), got {name!r}"
        )
    shipped = CONFIG_DIR / "calibration" / f"{name}.yaml"
    existing = calib_mod.path_of(name)
    if shipped.exists() and not (yaml.safe_load(shipped.read_text()) or {}).get("cluster_refit"):
        raise ClusterCalibrationError(
            f"calibrate_from_runs: {name!r} is a published calibration ({shipped}); choose another --name"
        )
    if existing is not None and existing != shipped:
        return existing
    user = os.environ.get(USER_CONFIG_ENV, "").strip()
    folder = Path(user).expanduser().absolute() / "calibration" if user else CONFIG_DIR / "calibration"
    return folder / f"{name}.yaml"


def write(name: str, result: dict[str, Any], selection: list[str]) -> Path:
    """Write the cluster calibration (see the module docstring), atomically; returns its path."""
    base = calib_mod.load(result["base"])
    path = output_path(name)
    data = {k: v for k, v in base.raw.items() if k != "cluster_refit"}
    loo = result["loo"]
    data["source"] = (
        f"bridgebench calibrate --from-runs {' '.join(selection)} --name {name}: {len(result['measured'])} "
        f"configuration(s) of this cluster refitted on calibration {result['base']!r} (bridgebench.model.refit)"
    )
    data["cluster_refit"] = {
        "base": result["base"],
        "base_sha256": calib_mod.sha256(result["base"]),
        "created_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "selection": list(selection),
        "rule": refit.RULE,
        "posterior": result["posterior"].to_mapping(),
        "leave_one_run_out": [{k: (bool(v) if k == "inside" else v) for k, v in row.items()} for row in loo],
        "provenance": {p: info for p, info in sorted(result["runs"].items())},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}-", suffix=".yaml", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(
                f"# A calibration of one cluster, written by bridgebench calibrate --from-runs ({refit.__name__}).\n"
            )
            f.write(yaml.safe_dump(data, sort_keys=False, width=120))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
