"""Collect: turn finished attempts' logs into records in the results store (idempotent, never silently lossy).

Record ids are ``<cluster id>/<SLURM job id>/<attempt uuid>/<kind>``: the cluster identity (``launch/provenance.py``:
a UUID made with the cluster's state) and bridgebench's own attempt UUID make two jobs that got the same SLURM id
(purged or different clusters, wrapped counters) two records. Collecting the same attempt again gives the same
record (every field comes from the ledger, the plan and the logs, not the collection time), so it adds nothing; a
stored record with the same id but other content is never overwritten or skipped quietly: :func:`collect` stores the
rest, leaves that attempt uncollected and raises :class:`CollectConflict` naming both.

A record stands on its own, so deleting ``plans/`` or ``.state/`` orphans nothing:

* ``timestamps``: submitted / started / ended, ISO 8601 UTC (ledger and ``sacct``);
* ``provenance``: cluster id, SLURM job id, job name, node list, attempt UUID, bridgebench version, git commit and
  dirty flag (at submission), config hash, release, FLOPs formula and peak-table versions, the container the job
  actually started in (None when it ran on the host), the sha256 of the submitted script and of every log (each
  also copied into the store: ``ResultStore.put_blob``), and the payload's software versions;
* ``config``: the resolved config the job ran;
* facts of what ran: a pretrain record takes its model, parallelism and batch from the config the entrypoint built
  and its device from the entrypoint's ``BRIDGEBENCH_RUN`` line; an optimizer-step record takes model, device and
  load from the payload and carries no GPU, precision or batch size (it trains nothing);
* what happened (``launch/outcome.py``): ``state`` and ``exit_code`` (SLURM's final state and ``N:M`` exit code,
  from ``sacct``), ``reason`` (the ledger's: the log's failure class and line, or the exit code, SLURM's reason and
  the log's last error line), and -- newer fields, absent from older records --
  ``outcome`` (``completed``, ``no_result``, ``never_started``, or the scheduler's state in lower case: ``failed``,
  ``timeout``, ``cancelled``, ``out_of_memory``, ``node_fail`` ...), ``outcome_detail`` (the log's reason for it),
  ``payload_started`` (the payload's ``BRIDGEBENCH_START`` line was in the log; None without a readable log), and
  ``log_outcome`` / ``log_outcome_detail`` (the log parser's own class, e.g. ``incomplete`` for a log without an
  end; before these fields, ``outcome`` held it). Only ``outcome == "completed"`` records carry figures that
  ``report`` and ``compare`` use; the others are counted in their "skipped" lines.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Callable

from omegaconf import OmegaConf

from bridgebench.config.secrets import disk_container
from bridgebench.errors import BridgebenchError
from bridgebench.launch import jobfiles
from bridgebench.launch.ledger import Attempt, Ledger
from bridgebench.payloads.markers import OPTSTEP, RUN

MARKERS = (OPTSTEP, RUN)


#: ``bridgebench collect`` exits with this code when it collected what it could and set some attempts aside (README
#: "Exit codes"): each set-aside attempt is named with its reason on stderr (``--json``: under ``skipped``), stays
#: uncollected in the ledger and is tried again by the next ``collect``.
EXIT_PARTIAL = 5


class CollectPartial(BridgebenchError):
    """``collect`` stored every record it could and set some attempts aside, each named with its reason (rule
    ``collect_partial``). ``added`` is the number of new records, ``skipped`` one ``{run_id, attempt, slurm_job_id,
    reason}`` per set-aside attempt; ``outcomes`` the count of new records per outcome."""

    def __init__(self, message: str, *, added: int = 0, skipped: list[dict] | None = None, outcomes=None):
        super().__init__(message)
        self.added = added
        self.skipped = list(skipped or [])
        self.outcomes = dict(outcomes or {})


class CollectConflict(CollectPartial):
    """A record id is stored already with different content; the message names both records."""


class CollectError(CollectPartial):
    """Finished attempts whose logs could not be fetched from the cluster stay uncollected; the message names them."""


class CollectUnreadable(CollectPartial):
    """Attempts whose job folder or result could not be read (a symlink loop, a result file that is not the
    payload's JSON object, an I/O error ...) were set aside with the reason; every other attempt was collected."""


def _fetch(a: Attempt) -> str | None:
    """Fetch an SSH attempt's job folder back (launch/tracking.py ``fetch_logs``) with the cluster of its plan;
    None, or why not."""
    cfg_path = Path(a.plan_dir) / "config.yaml" if a.plan_dir else None
    if not a.node_job_dir or cfg_path is None or not cfg_path.exists():
        return None
    from bridgebench.launch.tracking import fetch_logs

    return fetch_logs(a, OmegaConf.load(cfg_path).cluster)


class CollectRefused(CollectPartial):
    """Attempts whose job folder holds files collect will not read (FIFOs, devices, symlinks leading out of it);
    the message names each path. Those attempts stay uncollected; every other attempt was collected."""


def _marker(logs: list[Path], marker: str) -> dict[str, Any] | None:
    """The JSON payload of the last ``<marker><json>`` line in the logs (rank prefixes allowed before it), streamed
    (launch/jobfiles.py: bounded memory whatever the log's line lengths)."""
    found = jobfiles.last_marker(logs, marker)
    return found if isinstance(found, dict) else None  # `BRIDGEBENCH_OPTSTEP []` is not a payload's result


def _utc(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds") if ts else None


def record_id(a: Attempt) -> str:
    """``<cluster id>/<SLURM job id>/<attempt uuid>/<kind>`` (attempts from before attempt UUIDs: run id + attempt)."""
    uid = a.uid or f"legacy-{a.run_id}-a{a.attempt}"
    return f"{a.cluster_id or 'cluster-unknown'}/{a.slurm_job_id}/{uid}/{a.job_type}"


def _blobs(store, logs: list[Path]) -> list[dict[str, Any]]:
    return jobfiles.log_copies(store, logs)  # streamed into the store: memory bounded per log


def records_for(a: Attempt, logs: list[Path], store=None) -> list[dict[str, Any]]:
    """Records of one finished attempt (one per attempt; the payload's figures when it completed). With a ``store``,
    the logs and the submitted script are copied into it (content-addressed)."""
    # step figures, window, quality and per-iteration series (launch/run_metrics.py: TensorBoard, else logs), from
    # the submit side's mirror of the job folder (launch/nodepaths.py; fetched back through the tunnel over SSH)
    from bridgebench.launch.nodepaths import attempt_folder
    from bridgebench.launch.run_metrics import record_figures

    cfg_path = Path(a.plan_dir) / "config.yaml" if a.plan_dir else None
    cfg = OmegaConf.load(cfg_path) if cfg_path and cfg_path.exists() else None
    prov = _provenance(a, logs, store, cfg)
    base: dict[str, Any] = {
        "record_id": record_id(a),
        "kind": a.job_type,
        "name": a.name,
        "run_id": a.run_id,
        "attempt": a.attempt,
        "state": a.state,
        "reason": a.reason,
        "exit_code": a.exit_code,
        "timestamps": {
            "submitted_utc": _utc(a.submitted_at),
            "started_utc": _utc(a.started_at),
            "ended_utc": _utc(a.ended_at),
        },
        # as written (config/secrets.py): a variable passed by name stays ${oc.env:VAR}, never read here
        "config": disk_container(cfg) if cfg is not None else None,
    }
    folder = attempt_folder(a.job_dir, a.job_name)
    base |= record_figures(str(folder) if folder else None, logs, cfg)
    if a.job_type == "optstep":
        payload = _optstep_payload(a, logs, folder)
        _add_optstep(base, prov, payload, cfg)
        return [base | _outcome(a, logs, has_result=payload is not None) | {"provenance": prov}]
    _add_run(base, prov, a, logs, cfg)
    return [base | _outcome(a, logs, has_result=base.get("step_time_s") is not None) | {"provenance": prov}]


def _provenance(a: Attempt, logs: list[Path], store, cfg) -> dict[str, Any]:
    """A record's ``provenance`` (module docstring) from the ledger's attempt, the planned config (release, FLOPs
    formula, peak table) and, with a ``store``, the submitted script's and the logs' copies in it."""
    script = None
    if a.plan_dir:
        kept = Path(a.plan_dir) / "submitted" / f"{a.run_id}-a{a.attempt}.sbatch.sh"
        if kept.exists() and store is not None:
            script, _ = store.put_blob_file(kept)
    prov: dict[str, Any] = {
        "cluster_id": a.cluster_id,
        "slurm_job_id": a.slurm_job_id,
        "job_name": a.job_name,
        "node_list": a.node_list,
        "attempt_uid": a.uid,
        "experiment_id": a.experiment_id,
        "bridgebench_version": a.bridgebench_version,
        "git_commit": a.git_commit,
        "git_dirty": a.git_dirty,
        "config_hash": a.run_id.split("-r")[0],
        "container_image": a.container_image,  # what the job started in; None: it ran on the host
        "script_sha256": a.script_sha256 or script,
        "logs": _blobs(store, logs),
    }
    if cfg is not None:
        prov |= {
            "release": str(cfg.release.name),
            "flops_formula": str(cfg.accounting.flops_formula),
            "peak_table_version": str(cfg.gpu.peak_table_version),
        }
    return prov


def _optstep_payload(a: Attempt, logs: list[Path], folder: Path | None) -> dict[str, Any] | None:
    """The optimizer-step payload's result: ``out/optstep.json`` of this job, else its log marker.

    Raises:
        bridgebench.launch.jobfiles.JobFileError: the file holds JSON that is not an object, or is not a regular file
            of bounded size.
    """
    payload = None
    out = (folder or Path(".")) / "out" / "optstep.json"
    if out.exists():
        payload = jobfiles.read_json(out)  # a regular file of bounded size (launch/jobfiles.py)
        if payload is not None and not isinstance(payload, dict):
            raise jobfiles.JobFileError(
                f"{out}: holds a JSON {type(payload).__name__}, not the payload's result object: not read"
            )
        if payload is not None and payload.get("slurm_job_id") not in (None, a.slurm_job_id):
            payload = None  # another job's result (a folder reused on the cluster): not this attempt's
    return payload or _marker(logs, MARKERS[0])


def _add_optstep(base: dict[str, Any], prov: dict[str, Any], payload: dict[str, Any] | None, cfg) -> None:
    """An optimizer-step record's facts: model, device and load from the payload, its per-repeat series."""
    if payload:
        prov |= {"versions": payload.get("versions"), "node": payload.get("node")}
        base |= {
            "model": payload.get("model"),
            "device": payload.get("device"),
            "device_type": payload.get("device_type"),
            "optstep": payload,
        }
        if cfg is not None:
            base["optimizer"] = str(cfg.optimizer.optimizer)
        from bridgebench.results.optstep_series import optstep_series

        series = optstep_series(payload, base.get("optimizer") or payload.get("optimizer") or "")
        if series:  # per-repeat step times of the run's optimizer (bridgebench compare --source runs)
            base["series"] = series
    elif cfg is not None:
        base["model"] = str(cfg.model.name)


def _add_run(base: dict[str, Any], prov: dict[str, Any], a: Attempt, logs: list[Path], cfg) -> None:
    """A pretrain (or replay) record's facts: software versions and device from the entrypoint's line, model,
    parallelism and batch from the config, the replayed table's row, and the plan's prediction beside the figure."""
    run_info = _marker(logs, MARKERS[1]) or {}
    prov |= {k: run_info.get(k) for k in ("megatron_bridge", "megatron_core", "torch") if k in run_info}
    if cfg is not None:
        base |= {
            "model": str(cfg.model.name),
            "optimizer": str(cfg.optimizer.optimizer),
            "precision": str(cfg.precision.name),
            "num_gpus": int(cfg.num_gpus),
            "global_batch_size": int(cfg.train.global_batch_size),
            "seq_length": int(cfg.model.seq_length),
            "gpu_planned": str(cfg.gpu.name),
        }
    base["device"] = run_info.get("device")  # what the entrypoint saw (torch.cuda.get_device_name), if it ran
    base["payload"] = a.job_type  # "replay": figures replayed from a table of measurements, not measured here
    if a.job_type == "replay" and cfg is not None:
        rp = cfg.job.replay
        base["replay"] = {
            "table": str(rp.table),
            "row": OmegaConf.to_container(rp.row, resolve=True) if rp.row is not None else None,
            "noise_pct": float(rp.noise_pct),
            "seed": int(rp.seed),
            "log": _marker(logs, "BRIDGEBENCH_REPLAY "),
        }
        base["device"] = "replay"
    base |= _vs_prediction(a, base.get("step_time_s"))


def _vs_prediction(a: Attempt, measured_s: float | None) -> dict[str, Any]:
    """``predicted``: what the plan predicted for the run (``run.json`` ``prediction``: step time, TFLOP/s/GPU,
    band, release, calibration name and sha256), and ``vs_predicted``: ``error_pct`` (measured / predicted step - 1,
    %) and ``inside_band`` (|log(measured / predicted)| <= band) when both exist."""
    import math

    run_json = Path(a.plan_dir) / "run.json" if a.plan_dir else None
    pred = None
    if run_json is not None and run_json.is_file():
        try:
            pred = json.loads(run_json.read_text()).get("prediction")
        except (OSError, ValueError):
            pred = None
    out: dict[str, Any] = {"predicted": pred}
    p = (pred or {}).get("step_time_s")
    if measured_s and p:
        band = float((pred or {}).get("band_pct") or 0.0) / 100
        err = math.log(measured_s / p)
        out["vs_predicted"] = {"error_pct": 100 * (measured_s / p - 1), "inside_band": abs(err) <= band}
    return out


def _outcome(a: Attempt, logs: list[Path], *, has_result: bool) -> dict[str, Any]:
    """The record's outcome fields (module docstring; ``launch/outcome.py``)."""
    from bridgebench.launch.outcome import decide

    oc = decide(a.state, a.exit_code, logs, has_result=has_result, reason=a.reason)
    return {"outcome": oc.outcome, "outcome_detail": oc.detail, "payload_started": oc.payload_started}


def default_store():
    """The results store at ``configs/paths``' ``results`` (``BRIDGEBENCH_RESULTS`` overrides)."""
    from bridgebench.paths import load_paths
    from bridgebench.results.store import ResultStore

    return ResultStore(load_paths().results)


def _describe(rec: dict[str, Any]) -> str:
    p = rec.get("provenance") or {}
    return (
        f"job {p.get('slurm_job_id')} of cluster {p.get('cluster_id')}, run {rec.get('run_id')} attempt "
        f"{rec.get('attempt')} ({rec.get('name')}), submitted {(rec.get('timestamps') or {}).get('submitted_utc')}"
    )


def _label(a: Attempt) -> str:
    return f"{a.run_id} attempt {a.attempt} (job {a.slurm_job_id})"


def collect(
    ledger: Ledger | None = None,
    store=None,
    *,
    progress: Callable[[str], None] | None = None,
    outcomes: dict[str, int] | None = None,
) -> int:
    """Collect every finished, not yet collected attempt; returns the number of NEW records in the store.
    ``outcomes``, when given, is filled with the count of the new records per outcome (``completed``, ``TIMEOUT``,
    ``never_started`` ...: results/outcomes.py ``label``), so the caller can say what was added.

    One bad attempt never stops the others (rule ``collect_partial``): an attempt whose logs cannot be fetched, whose
    job folder holds what collect will not read, whose record clashes with a stored one, or that cannot be read at all
    (a symlink loop, a job-written ``out/optstep.json`` that is not the payload's object, any other error reading
    it) is set aside with its reason, stays uncollected in the ledger (the next ``collect`` tries it again), and
    collect goes on with the rest; at the end it raises one :class:`CollectPartial` subclass naming every set-aside
    attempt. Errors of the store or the ledger themselves (a full disk, a corrupt ledger) stop it at once: they
    would fail every attempt alike.

    Raises:
        CollectConflict: a record id is stored with other content (every other record was stored; the conflicting
            attempts stay uncollected).
        CollectRefused: a job folder holds a FIFO, device or socket, or a symlink leading out of it (named; those
            attempts stay uncollected, every other one is collected).
        CollectError: logs of an SSH cluster could not be fetched.
        CollectUnreadable: an attempt's job folder or result could not be read.
        StoreError, LedgerError: the results store or the ledger cannot be written (nothing half-written).
    """
    ledger = ledger or Ledger()
    store = store if store is not None else default_store()  # an empty store is falsy (len 0)
    tally = _Tally(outcomes if outcomes is not None else {})
    todo = [a for a in ledger.attempts() if a.finished and not a.collected]
    for i, a in enumerate(todo, 1):
        if progress:
            progress(f"[{i}/{len(todo)}] collecting {a.name} attempt {a.attempt} (job {a.slurm_job_id})")
        if _collect_attempt(a, store, tally):
            ledger.update(a.run_id, a.attempt, collected=True)
    if tally.skipped:
        raise tally.partial()
    return tally.added


class _Tally:
    """What one :func:`collect` did: new records, their outcomes, and the attempts set aside, by why."""

    def __init__(self, counts: dict[str, int]) -> None:
        self.added = 0
        self.counts = counts
        self.conflicts: list[tuple[dict, dict]] = []
        self.refused: list[str] = []
        self.unreadable: list[str] = []
        self.unfetched: list[str] = []
        self.skipped: list[dict] = []

    def aside(self, a: Attempt, reason: str, bucket: list[str]) -> None:
        bucket.append(f"  {_label(a)}: {reason}")
        self.skipped.append(
            {"run_id": a.run_id, "attempt": a.attempt, "slurm_job_id": a.slurm_job_id, "reason": reason}
        )

    def clashed(self, a: Attempt, pairs: list[tuple[dict, dict]], why) -> None:
        """Record ids stored with other content (``why(record, stored)`` says how) set ``a`` aside."""
        self.conflicts += pairs
        self.skipped += [
            {"run_id": a.run_id, "attempt": a.attempt, "slurm_job_id": a.slurm_job_id, "reason": why(r, old)}
            for r, old in pairs
        ]

    def partial(self) -> CollectPartial:
        """The one error naming every set-aside attempt (rule ``collect_partial``), its class by the worst kind."""
        sections = []
        if self.unfetched:
            sections.append(
                f"{len(self.unfetched)} finished attempt(s) stay uncollected: their logs could not be fetched from "
                "the cluster:\n" + "\n".join(self.unfetched)
            )
        if self.refused:
            sections.append(
                f"{len(self.refused)} file(s) in job folders are not regular files or lead out of their folder; "
                "collect does not read them and leaves those attempts uncollected. Remove them, then collect "
                "again:\n" + "\n".join(self.refused)
            )
        if self.unreadable:
            sections.append(
                f"{len(self.unreadable)} attempt(s) could not be read and were set aside (details in the debug log); "
                "fix or remove what is named, then collect again:\n" + "\n".join(self.unreadable)
            )
        if self.conflicts:
            lines = [
                f"  {n['record_id']}: stored = {_describe(old)}; new = {_describe(n)}" for n, old in self.conflicts
            ]
            sections.append(
                f"{len(self.conflicts)} record id(s) are stored already with different content; nothing was "
                "overwritten and these attempts stay uncollected:\n" + "\n".join(lines)
            )
        n_aside = len({(s["run_id"], s["attempt"]) for s in self.skipped})
        message = (
            f"collect is partial (rule collect_partial): {self.added} new record(s) added, {n_aside} attempt(s) set "
            "aside and left uncollected (the next collect tries them again).\n" + "\n".join(sections)
        )
        cls = (
            CollectConflict
            if self.conflicts
            else CollectRefused
            if self.refused
            else CollectError
            if self.unfetched
            else CollectUnreadable
        )
        return cls(message, added=self.added, skipped=self.skipped, outcomes=self.counts)


def _collect_attempt(a: Attempt, store, tally: _Tally) -> bool:
    """Fetch, check and read one finished attempt and store its records; True when it is collected. An attempt
    that cannot be fetched or read, holds refused files or clashes with a stored record is set aside in ``tally``.

    Raises:
        StoreError, LedgerError: the store or the ledger itself fails (every attempt would fail alike).
    """
    import logging

    from bridgebench.launch.ledger import LedgerError
    from bridgebench.launch.nodepaths import attempt_folder
    from bridgebench.launch.tracking import attempt_logs
    from bridgebench.results.store import StoreError

    try:
        why_not = _fetch(a)
        if why_not:  # over SSH the logs are on the cluster: leave the attempt uncollected, say why
            tally.aside(a, why_not, tally.unfetched)
            return False
        logs = attempt_logs(a)
        folder = attempt_folder(a.job_dir, a.job_name)
        # the job wrote them: regular files inside its folder only
        bad = jobfiles.refused(str(folder) if folder else a.job_dir, logs)
        if bad:
            for b in bad:
                tally.aside(a, b, tally.refused)
            return False
        recs = records_for(a, logs, store)
        clash = [(r, old) for r in recs if (old := store.stored_differs(r)) is not None]
    except (StoreError, LedgerError):
        raise
    except Exception as err:  # noqa: BLE001  (one attempt's bad data must not stop the others: named, set aside)
        logging.getLogger(__name__).debug("collect: %s set aside", _label(a), exc_info=True)
        tally.aside(a, f"cannot be read: {type(err).__name__}: {err}", tally.unreadable)
        return False
    if clash:
        tally.clashed(
            a,
            clash,
            lambda r, old: f"record id {r['record_id']} is stored already with other content ({_describe(old)})",
        )
        return False
    new = store.add(recs)
    tally.added += new
    if new:
        from bridgebench.results.outcomes import label, outcome_of

        for r in recs:
            key = label(outcome_of(r))
            tally.counts[key] = tally.counts.get(key, 0) + 1
    if store.last_conflicts:  # a concurrent writer stored another version between the check and the link
        late = [(r, store.get(r["record_id"])) for r in recs if r["record_id"] in store.last_conflicts]
        tally.clashed(a, late, lambda r, _: f"record id {r['record_id']} was stored meanwhile with other content")
        return False
    return True
