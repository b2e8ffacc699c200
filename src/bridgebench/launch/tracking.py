"""Job states from SLURM, degrading gracefully: what ``status`` (and ``submit --wait``) show.

For every unsettled attempt of the cluster, SLURM is asked twice: the controller (``squeue --me --states=all``:
live state and, for a PENDING job, SLURM's pending reason such as ``PartitionNodeLimit``) and accounting (``sacct``:
final state, exit code, node list, start and end). A reply counts only when its JobName is the attempt's (SLURM job
ids repeat after a purge or on another cluster: launch/provenance.py). Then, per attempt:

* accounting reports a final state -> that state (the failure reason is classified from the logs); a job that
  FAILED because one of its steps ran out of memory (or lost its node) is OUT_OF_MEMORY (NODE_FAIL): the step's
  state is the cause (:func:`_accounting`);
* the controller lists the job -> its state (PENDING with its reason);
* otherwise SLURM cannot currently vouch for the job (controller down or killed, or it no longer knows the job):
  the attempt shows ``UNKNOWN`` with its last known state, and once that has lasted ``cluster.lost_after_s``
  (counted from the first refresh that could not vouch for it) it becomes ``LOST`` -- never RUNNING forever.
  An attempt submitted to a cluster state that no longer exists (another ``cluster_id``) is LOST at once.

A LOST attempt is looked up again on every refresh and comes back if SLURM reports it again. When neither daemon
answers, the ledger is still returned (states as last known, shown UNKNOWN) with a hint to start or reach the cluster.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from omegaconf import DictConfig

from bridgebench.launch import slurmcli
from bridgebench.launch.ledger import FINAL_STATES, LOST, Attempt, Ledger
from bridgebench.launch.provenance import cluster_identity

UNKNOWN = "UNKNOWN"
SACCT_FORMAT = "JobID,JobName,State,ExitCode,NodeList,Reason,Start,End"
FAILED_STATES = ("FAILED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY", "CANCELLED")


@dataclass(kw_only=True)
class Refresh:
    """The attempts as ``status`` shows them (unreported ones as ``UNKNOWN``) and notes for the user."""

    attempts: list[Attempt]
    notes: list[str] = field(default_factory=list)


def attempt_logs(a: Attempt) -> list[Path]:
    """Log files of an attempt (nemo-run's sbatch and srun outputs for its SLURM job id)."""
    if not a.job_dir or not a.slurm_job_id:
        return []
    jid = a.slurm_job_id
    return sorted(p for p in Path(a.job_dir).rglob("*.out") if p.name.endswith(f"_{jid}.out") or f"_{jid}_" in p.name)


def fetch_logs(a: Attempt, cluster) -> str | None:
    """Over SSH: copy the attempt's job folder on the cluster (``node_job_dir``: logs, ``out/``) into its mirror on
    the submit side through the tunnel (:func:`bridgebench.launch.tunnel.fetch_dir`). Returns None, or why it could
    not (the tunnel is down); a local tunnel has nothing to fetch."""
    if cluster.tunnel.type == "local" or not a.node_job_dir or not a.job_dir or not a.job_name:
        return None
    from bridgebench.launch.nodepaths import experiment_id
    from bridgebench.launch.tunnel import TunnelError, fetch_dir

    local = Path(a.job_dir) / "experiments" / a.job_name / experiment_id(a.job_name) / a.job_name
    try:
        fetch_dir(cluster, a.node_job_dir, local)
    except TunnelError as err:
        return str(err)
    return None


def belongs(a: Attempt, cfg: DictConfig) -> bool:
    """True when ``a`` was submitted to this cluster (by name; legacy attempts without a cluster id count)."""
    name = str(cfg.cluster.name)
    return a.cluster_id is None or a.cluster_id == name or a.cluster_id.startswith(name + "-")


def _name_ok(a: Attempt, reported: str) -> bool:
    # nemo-run names the SLURM job "<account>-<account suffix>.<job name>"
    return not a.job_name or reported == a.job_name or reported.endswith("." + a.job_name)


def _epoch(stamp: str) -> float | None:
    """A SLURM timestamp (``2026-11-23T11:43:39``, the cluster's local time) as epoch seconds, or None."""
    if not stamp or stamp in ("Unknown", "None", "N/A"):
        return None
    try:
        return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S").timestamp()
    except ValueError:
        return None


def _queue(cfg: DictConfig) -> dict[str, dict[str, str]]:
    out = slurmcli.run(["squeue", "--me", "-h", "--states=all", "-o", "%i|%T|%r|%j"], cfg)
    jobs = {}
    for line in out.splitlines():
        parts = line.strip().split("|", 3)
        if len(parts) == 4:
            jobs[parts[0]] = {"state": parts[1], "reason": parts[2], "name": parts[3]}
    return jobs


#: Step states that explain a FAILED job: the step's verdict is the job's cause (see :func:`_accounting`).
STEP_VERDICTS = ("OUT_OF_MEMORY", "NODE_FAIL")


def _accounting(job_ids: list[str], cfg: DictConfig) -> dict[str, dict[str, str]]:
    """``sacct`` rows of the jobs (allocation and steps), one per job id: the allocation's row, whose ``state`` is
    the job's final state -- except that a FAILED job one of whose steps ended OUT_OF_MEMORY (or NODE_FAIL) takes
    that step's state, and its ``step`` / ``step_exitcode`` say which.

    Why: nemo-run runs the payload in an ``srun`` step. When the kernel's OOM killer (the step's memory cgroup,
    ``--mem``) kills a task, slurmstepd marks the *step* OUT_OF_MEMORY (``Detected 1 oom-kill event(s) in
    StepId=N.0``); ``srun`` then exits 1 and the batch script with it, so SLURM records the *job* as FAILED 1:0.
    Measured on the local cluster (Slurm 22.05, task/cgroup): ``sbatch --mem=64M --wrap 'srun python3 alloc.py'``
    -> job FAILED 1:0, step 0 OUT_OF_MEMORY 0:125. The job failed because its step ran out of memory, so the
    attempt's state says so (``sacct`` without ``-X`` shows both)."""
    if not job_ids:
        return {}
    out = slurmcli.run(["sacct", "-n", "-P", "-j", ",".join(job_ids), f"--format={SACCT_FORMAT}"], cfg)
    jobs: dict[str, dict[str, str]] = {}
    steps: dict[str, list[dict[str, str]]] = {}
    keys = [k.lower() for k in SACCT_FORMAT.split(",")]
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) != len(keys):
            continue
        row = dict(zip(keys, parts))
        if row["jobid"] in job_ids:
            jobs[row["jobid"]] = row
        elif row["jobid"].split(".")[0] in job_ids:
            steps.setdefault(row["jobid"].split(".")[0], []).append(row)
    for jid, row in jobs.items():
        if row["state"].split(" ")[0] != "FAILED":
            continue
        for verdict in STEP_VERDICTS:
            step = next((st for st in steps.get(jid, []) if st["state"].split(" ")[0] == verdict), None)
            if step is not None:
                row |= {"state": verdict, "step": step["jobid"], "step_exitcode": step["exitcode"]}
                break
    return jobs


