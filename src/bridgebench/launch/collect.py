"""Collect: turn finished attempts' logs into records in the results store (idempotent).

Record ids are ``<SLURM job id>/a<attempt>/<kind>``, so collecting the same job twice adds nothing; the store's atomic
per-record files make a killed collector lose nothing and two collectors give the union. Every record carries
provenance: container image, Megatron-Bridge / Megatron-Core versions (from the entrypoint's ``BRIDGEBENCH_RUN``
line) or torch / emerging-optimizers versions (optimizer-step payload), config hash, FLOPs formula version, peak-table
version, SLURM job id and node list.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from omegaconf import OmegaConf

from bridgebench.launch.ledger import Attempt, Ledger

MARKERS = ("BRIDGEBENCH_OPTSTEP ", "BRIDGEBENCH_RUN ")


def _marker(logs: list[Path], marker: str) -> dict[str, Any] | None:
    """The JSON payload of the last ``<marker><json>`` line in the logs (rank prefixes allowed before it)."""
    found = None
    for log in logs:
        with open(log, errors="replace") as f:
            for line in f:
                i = line.find(marker)
                if i >= 0:
                    try:
                        found = json.loads(line[i + len(marker) :])
                    except json.JSONDecodeError:
                        continue
    return found


def records_for(a: Attempt, logs: list[Path]) -> list[dict[str, Any]]:
    """Records of one finished attempt (one per attempt; the payload's figures when it completed)."""
    from bridgebench.launch.figures import record_figures

    cfg = OmegaConf.load(Path(a.plan_dir) / "config.yaml") if a.plan_dir else None
    prov = {
        "slurm_job_id": a.slurm_job_id,
        "node_list": a.node_list,
        "attempt": a.attempt,
        "run_id": a.run_id,
        "experiment_id": a.experiment_id,
        "logs": [str(p) for p in logs],
    }
    base: dict[str, Any] = {
        "record_id": f"{a.slurm_job_id}/a{a.attempt}/{a.job_type}",
        "kind": a.job_type,
        "name": a.name,
        "state": a.state,
        "reason": a.reason,
        "exit_code": a.exit_code,
    }
    if cfg is not None:
        prov |= {
            "config_hash": a.run_id.split("-r")[0],
            "container_image": str(cfg.release.container_image),
            "release": str(cfg.release.name),
            "flops_formula": str(cfg.accounting.flops_formula),
            "peak_table_version": str(cfg.gpu.peak_table_version),
        }
        base |= {
            "model": str(cfg.model.name),
            "optimizer": str(cfg.optimizer.optimizer),
            "gpu": str(cfg.gpu.name),
            "precision": str(cfg.precision.name),
            "num_gpus": int(cfg.num_gpus),
            "global_batch_size": int(cfg.train.global_batch_size),
            "seq_length": int(cfg.model.seq_length),
        }
    # step figures, window, quality and per-iteration series (launch/figures.py: TensorBoard events, else logs)
    base |= record_figures(a.job_dir, logs, cfg)
    if a.job_type == "optstep":
        payload = None
        out = Path(a.job_dir or ".") / "out" / "optstep.json"
        if out.exists():
            payload = json.loads(out.read_text())
        payload = payload or _marker(logs, MARKERS[0])
        if payload:
            from bridgebench.results.optstep_series import optstep_series

            prov |= {"versions": payload.get("versions"), "node": payload.get("node")}
            base["optstep"] = payload
            series = optstep_series(payload, base.get("optimizer") or payload.get("optimizer") or "")
            if series:  # per-repeat step times of the run's optimizer (bridgebench compare --source runs)
                base["series"] = series
        return [base | {"provenance": prov}]
    run_info = _marker(logs, MARKERS[1]) or {}
    prov |= {k: run_info.get(k) for k in ("megatron_bridge", "megatron_core", "torch") if k in run_info}
    return [base | {"provenance": prov}]


def default_store():
    """The results store at ``configs/paths``' ``results`` (``BRIDGEBENCH_RESULTS`` overrides)."""
    from bridgebench.paths import load_paths
    from bridgebench.results.store import ResultStore

    return ResultStore(load_paths().results)


def collect(ledger: Ledger | None = None, store=None, *, progress: Callable[[str], None] | None = None) -> int:
    """Collect every finished, not yet collected attempt; returns the number of NEW records in the store."""
    from bridgebench.launch.submit import attempt_logs

    ledger = ledger or Ledger()
    store = store or default_store()
    added = 0
    todo = [a for a in ledger.attempts() if a.finished and not a.collected]
    for i, a in enumerate(todo, 1):
        if progress:
            progress(f"[{i}/{len(todo)}] collecting {a.name} attempt {a.attempt} (job {a.slurm_job_id})")
        added += store.add(records_for(a, attempt_logs(a)))
        ledger.update(a.run_id, a.attempt, collected=True)
    return added
