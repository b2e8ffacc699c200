"""Live view of running jobs: latest step time, TFLOP/s/GPU, iteration / total and ETA, read from their logs.

Used by ``bridgebench status`` (one line per running attempt) and ``bridgebench logs follow RUN_ID`` (updates until
the job ends).  Figures come from :func:`bridgebench.logs.parser.parse_log` on the attempt's log files (nemo-run's
sbatch/srun outputs): the latest logged step, and the mean of the last :data:`RECENT_STEPS` timed steps for the
ETA = (total - iteration) x that mean (seconds; None when the log does not give the total).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from omegaconf import DictConfig

from bridgebench.errors import BridgebenchError
from bridgebench.launch.ledger import Attempt, Ledger

#: Timed steps averaged for the ETA.
RECENT_STEPS = 20


@dataclass(kw_only=True)
class LiveFigures:
    """What a log says about a job so far.  Units: seconds, model TFLOP/s per GPU."""

    iteration: int | None
    total: int | None
    step_time_s: float | None  # latest logged step
    tflops_per_gpu: float | None  # latest logged step
    recent_step_time_s: float | None  # mean of the last RECENT_STEPS timed steps
    eta_s: float | None
    outcome: str
    quality: str | None
    steps: int
    log: str | None

    def as_dict(self) -> dict:
        return asdict(self)


def live_figures(logs: list[Path]) -> LiveFigures | None:
    """Figures of the log with the most steps among ``logs`` (None when no log exists or none can be read)."""
    from bridgebench.logs.parser import LogReadError, parse_log

    best = None
    for log in logs:
        try:
            parsed = parse_log(log, warmup_steps=0, min_steps=1)
        except LogReadError:
            continue  # an empty log of a job that just started
        if best is None or parsed.step_count > best.step_count:
            best = parsed
    if best is None:
        return None
    steps = best._steps
    timed = [s for s in steps if s.step_time_s is not None][-RECENT_STEPS:]
    last = steps[-1] if steps else None
    recent = sum(s.step_time_s for s in timed) / len(timed) if timed else None
    total = best.total_iters
    eta = (total - last.iteration) * recent if (last and total and recent is not None) else None
    return LiveFigures(
        iteration=last.iteration if last else None,
        total=total,
        step_time_s=last.step_time_s if last else None,
        tflops_per_gpu=last.tflops_per_gpu if last else None,
        recent_step_time_s=recent,
        eta_s=max(eta, 0.0) if eta is not None else None,
        outcome=best.outcome,
        quality=best.quality,
        steps=len(steps),
        log=best.path,
    )


def _duration(s: float | None) -> str:
    if s is None:
        return "-"
    s = int(round(s))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h{m:02d}m{sec:02d}s" if h else f"{m}m{sec:02d}s"


def describe(a: Attempt, fig: LiveFigures | None) -> str:
    """One line for an attempt: ``<run>/a<n> <state> iteration i/N step 1.23 s (recent 1.20 s) 456 TFLOP/s/GPU
    ETA 3m12s``."""
    head = f"{a.run_id}/a{a.attempt} {a.name} {a.state}"
    if fig is None:
        return f"{head}: no log yet"
    if fig.iteration is None:
        return f"{head}: no iteration logged yet"
    it = f"iteration {fig.iteration}/{fig.total}" if fig.total else f"iteration {fig.iteration}"
    st = f"step {fig.step_time_s:.4g} s" if fig.step_time_s is not None else "step -"
    if fig.recent_step_time_s is not None:
        st += f" (mean of last {min(fig.steps, RECENT_STEPS)}: {fig.recent_step_time_s:.4g} s)"
    tf = f" {fig.tflops_per_gpu:.5g} TFLOP/s/GPU" if fig.tflops_per_gpu is not None else ""
    return f"{head}: {it} {st}{tf} ETA {_duration(fig.eta_s)}"


#: Ledger states in which a job is known to be running (its log may still grow).
RUNNING_STATES = ("RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED")


def running_attempt_for(log: Path, ledger: Ledger | None = None) -> Attempt | None:
    """The ledger's attempt whose job folder holds ``log`` when the ledger last saw it running (state in
    :data:`RUNNING_STATES`), else None -- also when there is no ledger (none is created)."""
    from bridgebench.paths import load_paths

    if ledger is None:
        path = load_paths().ledger
        if not path.exists():
            return None
        ledger = Ledger(path)
    target = Path(log).resolve()
    for a in ledger.attempts():
        if a.state in RUNNING_STATES and a.job_dir and target.is_relative_to(Path(a.job_dir).resolve()):
            return a
    return None


def live_lines(attempts: list[Attempt]) -> list[str]:
    """A line per running attempt (``status`` shows them under the ledger)."""
    from bridgebench.launch.submit import attempt_logs

    return [describe(a, live_figures(attempt_logs(a))) for a in attempts if a.state == "RUNNING"]


def follow(
    cfg: DictConfig,
    run_id: str,
    *,
    ledger: Ledger | None = None,
    interval_s: float = 5.0,
    timeout_s: float = 86400.0,
    echo: Callable[[str], None] = print,
) -> Attempt:
    """Print the live line of ``run_id``'s latest attempt every ``interval_s`` (only when it changes) until the
    attempt has ended (retries are followed: a resubmitted attempt becomes the latest); returns the last attempt.

    Raises:
        BridgebenchError: no attempt of ``run_id`` in the ledger.
    """
    from bridgebench.launch.submit import attempt_logs, refresh

    ledger = ledger or Ledger()
    deadline = time.monotonic() + timeout_s
    shown = None
    while True:
        attempts = [a for a in refresh(cfg, ledger) if a.run_id == run_id]
        if not attempts:
            raise BridgebenchError(f"no run {run_id!r} in the job ledger (see `bridgebench status`)")
        a = max(attempts, key=lambda x: x.attempt)
        line = describe(a, live_figures(attempt_logs(a)))
        if line != shown:
            echo(line)
            shown = line
        if a.finished or time.monotonic() > deadline:
            return a
        time.sleep(interval_s)