def failure_reason(a: Attempt, state: str, exit_code: str, slurm_reason: str) -> str:
    """``<class>: <detail>`` of a failed attempt: the log parser's failure class when a log shows one, else the
    scheduler's state with the exit code, SLURM's reason and the log's last error line
    (:func:`bridgebench.launch.outcome.failure_reason`)."""
    from bridgebench.launch.outcome import failure_reason as reason

    return reason(state, exit_code or None, slurm_reason, attempt_logs(a))


def update(cfg: DictConfig, ledger: Ledger, *, now: float | None = None) -> Refresh:
    """Refresh every unsettled (or LOST) attempt of ``cfg.cluster`` in ``ledger`` from SLURM; see the module
    docstring. Never raises because SLURM is unreachable: the notes say so."""
    now = time.time() if now is None else now
    current = cluster_identity(cfg.cluster)
    lost_after = float(cfg.cluster.get("lost_after_s") or 600)
    attempts = ledger.attempts()
    todo = [a for a in attempts if belongs(a, cfg) and not a.finished]
    notes: list[str] = []
    display: dict[tuple[str, int], Attempt] = {}

    gone = [a for a in todo if a.cluster_id not in (None, current)]
    for a in gone:
        if a.state != LOST:
            reason = (
                f"submitted to cluster state {a.cluster_id}, which is gone (the cluster is now {current}): SLURM "
                f"can no longer report job {a.slurm_job_id} (last known {a.state})"
            )
            ledger.update(a.run_id, a.attempt, state=LOST, reason=reason)
    todo = [a for a in todo if a not in gone and a.slurm_job_id]
    if not todo:
        return Refresh(attempts=ledger.attempts(), notes=notes)
    queue, acct, why_ctld = _ask_slurm(cfg, todo, notes)
    for a in todo:
        q = (queue or {}).get(a.slurm_job_id)
        q = q if q and _name_ok(a, q["name"]) else None
        s = (acct or {}).get(a.slurm_job_id)
        s = s if s and _name_ok(a, s["jobname"]) else None
        s_state = s["state"].split(" ")[0] if s else ""
        if (s and s_state in FINAL_STATES) or (q and q["state"].split(" ")[0] != "PENDING"):
            why_not = fetch_logs(a, cfg.cluster)  # over SSH: the job's logs and out/ back through the tunnel
            if why_not and why_not not in notes:
                notes.append(f"could not fetch the logs of job {a.slurm_job_id}: {why_not}")
        if s and s_state in FINAL_STATES:
            ledger.update(a.run_id, a.attempt, **_accounted_fields(a, s, s_state))
        elif q:
            ledger.update(a.run_id, a.attempt, **_queued_fields(a, q, s, accounting=acct is not None))
        else:
            if queue is None:
                why = why_ctld or "the SLURM controller did not answer"
            elif s:
                why = f"accounting says {s_state} but the controller no longer lists job {a.slurm_job_id}"
            else:
                why = f"neither the controller nor accounting lists job {a.slurm_job_id}"
            shown = _unvouched(a, ledger, why, now=now, lost_after=lost_after)
            if shown is not None:
                display[(a.run_id, a.attempt)] = shown
    out = [display.get((a.run_id, a.attempt), a) for a in ledger.attempts()]
    return Refresh(attempts=out, notes=notes)


