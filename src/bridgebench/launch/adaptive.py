"""``bridgebench sweep ... --adaptive --budget N``: a sweep that learns from the cluster it runs on.

Stages 1-4 are the sweep's (:func:`bridgebench.launch.sweep.run_sweep`, nothing planned up front); then rounds of

    choose -> plan -> submit (the job ledger) -> wait -> collect -> refit -> re-rank

over the ranked points, with :mod:`bridgebench.model.refit` (the same code ``benchmarks/bench_adaptive.py``
simulates offline): the first round measures the best predicted point; each later round the unmeasured point(s) with
the largest expected improvement over the best measured throughput under the refitted posterior plus the expected
reduction of the other unmeasured points' prediction error (rule :data:`bridgebench.model.refit.RULE`); the loop
stops when the best measured point beats every unmeasured point's optimistic band edge (``converged``), when
``budget`` runs were spent (``budget``), or when nothing is left to measure (``exhausted``). A point whose run ended
without a step time (out of memory, an error) counts against the budget and is not chosen again.

State: ``<sweep dir>/adaptive.json``, written (temp file + rename) after every plan and every submission, so Ctrl-C
or a lost controller loses nothing: ``--resume`` adopts a chosen point whose run the ledger already has (submitted
just before the interrupt) instead of submitting it again, waits for what is still running, and goes on. Outputs:
``rounds.parquet`` (one row per measured point per round: why it was chosen, predicted vs measured, the best so far,
the posterior's level and median band after the round) and an "Adaptive rounds" section in ``summary.md`` (what was
measured and why, how the ranking and the bands moved, GPU-hours spent against a full grid of the valid points).
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bridgebench import sweep as engine
from bridgebench.config.compose import compose
from bridgebench.config.hashing import config_hash
from bridgebench.errors import BridgebenchError
from bridgebench.launch.ledger import Ledger
from bridgebench.model import refit
from bridgebench.paths import load_paths

STATE = "adaptive.json"


class AdaptiveError(BridgebenchError):
    """An adaptive sweep that cannot start or go on (rule ``adaptive_budget``: no budget; a resumed sweep with
    another budget is allowed, another calibration is not)."""


@dataclass(kw_only=True)
class AdaptiveResult:
    """What an adaptive sweep did: the sweep's result, the rounds, the stop reason, GPU-hours."""

    sweep: Any
    rounds: list[dict[str, Any]]
    stop: str | None
    best: dict[str, Any] | None
    gpu_hours: dict[str, float]
    outputs: dict[str, Path] = field(default_factory=dict)


def candidate_of(row: dict[str, Any]) -> refit.Candidate:
    """A ranked sweep row as a :class:`bridgebench.model.refit.Candidate` (its prediction and band as the time
    model returned them)."""
    step = float(row["step_time_s"])
    return refit.Candidate(
        point_id=str(row["point_id"]),
        step_s=step,
        flops=float(row["tflops_per_gpu"]) * step * int(row["num_gpus"]) * 1e12,
        num_gpus=int(row["num_gpus"]),
        band_pct=float(row.get("band_pct") or 0.0),
        group=f"{row['gpu']}/{row['precision']}",
        model=str(row.get("model") or ""),
        terms={k[2:-2]: float(v) for k, v in row.items() if k.startswith("t_") and k.endswith("_s") and v == v},
        ep_scale_out=bool(row.get("ep_scale_out")),
    )


def _save(path: Path, data: dict[str, Any]) -> None:
    from bridgebench.launch.sweep import atomic_write

    atomic_write(path, json.dumps(data, indent=2, default=str).encode())


def _measured(store, hashes: dict[str, str]) -> tuple[dict[str, float], dict[str, str]]:
    """Point id -> measured step (s) of completed records, and point id -> outcome of points that ended without one."""
    by_hash = {h: pid for pid, h in hashes.items()}
    ok: dict[str, list[float]] = {}
    bad: dict[str, str] = {}
    for r in store.records():
        h = str(r.get("run_id") or "").split("-r")[0]
        pid = by_hash.get(h)
        if pid is None:
            continue
        if r.get("outcome") == "completed" and r.get("step_time_s"):
            ok.setdefault(pid, []).append(float(r["step_time_s"]))
        else:
            bad[pid] = f"{r.get('outcome')}: {r.get('outcome_detail') or r.get('log_outcome_detail') or ''}"[:200]
    return {p: statistics.median(v) for p, v in ok.items()}, {p: w for p, w in bad.items() if p not in ok}


