"""``bridgebench sweep``: run the sweep engine's stages, plan the top K with real ConfigContainers, submit them, and
resume an interrupted sweep without doing any stage twice.

Stages 1-4 are the sweep pipeline (:func:`bridgebench.sweep.run_pipeline`, one call, one direction:
``enumerate`` -> ``rules`` -> ``memory`` -> ``time``, ranked with ties, indistinct points collapsed, the recipe's own
configuration and expert groups beyond NVLink marked); this module keeps their rows on disk (:class:`_Stages`, the
pipeline's ``StageStore``) and adds:

5. ``plan``: the top K, planned in this one process (Megatron imported once) by
   :func:`bridgebench.launch.plan.plan` (compose, rules, a validated Megatron-Bridge ``ConfigContainer``, the sbatch
   script) into ``<paths.plans>/sweep-<name>/<point id>/``, with progress and an ETA;
6. ``submit`` (``--submit``): each planned point through :func:`bridgebench.launch.submit.submit_planned` (the job
   ledger).

Everything lives in ``<paths.sweeps>/<name>/``: ``state.json`` (the space's fingerprint, which stages are done,
per-stage timings, planned and submitted points), ``stages/<n>-<stage>.parquet`` (the point rows after each stage),
and the outputs ``points.parquet``, ``summary.md`` and ``points.png``. Every file is written to a temporary name and
renamed, and a stage is marked done only after its rows are on disk, so an interrupt (Ctrl-C) loses at most the
stage in progress; ``--resume`` reloads the last finished stage and goes on. In stage 5 a point is skipped when its
config hash is already planned by this sweep, in the job ledger (submitted) or in the results store (measured).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Callable

from bridgebench import sweep as engine
from bridgebench.config import calibration as calib_mod
from bridgebench.config.compose import compose
from bridgebench.config.hashing import config_hash
from bridgebench.errors import BridgebenchError
from bridgebench.launch.ledger import Ledger
from bridgebench.paths import load_paths
from bridgebench.sweep.row import read_rows, write_rows

STAGES = (*engine.STAGES, "plan", "submit")
STATE_VERSION = 2


class SweepRunError(BridgebenchError):
    """A sweep that cannot start or resume (existing folder, different space); nothing is written."""


Progress = engine.Progress


@dataclass(kw_only=True)
class SweepResult:
    """What a sweep did: its folder, every point row, the planned / submitted top-K rows, per-stage timings
    (``{stage: {"seconds", "points", "resumed"}}``), counts by status and rule, and the output files."""

    name: str
    dir: Path
    rows: list[dict[str, Any]]
    top: list[dict[str, Any]]
    stages: dict[str, dict[str, Any]]
    counts: dict[str, Any]
    outputs: dict[str, Path] = field(default_factory=dict)
    space: engine.Space | None = None


# ---------------------------------------------------------------------------------------------------- files
class SweepDiskError(SweepRunError):
    """A sweep file could not be written (a full disk, a file-size limit, an I/O error); the message names the file.
    Nothing is half-written: the file keeps its previous content (or does not exist), and the stage it belongs to is
    not marked done, so ``--resume`` redoes it once there is room."""


def _disk_error(path: Path, err: OSError) -> SweepDiskError:
    import errno

    why = {
        errno.ENOSPC: "the disk is full",
        errno.EDQUOT: "the disk quota is used up",
        errno.EFBIG: "a file-size limit",
    }
    return SweepDiskError(
        f"cannot write the sweep file {path}: {why.get(err.errno or 0, 'an I/O error')} ({err.strerror or err}); "
        "nothing was half-written (the file keeps its previous content). Free space there (or point "
        "BRIDGEBENCH_SWEEPS at a disk with room) and run the same command with --resume: finished stages are kept"
    )


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file renamed over it (whole or not at all).

    Raises:
        SweepDiskError: naming ``path`` when the disk is full (nothing half-written).
    """

    def write(tmp: Path) -> None:
        with tmp.open("wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    _replace(path, write)


def _write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    """Rows to ``path`` atomically, through the typed row (:func:`bridgebench.sweep.row.write_rows`)."""
    _replace(path, lambda tmp: write_rows(tmp, rows))


def _replace(path: Path, write: Callable[[Path], None]) -> None:
    """``write`` a temporary file beside ``path`` (its folder made when missing), then rename it over ``path``; the
    temporary file is removed when anything fails.

    Raises:
        SweepDiskError: naming ``path`` for an OSError (disk full, quota, ...); other errors pass through.
    """
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
        os.close(fd)
        write(Path(tmp))
        os.replace(tmp, path)
    except BaseException as err:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise _disk_error(path, err) from None
        raise


def _read_rows(path: Path) -> list[dict[str, Any]]:
    """The records of a stage or points file, types restored (:func:`bridgebench.sweep.row.read_rows`)."""
    return read_rows(path)


class _Stages:
    """The pipeline's :class:`bridgebench.sweep.StageStore` for a sweep folder: a stage done before (per
    ``state.json``, its rows in ``stages/<n>-<stage>.parquet``) is loaded instead of run; a finished stage's rows are
    written before it is marked done."""

    def __init__(self, state: _State, out: Path, timings: dict[str, dict[str, Any]], say: Progress):
        self.state, self.out, self.timings, self.say = state, out, timings, say

    def _file(self, stage: str, index: int) -> Path:
        return self.out / "stages" / f"{index}-{stage}.parquet"

    def load(self, stage: str, index: int) -> list[dict[str, Any]] | None:
        file = self._file(stage, index)
        if not (self.state.done(stage) and file.exists()):
            return None
        info = self.state.data["stages"][stage]
        try:
            rows = _read_rows(file)
        except Exception as err:  # noqa: BLE001  (pyarrow raises several kinds for a damaged file)
            # a corrupt or truncated stage file: redo this stage and every later one (they were made from it)
            self.say.log(
                f"stage {index} {stage}: its file {file} is corrupt ({type(err).__name__}: "
                f"{str(err).splitlines()[0] if str(err) else ''}); redoing this stage and the ones after it"
            )
            self.state.forget(stage)
            return None
        self.timings[stage] = {"seconds": info["seconds"], "points": info["points"], "resumed": True}
        self.say.log(f"stage {index} {stage}: done before ({info['points']} points), loaded")
        return rows

    def save(self, stage: str, index: int, rows: list[dict[str, Any]], seconds: float, points: int) -> None:
        file = self._file(stage, index)
        _write_rows(file, rows)
        self.state.finish(stage, seconds, points, file.name)
        self.timings[stage] = {"seconds": seconds, "points": points, "resumed": False}


class _State:
    """``state.json`` of a sweep folder, rewritten atomically on every change."""

    def __init__(self, path: Path, data: dict[str, Any]):
        self.path = path
        self.data = data

    @classmethod
    def load(cls, path: Path) -> _State:
        """Raises :class:`SweepRunError` naming the file when it is not the JSON object a sweep writes."""
        try:
            data = json.loads(path.read_text())
            if not isinstance(data, dict) or not isinstance(data.get("stages"), dict):
                raise ValueError("not a sweep state object")
        except (OSError, ValueError) as err:
            raise SweepRunError(
                f"sweep_state_corrupt: {path} cannot be read ({err}); its stages cannot be trusted. Move the sweep "
                f"folder aside (mv {path.parent} {path.parent}.corrupt) and run the sweep again, or use --name"
            ) from None
        return cls(path, data)

    def forget(self, stage: str) -> None:
        """Mark ``stage`` and every later pipeline stage not done (their rows are redone)."""
        later = STAGES[STAGES.index(stage) :]
        for s in later:
            if s in engine.STAGES and s in self.data["stages"]:
                self.data["stages"][s]["done"] = False
        self.save()

    def save(self) -> None:
        atomic_write(self.path, json.dumps(self.data, indent=2, default=str).encode())

    def done(self, stage: str) -> bool:
        return bool(self.data["stages"].get(stage, {}).get("done"))

    def finish(self, stage: str, seconds: float, points: int, rows_file: str | None) -> None:
        self.data["stages"][stage] = {
            "done": True,
            "seconds": seconds,
            "points": points,
            "rows": rows_file,
            "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "runs": self.data["stages"].get(stage, {}).get("runs", 0) + 1,
        }
        self.save()


# ---------------------------------------------------------------------------------------------------- run
def sweep_dir(name: str) -> Path:
    return load_paths().sweeps / name  # configs/paths: sweeps


def default_name(space: engine.Space) -> str:
    """``<space>-<recipe/model/experiment>-<optimizer>``, from the fixed overrides."""
    parts = [space.name]
    for key in ("experiment", "recipe", "model", "optimizer", "gpu", "precision"):
        for o in space.fixed:
            if o.split("=", 1)[0].lstrip("+~") == key:
                parts.append(o.split("=", 1)[1].strip("'\""))
    return "-".join(dict.fromkeys(parts))


def run_sweep(
    overrides: list[str],
    *,
    space: str | None = None,
    name: str | None = None,
    top_k: int | None = None,
    calibration: str = "default",
    submit: bool = False,
    resume: bool = False,
    repeats: int = 1,
    progress: Progress | None = None,
    ledger: Ledger | None = None,
    store: Any = None,
) -> SweepResult:
    """Run (or resume) a sweep; see the module docstring.

    Raises:
        bridgebench.sweep.SweepError: an empty space, an unknown field, a value of the wrong type or a
            non-positive size (before anything is written).
        SweepRunError: the sweep folder exists and ``resume`` is off, or ``resume`` with a different space.
        bridgebench.config.calibration.CalibrationError: an unknown calibration.
    """
    say = progress or engine.Quiet()
    calib = calib_mod.load(calibration)
    say.start("compose", 0)
    sp, bases = engine.prepare(overrides, space, top_k=top_k, progress=say.update)  # raises before any write
    name = name or default_name(sp)
    if not name or "/" in name or name.startswith("."):
        raise SweepRunError(f"bad sweep name {name!r}: a folder name without '/' is needed")
    out = sweep_dir(name)
    state = _open_state(out, name, sp, calibration, resume, say)
    (out / "stages").mkdir(exist_ok=True)
    timings: dict[str, dict[str, Any]] = {}
    rows = engine.run_pipeline(bases, calib, space=sp, store=_Stages(state, out, timings, say), progress=say)
    ranked = sorted((r for r in rows if r["status"] == "ranked"), key=lambda r: r["rank"])
    top = ranked[: sp.top_k]
    _plan_and_submit(top, bases, sp, state, name, say, ledger, store, timings, submit=submit, repeats=repeats)
    _carry_outcomes(rows, state)
    counts = engine.summarize(rows)
    from bridgebench.results.sweep_report import write_outputs

    chosen = [r for r in rows if r.get("rank") is not None and r["rank"] <= len(top)]  # duplicates share ids
    result = SweepResult(
        name=name,
        dir=out,
        rows=rows,
        top=sorted(chosen, key=lambda r: r["rank"]),
        stages=timings,
        counts=counts,
        space=sp,
    )
    try:
        result.outputs = write_outputs(result, state.data, calib)
    except OSError as err:  # a full disk: name the file, leave the previous outputs whole
        raise _disk_error(Path(err.filename or out), err) from None
    return result


def _open_state(out: Path, name: str, sp: engine.Space, calibration: str, resume: bool, say: Progress) -> _State:
    """The sweep folder's state: loaded with ``resume`` (same space and calibration), else a new one written.

    Raises:
        SweepRunError: the folder exists without ``resume``, or was started with another space or calibration.
    """
    state_path = out / "state.json"
    fingerprint = sp.fingerprint()
    if state_path.exists():
        if not resume:
            raise SweepRunError(
                f"sweep {name!r} exists ({out}): add --resume to continue it, or --name to start another"
            )
        state = _State.load(state_path)
        if state.data.get("fingerprint") != fingerprint or state.data.get("calibration") != calibration:
            raise SweepRunError(
                f"sweep {name!r} was started with another space or calibration ({state.data.get('space_source')}, "
                f"{state.data.get('calibration')}); --resume needs the same overrides and space, or use --name"
            )
        say.log(f"resuming sweep {name!r}: stages done: {[s for s in STAGES if state.done(s)] or 'none'}")
    else:
        if resume:
            say.log(f"nothing to resume for {name!r}: starting it")
        state = _State(
            state_path,
            {
                "version": STATE_VERSION,
                "name": name,
                "fingerprint": fingerprint,
                "calibration": calibration,
                "space_source": sp.source,
                "fixed": sp.fixed,
                "axes": {a.key: [repr(v) for v in a.values] for a in sp.axes},
                "top_k": sp.top_k,
                "created": datetime.now(UTC).isoformat(timespec="seconds"),
                "stages": {},
                "plans": {},
                "submitted": {},
            },
        )
        out.mkdir(parents=True, exist_ok=True)
        state.save()
    return state


def _plan_and_submit(
    top, bases, sp, state: _State, name: str, say: Progress, ledger, store, timings, *, submit: bool, repeats: int
) -> None:
    """Stages 5 and 6 for the top K, each skipped when a resumed sweep has done it for these points."""
    pids = {r["point_id"] for r in top}
    if top and state.done("plan") and pids <= set(state.data["plans"]):
        info = state.data["stages"]["plan"]
        timings["plan"] = {"seconds": info["seconds"], "points": info["points"], "resumed": True}
        say.log(f"stage 5 plan: done before ({len(top)} points), nothing to plan")
    elif top:
        _plan_top(top, bases, sp, state, name, say, ledger, store, timings)
    planned = {p for p in pids if state.data["plans"].get(p, {}).get("status") == "planned"}
    if submit and top and state.done("submit") and planned <= set(state.data["submitted"]):
        info = state.data["stages"]["submit"]
        timings["submit"] = {"seconds": info["seconds"], "points": info["points"], "resumed": True}
        say.log("stage 6 submit: done before, nothing to submit")
    elif submit and top:
        _submit_top(top, state, say, ledger, repeats, timings)


def _carry_outcomes(rows: list[dict[str, Any]], state: _State) -> None:
    """Carry the stage-5/6 outcomes (plan status, config hash, plan folder, run ids) into the ranked rows."""
    for r in rows:
        info = state.data["plans"].get(r["point_id"]) if r["status"] == "ranked" else None
        if info:
            r.update(status=info["status"], config_hash=info.get("config_hash"), plan_dir=info.get("plan_dir"))
            r["reason"] = info.get("reason", r.get("reason", ""))
            if r["point_id"] in state.data["submitted"]:
                r["status"] = "submitted"
                r["run_ids"] = ",".join(state.data["submitted"][r["point_id"]])


def _plan_top(top, bases, sp, state: _State, name: str, say: Progress, ledger, store, timings) -> None:
    """Stage 5: plan each top-K point in this process (Megatron-Bridge imported once, by the first point), one plan
    folder per point, recorded in the state as soon as it is written, with per-point seconds and an ETA. Each
    point is composed once: its config hash decides whether it is skipped, and the same config is planned."""
    from bridgebench.launch.plan import PlanError, plan

    t0 = time.perf_counter()
    say.start("5 plan", len(top))
    ledger = ledger or Ledger()
    submitted = {a.run_id.split("-r")[0] for a in ledger.attempts()}
    if store is None:
        from bridgebench.launch.collect import default_store

        store = default_store()
    measured = {str(r.get("config_hash")) for r in store.records() if r.get("config_hash")}
    plans_root = load_paths().plans / f"sweep-{name}"
    planned_hashes = {v.get("config_hash") for v in state.data["plans"].values() if v.get("status") == "planned"}
    resumed = 0
    took: list[float] = []
    for i, row in enumerate(top, 1):
        pid = row["point_id"]
        if pid in state.data["plans"]:  # planned, skipped or failed before: never planned twice
            resumed += 1
            say.update(i, len(top))
            continue
        t = time.perf_counter()
        base = bases[row["base"]]
        overrides = engine.point_overrides(base, json.loads(row["delta"]))
        cfg = compose(overrides)
        h = config_hash(cfg)
        info: dict[str, Any] = {"config_hash": h, "overrides": overrides}
        if h in planned_hashes:
            info.update(status="skipped", reason=f"config {h} already planned by this sweep")
        elif h in submitted:
            info.update(status="skipped", reason=f"config {h} already in the job ledger (submitted)")
        elif h in measured:
            info.update(status="skipped", reason=f"config {h} already measured (results store)")
        else:
            invalid = []
            try:
                plan_dir, runs = plan(overrides, plans_root / pid, on_invalid=invalid.append, composed=cfg)
                info.update(status="planned", plan_dir=str(plan_dir), run=runs[0].name, reason="")
                planned_hashes.add(h)
            except PlanError as err:
                bad = invalid[0] if invalid else None
                info.update(
                    status="plan_failed", rule=bad.rule if bad else "plan", reason=bad.reason if bad else str(err)
                )
        took.append(time.perf_counter() - t)
        info["seconds"] = took[-1]
        state.data["plans"][pid] = info
        state.save()
        say.update(i, len(top))
        left = len(top) - i
        if left:  # the first point imports Megatron-Bridge: the ETA uses the points after it when there are any
            per = sum(took[1:]) / len(took[1:]) if len(took) > 1 else took[0]
            say.log(f"planned {i}/{len(top)} ({took[-1]:.1f} s); ETA {left * per:.0f} s")
    timings["plan"] = {"seconds": time.perf_counter() - t0, "points": len(top), "resumed": resumed == len(top)}
    if took:
        timings["plan"]["first_point_s"] = took[0]
        if len(took) > 1:
            timings["plan"]["per_point_after_first_s"] = sum(took[1:]) / len(took[1:])
    state.finish("plan", timings["plan"]["seconds"], len(top), None)


def _submit_top(top, state: _State, say: Progress, ledger, repeats: int, timings) -> None:
    """Stage 6: submit every planned top-K point not submitted yet, recording its run ids at once."""
    from bridgebench.launch.plan import PlannedRun
    from bridgebench.launch.submit import submit_planned

    t0 = time.perf_counter()
    say.start("6 submit", len(top))
    ledger = ledger or Ledger()
    in_ledger = {a.run_id.split("-r")[0] for a in ledger.attempts()}
    for i, row in enumerate(top, 1):
        pid = row["point_id"]
        info = state.data["plans"].get(pid) or {}
        if info.get("status") != "planned" or pid in state.data["submitted"]:
            say.update(i, len(top))
            continue
        if info["config_hash"] in in_ledger:
            state.data["submitted"][pid] = [f"{info['config_hash']}-r{r}" for r in range(repeats)]
            state.save()
            continue
        run_json = Path(info["plan_dir"]) / info["run"] / "run.json"
        run = PlannedRun.from_json(json.loads(run_json.read_text()))
        attempts = submit_planned([run], repeats=repeats, again=True, ledger=ledger, progress=say.log)
        state.data["submitted"][pid] = [a.run_id for a in attempts]
        state.save()
        say.update(i, len(top))
    timings["submit"] = {"seconds": time.perf_counter() - t0, "points": len(top), "resumed": False}
    state.finish("submit", timings["submit"]["seconds"], len(top), None)