def _ask_slurm(cfg: DictConfig, todo: list[Attempt], notes: list[str]) -> tuple[dict | None, dict | None, str | None]:
    """The controller's queue and accounting's records of ``todo``'s jobs (None: that side did not answer) and why
    the controller did not; what could not be reached is said in ``notes``."""
    queue, acct, why_ctld = None, None, None
    reach = slurmcli.probe(cfg)  # a missing slurm.conf, a daemon or login node refusing connections: known at once
    if reach.none and reach.controller == reach.accounting:
        notes.append(
            f"cannot reach SLURM: {reach.controller}; {slurmcli.hint(cfg)}; showing the ledger's last known states"
        )
        return None, None, reach.controller
    try:
        if reach.controller is not None:
            raise slurmcli.SlurmUnreachable(f"{reach.controller}; {slurmcli.hint(cfg)}")
        queue = _queue(cfg)
    except slurmcli.SlurmError as err:
        why_ctld = str(err)
    try:
        if reach.accounting is not None:
            raise slurmcli.SlurmUnreachable(f"{reach.accounting}; {slurmcli.hint(cfg)}")
        acct = _accounting([a.slurm_job_id for a in todo], cfg)
    except slurmcli.SlurmError as err:
        if queue is None:
            hint = "; " + slurmcli.hint(cfg)
            both = f"{(why_ctld or '').replace(hint, '')}; {str(err).replace(hint, '')}{hint}"
            notes.append(f"cannot reach SLURM ({both}); showing the ledger's last known states")
        else:
            notes.append(f"SLURM accounting did not answer ({err})")
    if queue is None and acct is not None:
        notes.append(f"the SLURM controller did not answer ({why_ctld}); unfinished jobs are UNKNOWN")
    return queue, acct, why_ctld


def _accounted_fields(a: Attempt, s: dict, s_state: str) -> dict:
    """Ledger fields of an attempt whose job accounting reports ended (``s``: its sacct record): state, exit code,
    nodes, times, and for a failure its reason (with the step that ran out of memory)."""
    fields = {
        "state": s_state,
        "exit_code": s["exitcode"],
        "node_list": s["nodelist"],
        "started_at": _epoch(s["start"]),
        "ended_at": _epoch(s["end"]),
        "unknown_since": None,
    }
    if s_state in FAILED_STATES:
        fields["reason"] = failure_reason(a, s_state, s["exitcode"], s["reason"])
        if s.get("step"):  # the job FAILED because this step ran out of memory: say which step
            why = f"step {s['step']} ended {s_state} (exit code {s['step_exitcode']}; job FAILED)"
            fields["reason"] = f"{fields['reason']}; {why}"[:500]
    elif a.state == LOST:
        fields["reason"] = None
    return fields


def _queued_fields(a: Attempt, q: dict, s: dict | None, *, accounting: bool) -> dict:
    """Ledger fields of an attempt the controller still lists (``q``; ``s``: its sacct record, if any): its state
    (COMPLETING while accounting, when it answers, has not caught up with an end), and the pending or failure
    reason."""
    state = q["state"].split(" ")[0]
    if state in FINAL_STATES and accounting:
        # the controller says it ended, accounting has not caught up: keep the attempt open until sacct
        # gives the exit code (the next refresh)
        state = "COMPLETING"
    fields = {"state": state, "unknown_since": None}
    if state in FAILED_STATES:
        fields["reason"] = failure_reason(a, state, "", q["reason"])
    if state == "PENDING":
        fields["reason"] = f"pending: {q['reason']}" if q["reason"] not in ("", "None") else None
    elif a.state in ("PENDING", LOST):
        fields["reason"] = None
    if s:
        fields |= {"node_list": s["nodelist"], "started_at": _epoch(s["start"])}
    return fields


def _unvouched(a: Attempt, ledger: Ledger, why: str, *, now: float, lost_after: float) -> Attempt | None:
    """An attempt SLURM does not vouch for (``why``): LOST once unknown for ``lost_after`` s, else shown as UNKNOWN
    (returned, for the display; the ledger keeps its last known state and when it became unknown)."""
    since = a.unknown_since or now
    if now - since >= lost_after:
        last = a.state if a.state != LOST else "LOST"
        ledger.update(
            a.run_id,
            a.attempt,
            state=LOST,
            unknown_since=since,
            reason=f"lost: SLURM has not vouched for job {a.slurm_job_id} for {now - since:.0f} s "
            f"(cluster.lost_after_s = {lost_after:g}; last known {last}): {why}"[:500],
        )
        return None
    if a.unknown_since is None:
        ledger.update(a.run_id, a.attempt, unknown_since=since)
    if a.state == LOST:
        return None
    return replace(
        a,
        state=UNKNOWN,
        unknown_since=since,
        reason=f"last known {a.state}; {why}; LOST after {lost_after - (now - since):.0f} s more"[:500],
    )