def run_adaptive(
    overrides: list[str],
    *,
    space: str | None,
    name: str | None,
    budget: int,
    calibration: str = "default",
    per_round: int = 1,
    resume: bool = False,
    wait_timeout_s: float = 3600.0,
    poll_s: float = 2.0,
    progress: engine.Progress | None = None,
    ledger: Ledger | None = None,
    store: Any = None,
) -> AdaptiveResult:
    """Run (or resume) an adaptive sweep; see the module docstring. Submits and waits: the loop needs each round's
    measurements to choose the next.

    Raises:
        AdaptiveError: ``budget`` < 1, ``per_round`` < 1.
        bridgebench.launch.sweep.SweepRunError: the sweep exists and ``resume`` is off, or another space.
        bridgebench.launch.submit.SubmitError: the cluster refused a submission (what was submitted is kept).
    """
    from bridgebench.launch.collect import default_store
    from bridgebench.launch.sweep import run_sweep

    if budget is None or budget < 1:
        raise AdaptiveError(f"adaptive_budget: --adaptive needs --budget N >= 1 (runs to spend), got {budget!r}")
    if per_round < 1:
        raise AdaptiveError(f"adaptive_budget: --per-round must be >= 1, got {per_round}")
    say = progress or engine.Quiet()
    ledger = ledger or Ledger()
    store = store if store is not None else default_store()
    result = run_sweep(
        overrides, space=space, name=name, top_k=0, calibration=calibration, resume=resume, progress=say,
        ledger=ledger, store=store,
    )  # fmt: skip
    loop = _Loop(result, _state(result, budget, per_round, calibration), say, ledger, store)
    while True:
        loop.submit_pending()  # chosen but not submitted (an interrupt between plan and submit): submit or adopt
        loop.wait_and_collect(wait_timeout_s, poll_s)
        post, measured, failed, unsettled = loop.assess()
        spent = len(loop.state["chosen"])
        stop = refit.stop_reason(loop.cands, post, spent=spent, budget=budget, exclude=[*failed, *unsettled])
        if unsettled:
            stop = "wait_timeout"
        else:
            _round_record(loop.state, loop.cands, post, measured, failed)
        if not stop:
            picks = refit.choose(
                loop.cands, post, k=min(per_round, budget - spent), exclude=[*failed, *loop.state["chosen"]]
            )
            loop.plan_and_submit(picks, post, calibration)
            stop = None if picks else "exhausted"
        if stop:
            loop.state["stop"] = stop
            loop.save()
            break
    measured, _ = loop.measured()
    out = AdaptiveResult(
        sweep=result,
        rounds=_rounds_rows(loop.state),
        stop=loop.state["stop"],
        best=loop.best(measured),
        gpu_hours=_gpu_hours(loop.cands, measured, loop.state),
    )
    out.outputs = _write(result, loop.state, out, loop.cands)
    return out


def _state(result, budget: int, per_round: int, calibration: str) -> dict[str, Any]:
    """The sweep's adaptive state: loaded (a resume; the budget may change, the calibration may not) or new."""
    path = result.dir / STATE
    if path.exists():
        state = json.loads(path.read_text())
        if state.get("calibration") != calibration:
            raise AdaptiveError(
                f"adaptive_budget: sweep {result.name!r} was started with calibration {state.get('calibration')!r}; "
                "resume it with the same one"
            )
        state["budget"] = budget
    else:
        state = {"rule": refit.RULE, "rule_text": refit.RULE_TEXT, "budget": budget, "per_round": per_round,
                 "calibration": calibration, "created": datetime.now(UTC).isoformat(timespec="seconds"),
                 "chosen": {}, "rounds": [], "stop": None}  # fmt: skip
    _save(path, state)
    return state


