"""Step figures of one attempt for its results-store record: from TensorBoard events when the job wrote them, else
from its logs; the log's outcome class always from the logs.

Fields added to a record (``collect``): ``log_outcome`` / ``log_outcome_detail`` (the log parser's outcome class and
its line; the record's own ``outcome`` is the attempt's, from the scheduler: launch/outcome.py), ``steps``,
``step_time_s``, ``tflops_per_gpu``, ``tokens_per_s_per_gpu`` (window means; None only without a timed step),
``quality`` and ``window`` (:func:`bridgebench.logs.steady.window_summary`), ``series`` (``iteration`` /
``step_time_s`` / ``tflops_per_gpu`` per logged iteration, for confidence intervals later), ``log_format``,
``figures_source`` (``tensorboard`` or ``log``) and ``figures_derived`` (which figures were computed from the run's
FLOPs model rather than read: tokens/s/GPU = GBS x seq_length / step time / GPUs; TFLOP/s/GPU = model FLOPs per step
(:func:`bridgebench.config.run_flops.step_flops`) / step time / GPUs / 1e12). Damaged event files (truncated, or
failing their CRCs: :func:`bridgebench.logs.events.damage`) add ``events_damaged`` (what is damaged); the figures then
come from the logs when they have timed steps, else from the events with ``quality`` ``damaged`` -- never ``steady``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: Where a pretrain job's TensorBoard events go: ``<job dir>/out/<job.tensorboard_subdir>`` (``logger.tensorboard_dir``,
#: set by mbridge/build.py ``apply_policies`` under BRIDGEBENCH_OUT_DIR = ``<job dir>/out``, which
#: launch/jobspec.py ``build_job`` exports); this is the path with the default subfolder (``tensorboard``).
OUT_SUBDIR = Path("out")
TENSORBOARD_SUBDIR = OUT_SUBDIR / "tensorboard"


def tensorboard_dir(job_dir: str | None, cfg=None) -> Path | None:
    """The attempt's TensorBoard folder: ``<job_dir>/out/<cfg.job.tensorboard_subdir>`` (the default subfolder
    without a config); None without a job dir or where the config switched events off (``tensorboard_subdir: null``)."""
    if not job_dir:
        return None
    if cfg is None or "job" not in cfg or "tensorboard_subdir" not in cfg.job:
        return Path(job_dir) / TENSORBOARD_SUBDIR
    subdir = cfg.job.tensorboard_subdir
    return Path(job_dir) / OUT_SUBDIR / str(subdir) if subdir else None


def _parse_logs(logs: list[Path]):
    from bridgebench.logs.parser import LogReadError, parse_log

    parsed = []
    for p in logs:
        try:
            parsed.append(parse_log(p))
        except LogReadError:
            continue  # an empty sbatch output
    preferred = [x for x in parsed if x.path and Path(x.path).name.startswith("log-")] or parsed
    return max(preferred, key=lambda x: x.step_count, default=None)


def record_figures(job_dir: str | None, logs: list[Path], cfg=None) -> dict[str, Any]:
    """The figure fields of a record (see the module docstring) for an attempt with ``logs`` and ``job_dir``."""
    from bridgebench.logs.parser import to_json

    log = _parse_logs(logs)
    source, parsed = "log", log
    events_damage = None
    tb = tensorboard_dir(job_dir, cfg)
    if tb is not None and tb.is_dir():
        from bridgebench.logs.events import DAMAGED, is_events, parse_events
        from bridgebench.logs.parser import LogReadError

        if is_events(tb):
            try:
                ev = parse_events(tb)
            except LogReadError:
                ev = None
            damaged = ev is not None and ev.quality == DAMAGED
            if ev is not None and damaged:
                events_damage = ev.outcome_detail
            if ev is not None and ev.steady["step_time_s"].count:
                # damaged events: the log's figures when it has timed steps, else the events' marked damaged
                if not (damaged and log is not None and log.steady["step_time_s"].count):
                    source, parsed = "tensorboard", ev
    if parsed is None:
        return {
            "log_outcome": None,
            "log_outcome_detail": None,
            "steps": 0,
            "step_time_s": None,
            "tflops_per_gpu": None,
            "quality": None,
            "window": None,
            "series": None,
            "log_format": None,
            "figures_source": None,
        }
    j = to_json(parsed)
    out: dict[str, Any] = {
        "log_outcome": log.outcome if log is not None else None,
        "log_outcome_detail": log.outcome_detail if log is not None else None,
        "steps": j["steps"],
        "step_time_s": j["step_time_s"],
        "tflops_per_gpu": j["tflops_per_gpu"],
        "tokens_per_s_per_gpu": j["tokens_per_s_per_gpu"],
        "quality": j["quality"],
        "window": j["window"],
        "series": j["series"],
        "log_format": log.format if log is not None else None,
        "figures_source": source,
        "figures_derived": [],
    }
    if events_damage:  # newer field: the TensorBoard files were damaged (logs/events.py damage)
        out["events_damaged"] = events_damage
    if cfg is not None and out["step_time_s"] and str(cfg.job.type) in ("pretrain", "replay"):
        from bridgebench.config.compose import run_facts
        from bridgebench.config.run_flops import step_flops

        facts = run_facts(cfg)
        br = step_flops(facts)
        if out["tokens_per_s_per_gpu"] is None:
            out["tokens_per_s_per_gpu"] = br.tokens / out["step_time_s"] / facts.num_gpus
            out["figures_derived"].append("tokens_per_s_per_gpu")
        if out["tflops_per_gpu"] is None:
            out["tflops_per_gpu"] = float(br.total) / out["step_time_s"] / facts.num_gpus / 1e12
            out["figures_derived"].append("tflops_per_gpu")
    return out