class _Loop:
    """One adaptive sweep's rounds: its ranked points, its state (saved after every plan and submission), the
    ledger and the results store."""

    def __init__(self, result, state: dict[str, Any], say, ledger: Ledger, store: Any):
        ranked = sorted(
            (r for r in result.rows if r["status"] == "ranked" and r.get("step_time_s")), key=lambda r: r["rank"]
        )
        self.result, self.state, self.say, self.ledger, self.store = result, state, say, ledger, store
        self.rows = {str(r["point_id"]): r for r in ranked}
        self.cands = [candidate_of(r) for r in ranked]
        self.path = result.dir / STATE
        self.cluster_cfg = None

    def save(self) -> None:
        _save(self.path, self.state)

    def adopt_or_submit(self, pid: str) -> None:
        """Submit a planned point unless the ledger already has its config (submitted before an interrupt)."""
        from bridgebench.launch import submit as sub
        from bridgebench.launch.plan import PlannedRun

        c = self.state["chosen"][pid]
        have = self.ledger.runs_of(c["config_hash"])
        if have:
            c["run_ids"] = have
            self.say.log(f"adopted {pid}: the ledger has its run(s) {have} (submitted before an interrupt)")
        else:
            run = PlannedRun.from_json(json.loads((Path(c["plan_dir"]) / c["run"] / "run.json").read_text()))
            c["run_ids"] = [a.run_id for a in sub.submit_planned([run], ledger=self.ledger, progress=self.say.log)]
        c["status"] = "submitted"
        self.save()

    def submit_pending(self) -> None:
        for pid, c in self.state["chosen"].items():
            if c.get("status") == "planned":
                self.adopt_or_submit(pid)

    def wait_and_collect(self, timeout_s: float, poll_s: float) -> None:
        """Wait for every submitted run (retries included), then collect the finished attempts' records."""
        from omegaconf import OmegaConf

        from bridgebench.launch import submit as sub
        from bridgebench.launch.collect import collect

        open_ids = [rid for c in self.state["chosen"].values() for rid in c.get("run_ids", [])]
        if not open_ids:
            return
        if self.cluster_cfg is None:
            first = next(c for c in self.state["chosen"].values() if c.get("run_ids"))
            self.cluster_cfg = OmegaConf.load(Path(first["plan_dir"]) / first["run"] / "config.yaml")
        self.say.log(f"waiting for {len(open_ids)} run(s)")
        sub.wait(self.cluster_cfg, self.ledger, timeout_s=timeout_s, poll_s=poll_s, run_ids=open_ids, progress=None)
        try:
            collect(self.ledger, self.store)
        except BridgebenchError as err:  # a conflicting or refused record: said, the loop goes on without it
            self.say.log(f"collect: {err}")

    def measured(self) -> tuple[dict[str, float], dict[str, str]]:
        return _measured(self.store, {pid: c["config_hash"] for pid, c in self.state["chosen"].items()})

    def assess(self):
        """(posterior, measured, failed, still running) after the wait."""
        measured, failed = self.measured()
        unsettled = [
            pid for pid, c in self.state["chosen"].items()
            if pid not in measured and pid not in failed
            and any(not a.settled for rid in c.get("run_ids", []) for a in self.ledger.attempts(rid)[-1:])
        ]  # fmt: skip
        return refit.refit(self.cands, measured), measured, failed, unsettled

    def plan_and_submit(self, picks: list[refit.Choice], post: refit.Posterior, calibration: str) -> None:
        """Plan each chosen point (its prediction kept), record it, then submit it (or adopt the ledger's run)."""
        from bridgebench.launch.plan import PlanError, plan, prediction_of

        rnd = len(self.state["rounds"])  # rounds[0] is the prior; round r's posterior is rounds[r]
        plans_root = load_paths().plans / f"sweep-{self.result.name}"
        for pick in picks:
            row = self.rows[pick.point_id]
            ov = engine.point_overrides(result_bases(self.result)[row["base"]], json.loads(row["delta"]))
            cfg = compose(ov)
            mean, sd = post.log_ratio(candidate_of(row))
            entry = {"round": rnd, "reason": pick.reason, "config_hash": config_hash(cfg), "overrides": ov,
                     "predicted_tflops": float(row["tflops_per_gpu"]), "band_pct": row.get("band_pct"),
                     "posterior_tflops": float(row["tflops_per_gpu"]) * math.exp(-mean),
                     "posterior_band_pct": 100 * sd, "status": "planning"}  # fmt: skip
            self.say.log(f"round {rnd}: {pick.point_id} -- {pick.reason}")
            pred = prediction_of(row, calibration, source=f"adaptive sweep {self.result.name} round {rnd}")
            try:
                plan_dir, runs = plan(
                    ov, plans_root / pick.point_id, composed=cfg, prediction=pred, calibration=calibration
                )
            except PlanError as err:
                entry.update(status="plan_failed", reason=f"{pick.reason}; plan failed: {err}")
                self.state["chosen"][pick.point_id] = entry
                self.save()
                continue
            entry.update(status="planned", plan_dir=str(plan_dir), run=runs[0].name)
            self.state["chosen"][pick.point_id] = entry
            self.save()  # before submitting: a resume adopts or submits it, never twice
            self.adopt_or_submit(pick.point_id)

    def best(self, measured: dict[str, float]) -> dict[str, Any] | None:
        """The best measured point (model TFLOP/s per GPU) with its predicted rank and sizes."""
        if not measured:
            return None
        by = {c.point_id: c for c in self.cands}
        bp = max(measured, key=lambda p: refit.measured_tflops(by[p], measured[p]))
        row = self.rows[bp]
        sizes = {k: row.get(k) for k in ("num_gpus", "precision", "tp", "pp", "vp", "cp", "ep", "mbs", "gbs")}
        tflops = refit.measured_tflops(by[bp], measured[bp])
        return {"point_id": bp, "tflops_per_gpu": tflops, "step_time_s": measured[bp], "rank_predicted": row["rank"],
                **sizes}  # fmt: skip


def result_bases(result) -> list:
    """The composed bases of a sweep result (composed again from its space: cached)."""
    if not hasattr(result, "_bases"):
        result._bases = engine.compose_bases(result.space)
    return result._bases


def _round_record(state, cands, post, measured, failed) -> None:
    """After a round's measurements: the posterior's summary (``rounds[0]``: the prior), appended once per round --
    a resumed loop that re-enters after the wait records nothing twice."""
    n = len(state["rounds"])
    if n > max((c["round"] for c in state["chosen"].values()), default=0):
        return
    unmeasured = [c for c in cands if c.point_id not in measured and c.point_id not in failed]
    ranking = sorted(((math.log(c.tflops) - post.log_ratio(c)[0], c.point_id) for c in cands), reverse=True)[:3]
    bands = [100 * post.log_ratio(c)[1] for c in unmeasured]
    state["rounds"].append(
        {
            "round": n,
            "measured": dict(measured),
            "failed": dict(failed),
            "coefficients": {k: v[0] for k, v in post.coefficients().items()},
            "top3_posterior": [{"point_id": p, "tflops_per_gpu": math.exp(m)} for m, p in ranking],
            "median_band_unmeasured_pct": statistics.median(bands) if bands else None,
        }
    )


def _rounds_rows(state) -> list[dict[str, Any]]:
    out = []
    for pid, c in state["chosen"].items():
        rnd = c["round"]
        after = state["rounds"][rnd] if rnd < len(state["rounds"]) else {}
        m = (after.get("measured") or {}).get(pid)
        out.append(
            {
                "round": rnd,
                "point_id": pid,
                "why": c.get("reason"),
                "status": c.get("status"),
                "config_hash": c.get("config_hash"),
                "run_ids": ",".join(c.get("run_ids", [])),
                "predicted_tflops": c.get("predicted_tflops"),
                "band_pct": c.get("band_pct"),
                "posterior_tflops_at_choice": c.get("posterior_tflops"),
                "posterior_band_pct_at_choice": c.get("posterior_band_pct"),
                "measured_step_s": m,
                "failed": (after.get("failed") or {}).get(pid),
                "level_after": (after.get("coefficients") or {}).get("level"),
                "median_band_unmeasured_pct_after": after.get("median_band_unmeasured_pct"),
            }
        )
    return sorted(out, key=lambda r: (r["round"], r["point_id"]))


def _iters(state) -> int:
    from omegaconf import OmegaConf

    for c in state["chosen"].values():
        if c.get("plan_dir") and c.get("run"):
            cfg = OmegaConf.load(Path(c["plan_dir"]) / c["run"] / "config.yaml")
            if cfg.job.type == "replay":
                return int(cfg.job.replay.steps)
            return int(cfg.train.train_iters)
    return 1


def _gpu_hours(cands, measured, state) -> dict[str, float]:
    """GPU-hours of the measured runs (measured step x iterations x GPUs) against a full grid of every ranked point
    (the measured ones at their measurement, the rest at their predicted step)."""
    iters = _iters(state)
    spent = sum(c.num_gpus * measured[c.point_id] * iters for c in cands if c.point_id in measured) / 3600
    grid = sum(c.num_gpus * measured.get(c.point_id, c.step_s) * iters for c in cands) / 3600
    return {"spent": spent, "full_grid": grid, "iterations_per_run": iters, "share": spent / grid if grid else 0.0}


def _write(result, state, out: AdaptiveResult, cands) -> dict[str, Path]:
    """``rounds.parquet`` and the summary section (appended to ``summary.md``, replacing an older one)."""
    import pandas as pd

    from bridgebench.launch.sweep import atomic_write

    rounds_path = result.dir / "rounds.parquet"
    frame = pd.DataFrame(out.rounds)
    tmp = rounds_path.with_suffix(".parquet.tmp")
    frame.to_parquet(tmp, index=False)
    tmp.replace(rounds_path)
    lines = [
        "",
        "## Adaptive rounds",
        "",
        f"- rule `{state['rule']}`: {state['rule_text']} (bridgebench.model.refit)",
        f"- budget {state['budget']} runs, {state.get('per_round', 1)} per round; spent {len(state['chosen'])}; "
        f"stopped: **{state['stop']}**; calibration `{state['calibration']}`",
        f"- GPU-hours: {out.gpu_hours['spent']:.1f} spent on measured runs against {out.gpu_hours['full_grid']:.1f} "
        f"for a full grid of the {len(cands)} valid points ({100 * out.gpu_hours['share']:.1f} %; "
        f"{out.gpu_hours['iterations_per_run']} iterations per run)",
    ]
    if out.best:
        b = out.best
        lines.append(
            f"- best measured: {b['point_id']} at {b['tflops_per_gpu']:.1f} TFLOP/s/GPU (predicted rank "
            f"{b['rank_predicted']})"
        )
    lines += [
        "",
        "| round | point | why chosen | predicted TFLOP/s/GPU (+-band %) | posterior at choice | measured step s "
        "| level after | median band of unmeasured after |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in out.rounds:
        meas = f"{r['measured_step_s']:.3f}" if r["measured_step_s"] else (r["failed"] or r["status"])
        lvl = "-" if r["level_after"] is None else f"{r['level_after']:+.3f}"
        band = r["median_band_unmeasured_pct_after"]
        pred = f"{r['predicted_tflops']:.1f} (+-{r['band_pct'] or 0:.1f})"
        post = f"{r['posterior_tflops_at_choice']:.1f} (+-{r['posterior_band_pct_at_choice']:.1f})"
        band_text = "-" if band is None else f"{band:.1f}"
        lines.append(
            f"| {r['round']} | {r['point_id']} | {r['why']} | {pred} | {post} | {meas} | {lvl} | {band_text} |"
        )
    lines += ["", "How the ranking moved (posterior top 3 after each round):", ""]
    for rd in state["rounds"]:
        top = ", ".join(f"{t['point_id']} {t['tflops_per_gpu']:.1f}" for t in rd["top3_posterior"])
        lines.append(f"- after round {rd['round']}: {top}")
    summary = result.dir / "summary.md"
    text = summary.read_text() if summary.exists() else ""
    text = text.split("\n## Adaptive rounds\n")[0].rstrip("\n") + "\n"
    atomic_write(summary, (text + "\n".join(lines) + "\n").encode())
    return {**result.outputs, "rounds": rounds_path, "summary": summary}
