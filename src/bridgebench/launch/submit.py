"""Submit planned runs through nemo-run's ``SlurmExecutor``, track them in the ledger, refresh, cancel, retry, collect.

Flow: ``submit`` plans (``launch/plan.py``: every rule and Megatron-Bridge validation first), checks that the target
cluster can run every job at all (``config/cluster_fit.py``: nodes, GPUs, containers -- before anything reaches
SLURM), skips runs the ledger already has unless ``again`` (then adds new repeats), and submits each run through
``launch/nemorun.py`` -- the same job description and script the plan rendered (``launch/jobspec.py``). Repeats of a
run are chained (``--dependency=afterany``) so they run one after the other; jobs are ``--exclusive`` where the
cluster says so. Each attempt is recorded in the ledger with its own UUID, the cluster identity, the SLURM job name,
the submitted script's sha256 and the code version. ``refresh`` updates states (``launch/tracking.py``: degrades
to UNKNOWN / LOST instead of failing or trusting a stale RUNNING); a FAILED / NODE_FAIL attempt whose log shows a
known-flaky failure (NCCL error or watchdog timeout, CUDA illegal memory access, node failure) is resubmitted with the
failed nodes excluded, up to ``cluster.max_retries``, as a new attempt of the same run. ``collect`` parses the logs of
finished attempts into records and adds them to the results store (idempotent).
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
import uuid
from pathlib import Path
from typing import Callable

from omegaconf import DictConfig, OmegaConf

from bridgebench.config.cluster_fit import cluster_violations
from bridgebench.errors import BridgebenchError
from bridgebench.launch import executor as ex
from bridgebench.launch import nemorun, slurmcli, tracking
from bridgebench.launch.jobspec import build_job, job_spec, run_id_for
from bridgebench.launch.ledger import Attempt, Ledger
from bridgebench.launch.provenance import cluster_identity, code_version
from bridgebench.launch.tracking import attempt_logs  # noqa: F401  (re-exported: collect uses it)

FLAKY_OUTCOMES = {"nccl_error", "node_failure"}
FLAKY_TEXT = ("illegal memory access",)


class SubmitError(BridgebenchError, RuntimeError):
    """Submission or a SLURM command failed; the message says which and why."""


class ClusterCannotRunError(SubmitError):
    """The target cluster can never start a planned job (nodes, GPUs, containers); nothing was submitted."""


class ClusterUnreachableError(ClusterCannotRunError):
    """SLURM cannot be reached at all (no ``slurm.conf``, slurmctld or the login node refusing connections), found
    by :func:`bridgebench.launch.slurmcli.probe` in seconds before anything is submitted; nothing was submitted."""


def _slurm(cmd: list[str], cfg: DictConfig) -> str:
    """Run a SLURM client command on the submit side and return stdout (:func:`bridgebench.launch.slurmcli.run`)."""
    return slurmcli.run(cmd, cfg)


def submit_run(
    cfg: DictConfig,
    run_dir: Path,
    name: str,
    run_id: str,
    ledger: Ledger,
    *,
    attempt: int = 0,
    exclude: list[str] | None = None,
    depends_on: str | None = None,
) -> Attempt:
    """Submit one planned run (``run_dir`` holds its ``config.yaml``) and record the attempt.

    The script is rendered by :func:`bridgebench.launch.jobspec.build_job`, as the plan's ``submit.sh`` was; the
    script as submitted is kept under ``run_dir/submitted/`` and its sha256 in the ledger.

    Raises:
        SubmitError: sbatch failed or returned no job id (nothing recorded).
    """
    config_hash = run_id.rsplit("-r", 1)[0]
    if any(a.attempt == attempt for a in ledger.attempts(run_id)):
        raise SubmitError(f"the ledger has {run_id} attempt {attempt} already; not submitting it again")
    job = build_job(cfg, run_dir, name, config_hash, run_id, attempt, exclude=exclude)
    env = {k: v for k, v in slurmcli.client_env(cfg).items() if k in cfg.cluster.client_env}
    try:
        job_id, script, experiment_id = nemorun.submit(
            job.executor,
            command=job.command,
            job=job.paths,
            intent=job.intent,
            depends_on=depends_on,
            client_env=env,
            config_text=job.config_text,
        )
    except ex.LaunchConfigError:
        raise
    except Exception as err:  # nemo-run raises plain exceptions for sbatch failures
        raise SubmitError(f"submitting {job.paths.job_name} failed: {err}") from err
    _no_requeue(cfg, job_id)
    if script:
        kept = Path(run_dir) / "submitted" / f"{run_id}-a{attempt}.sbatch.sh"
        try:
            kept.parent.mkdir(parents=True, exist_ok=True)
            kept.write_text(script, encoding="utf-8", newline="")
        except OSError as err:  # a full disk: the job is submitted, so record it (its script's sha256 is kept)
            kept.unlink(missing_ok=True)
            logging.getLogger(__name__).warning("could not keep the submitted script %s: %s", kept, err)
    now = time.time()
    a = Attempt(
        run_id=run_id,
        attempt=attempt,
        name=name,
        job_type=str(cfg.job.type),
        state="PENDING",
        submitted_at=now,
        updated_at=now,
        slurm_job_id=job_id,
        experiment_id=experiment_id,
        plan_dir=str(run_dir),
        job_dir=str(job.paths.base),
        node_job_dir=job.paths.node_job_folder,
        excluded_nodes=list(exclude or []),
        uid=uuid.uuid4().hex,
        cluster_id=cluster_identity(cfg.cluster),
        job_name=job.paths.job_name,
        depends_on=depends_on,
        container_image=job.spec.container_image,
        script_sha256=hashlib.sha256(script.encode()).hexdigest() if script else None,
        **code_version(),
    )
    ledger.add(a)
    return a


def _no_requeue(cfg: DictConfig, job_id: str | None) -> None:
    """Make the job non-requeueable (``scontrol update JobId=N Requeue=0``), so a node failure ends it NODE_FAIL.

    nemo-run 0.11.1 submits with ``sbatch --requeue`` (``SlurmTunnelScheduler.schedule``), and SLURM requeues a
    requeueable batch job whose node fails: the same job id goes back to PENDING and later reruns, so its NODE_FAIL
    is never final (measured on the local cluster: ``scontrol update NodeName=<node> State=DOWN`` under a running
    job -> sacct NODE_FAIL, then PENDING, Restarts=1). Retries are bridgebench's own (:func:`refresh_report`: a
    NODE_FAIL attempt is resubmitted as a new attempt, the failed node excluded, up to ``cluster.max_retries``),
    so the ledger holds one attempt per run of the job. A job that already finished (a wrapper that exits at once)
    has nothing to requeue; any other failure goes to the debug log, not raised and not printed (``--json`` output
    stays JSON): the job is submitted either way."""
    if not job_id:
        return
    try:
        _slurm(["scontrol", "update", f"JobId={job_id}", "Requeue=0"], cfg)
    except slurmcli.SlurmError as err:
        if "already finished" not in str(err) and "already completing" not in str(err).lower():
            logging.getLogger(__name__).debug("could not make job %s non-requeueable: %s", job_id, err)


def _live_nodes(cfg: DictConfig) -> int | None:
    """Nodes SLURM reports for the cluster's partition (``sinfo``), or None when it cannot be asked."""
    try:
        out = _slurm(["sinfo", "-h", "-p", str(cfg.cluster.partition), "-o", "%D"], cfg)
    except slurmcli.SlurmError:
        return None
    counts = [int(x) for x in out.split() if x.isdigit()]
    return sum(counts) if counts else None


def check_cluster_can_run(cfgs: list[tuple[str, DictConfig]]) -> None:
    """Raise :class:`ClusterCannotRunError` (naming each run and rule) if the target cluster can never start a job,
    :class:`ClusterUnreachableError` (the cause and how to start or reach the cluster) if SLURM cannot be reached.

    ``cfgs`` = (run name, composed config) pairs. The cluster's declared facts are checked first (no SLURM needed),
    then :func:`bridgebench.launch.slurmcli.probe` (seconds, instead of sbatch's own retries of a minute or more),
    then ``sinfo``'s node count.
    """

    def problems(live: dict[str, int | None]) -> list[str]:
        out = []
        for name, cfg in cfgs:
            found = cluster_violations(
                cfg.cluster, job_spec(cfg).needs(cfg), live_nodes=live.get(str(cfg.cluster.name))
            )
            out += [f"  {name}: {v}" for v in found]
        return out

    def refuse(found: list[str]) -> None:
        if found:
            raise ClusterCannotRunError("the cluster cannot run this plan; nothing was submitted:\n" + "\n".join(found))

    refuse(problems({}))
    live: dict[str, int | None] = {}
    for _, cfg in cfgs:
        key = str(cfg.cluster.name)
        if key in live:
            continue
        reach = slurmcli.probe(cfg)
        if reach.controller is not None:
            raise ClusterUnreachableError(
                f"cannot reach SLURM: {reach.controller}; {slurmcli.hint(cfg)}; nothing was submitted"
            )
        live[key] = _live_nodes(cfg)
    refuse(problems(live))


def submit(
    overrides: list[str],
    *,
    repeats: int = 1,
    again: bool = False,
    ledger: Ledger | None = None,
    progress: Callable[[str], None] | None = None,
    notify: Callable[[str], None] | None = None,
) -> list[Attempt]:
    """Plan ``overrides`` (all checks first; bad input submits nothing), check the cluster can run every job, then
    submit every run ``repeats`` times, each repeat after the previous one (SLURM dependency chain).

    A run whose config hash has runs in the ledger already is skipped (``notify`` says so) unless ``again``; with
    ``again`` its new repeats continue the numbering (``<hash>-r2`` after r0, r1).

    Raises:
        SubmitError: every run exists already (use ``again``), the cluster cannot run a job, or sbatch failed.
    """
    from bridgebench.launch.plan import plan

    say = progress or (lambda msg: None)
    out_dir, runs = plan(overrides, progress=say)
    return submit_planned(
        runs, repeats=repeats, again=again, ledger=ledger, progress=say, notify=notify, plan_dir=out_dir
    )


def submit_planned(
    runs: list,
    *,
    repeats: int = 1,
    again: bool = False,
    ledger: Ledger | None = None,
    progress: Callable[[str], None] | None = None,
    notify: Callable[[str], None] | None = None,
    plan_dir: Path | None = None,
) -> list[Attempt]:
    """Submit already planned runs (``bridgebench.launch.plan.PlannedRun``) as :func:`submit` does: skip runs in
    the ledger unless ``again``, check the cluster can run every job, repeats in a dependency chain. ``plan_dir`` is
    removed when nothing is submitted. Raises :class:`SubmitError`."""
    say = progress or (lambda msg: None)
    tell = notify or (lambda msg: None)
    ledger = ledger or Ledger()
    out_dir = plan_dir
    todo = []
    for r in runs:
        existing = ledger.runs_of(r.config_hash)
        if existing and not again:
            states = ", ".join(f"{a.run_id} {a.state}" for rid in existing for a in ledger.attempts(rid)[-1:])
            tell(f"skipped {r.name}: the ledger has {len(existing)} run(s) of this config ({states}); add --again")
            continue
        first = 1 + max((int(rid.rsplit("-r", 1)[1]) for rid in existing), default=-1)
        todo.append((r, OmegaConf.load(Path(r.dir) / "config.yaml"), first))
    if not todo:
        if out_dir is not None:
            shutil.rmtree(out_dir, ignore_errors=True)  # the plan of a submission that submits nothing is not kept
        raise SubmitError(
            "nothing submitted: every run of this plan is in the ledger already (`bridgebench status` shows "
            "them); add --again to submit new repeats"
        )
    try:
        check_cluster_can_run([(r.name, cfg) for r, cfg, _ in todo])
    except ClusterCannotRunError:
        if out_dir is not None:
            shutil.rmtree(out_dir, ignore_errors=True)
        raise
    attempts = []
    for r, cfg, first in todo:
        previous = None
        for rep in range(first, first + repeats):
            run_id = run_id_for(r.config_hash, rep)
            say(f"submitting {r.name} (repeat {rep})")
            a = submit_run(cfg, Path(r.dir), r.name, run_id, ledger, attempt=0, depends_on=previous)
            previous = a.slurm_job_id
            attempts.append(a)
    return attempts


def refresh(cfg: DictConfig, ledger: Ledger | None = None) -> list[Attempt]:
    """Update attempts from SLURM (:func:`bridgebench.launch.tracking.update`), then retry known-flaky failures
    (excluding the failed nodes) up to ``cluster.max_retries``. Returns all attempts as ``status`` shows them."""
    return refresh_report(cfg, ledger).attempts


def refresh_report(cfg: DictConfig, ledger: Ledger | None = None) -> tracking.Refresh:
    """:func:`refresh` plus the notes for the user (cluster unreachable, jobs UNKNOWN or LOST, retries not
    submitted). Never raises because a retry cannot be submitted: the ledger is shown as it is, a note says why,
    and the next refresh tries that retry again."""
    ledger = ledger or Ledger()
    report = tracking.update(cfg, ledger)
    retried = False
    for a in ledger.attempts():
        if a.state not in ("FAILED", "NODE_FAIL") or a.retried or not tracking.belongs(a, cfg):
            continue
        flaky = a.reason and (
            a.reason.split(":")[0] in FLAKY_OUTCOMES
            or a.state == "NODE_FAIL"
            or any(t in a.reason.lower() for t in FLAKY_TEXT)
        )
        if flaky and a.attempt < int(cfg.cluster.max_retries):
            try:
                run_cfg = OmegaConf.load(Path(a.plan_dir) / "config.yaml")
                exclude = _retry_exclusion(a, run_cfg, cfg, report.notes)
                submit_run(run_cfg, Path(a.plan_dir), a.name, a.run_id, ledger, attempt=a.attempt + 1, exclude=exclude)
            except Exception as err:  # noqa: BLE001  (status, status --json and submit --wait must show the ledger)
                logging.getLogger(__name__).debug("retry of %s attempt %s failed", a.run_id, a.attempt, exc_info=True)
                report.notes.append(
                    f"the retry of {a.run_id} attempt {a.attempt} ({a.state}) could not be submitted: "
                    f"{type(err).__name__}: {err}; the ledger is shown as it is and the next status tries again"
                )
                continue
            ledger.update(a.run_id, a.attempt, retried=True)
            retried = True
    if retried:
        report = tracking.Refresh(
            attempts=[
                next((b for b in report.attempts if (b.run_id, b.attempt) == (x.run_id, x.attempt)), x)
                for x in ledger.attempts()
            ],
            notes=report.notes,
        )
    return report


def _retry_exclusion(a: Attempt, run_cfg: DictConfig, cfg: DictConfig, notes: list[str]) -> list[str]:
    """Nodes a retry of ``a`` excludes: the nodes it failed on (always after NODE_FAIL; after another flaky failure
    only when the partition has other nodes) plus those its attempt excluded already -- but never so many that the
    partition is left with fewer nodes than the job needs (a one-node partition after a NODE_FAIL: excluding its only
    node makes sbatch refuse every retry). Then the retry excludes nothing and ``notes`` says so."""
    from bridgebench.launch.jobspec import nodes_and_tasks

    failed = [n for n in _expand_nodes(a.node_list or "", cfg) if n and n != "None"]
    partition = str(run_cfg.cluster.partition)
    in_partition = set(_partition_nodes(partition, cfg))
    wanted = sorted(set(a.excluded_nodes) | set(failed))
    needed = max(1, nodes_and_tasks(run_cfg)[0])
    left = in_partition - set(wanted)
    if len(left) >= needed:
        return wanted
    if wanted:
        notes.append(
            f"the retry of {a.run_id} attempt {a.attempt} ({a.state}) does not exclude {', '.join(wanted)}: "
            f"partition {partition} has {len(in_partition)} node(s) and the job needs {needed}, so excluding "
            f"them would leave {len(left)} and SLURM would refuse the retry"
        )
    return []


def _partition_nodes(partition: str, cfg: DictConfig) -> list[str]:
    """Node names of ``partition`` (``sinfo -h -N -p <partition> -o %N``)."""
    return _slurm(["sinfo", "-h", "-N", "-p", partition, "-o", "%N"], cfg).split()


def _expand_nodes(node_list: str, cfg: DictConfig) -> list[str]:
    if not node_list or node_list in ("None assigned", "None"):
        return []
    return _slurm(["scontrol", "show", "hostnames", node_list], cfg).split()


def cancel(cfg: DictConfig, run_ids: list[str] | None = None, ledger: Ledger | None = None) -> list[Attempt]:
    """``scancel`` the unsettled attempts (of ``run_ids``, or all) and mark them CANCELLED in the ledger.

    Raises:
        SubmitError: a run id the ledger does not have (nothing is cancelled then), or one submitted to another
            cluster than ``cfg.cluster`` (pass ``--cluster``).
    """
    ledger = ledger or Ledger()
    if run_ids:
        every = ledger.attempts()
        known = {a.run_id for a in every}
        unknown = [r for r in run_ids if r not in known]
        if unknown:
            from difflib import get_close_matches

            near = sorted({m for r in unknown for m in get_close_matches(r, sorted(known), n=3, cutoff=0.6)})
            raise SubmitError(
                f"unknown run id(s) {', '.join(unknown)}: not in the job ledger {ledger.path}; nothing cancelled"
                + (f" (did you mean {', '.join(near)}?)" if near else "; `bridgebench status` lists the runs")
            )
        other = sorted({a.run_id for a in every if a.run_id in run_ids and not tracking.belongs(a, cfg)})
        if other:
            raise SubmitError(
                f"run(s) {', '.join(other)} were submitted to another cluster than {cfg.cluster.name}; nothing "
                "cancelled (pass --cluster <name>)"
            )
    targets = [
        a
        for a in ledger.attempts()
        if not a.settled and tracking.belongs(a, cfg) and (not run_ids or a.run_id in run_ids)
    ]
    ids = [a.slurm_job_id for a in targets if a.slurm_job_id]
    if ids:
        _slurm(["scancel", *ids], cfg)
    for a in targets:
        ledger.update(a.run_id, a.attempt, state="CANCELLED", reason="cancelled by bridgebench cancel")
    return targets


def wait(
    cfg: DictConfig,
    ledger: Ledger | None = None,
    *,
    timeout_s: float = 600,
    poll_s: float = 2.0,
    run_ids: list[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[Attempt]:
    """Refresh until every attempt (of ``run_ids``, retries included) is settled (finished or LOST) or
    ``timeout_s`` passes. Returns those attempts."""
    ledger = ledger or Ledger()
    deadline = time.monotonic() + timeout_s
    while True:
        attempts = [a for a in refresh(cfg, ledger) if not run_ids or a.run_id in run_ids]
        open_ = [a for a in attempts if not a.settled]
        if progress:
            progress(f"{len(attempts) - len(open_)}/{len(attempts)} attempts finished")
        if not open_ or time.monotonic() > deadline:
            return attempts
        time.sleep(poll_s)


#: ``bridgebench submit --wait`` exit codes (README "Exit codes"): every run's last attempt COMPLETED; bad input or a
#: refused submission (every bridgebench error); a run ended otherwise (FAILED, TIMEOUT, CANCELLED, OUT_OF_MEMORY,
#: NODE_FAIL, LOST, ...); the wait timed out with runs still pending or running.
EXIT_OK, EXIT_ERROR, EXIT_NOT_COMPLETED, EXIT_WAIT_TIMEOUT = 0, 2, 3, 4


def _final(a: Attempt) -> str:
    """The attempt's state for the summary: SLURM's, except a COMPLETED job whose payload never started (its logs
    lack the payload's start line: launch/outcome.py) -- the benchmark did not run."""
    state = a.state.split(" ")[0]
    if state == "COMPLETED":
        from bridgebench.launch.outcome import NEVER_STARTED, payload_started

        if payload_started(attempt_logs(a)) is False:
            return f"COMPLETED ({NEVER_STARTED})"
    return state


def wait_summary(attempts: list[Attempt]) -> tuple[int, str]:
    """(exit code, one line) for ``submit --wait``: the state of each run's last attempt (a retried run counts by
    its retry), e.g. ``(3, "5 runs: 3 COMPLETED, 1 TIMEOUT, 1 CANCELLED")``; a COMPLETED job whose payload never
    started counts as ``COMPLETED (never_started)``, not as completed."""
    from collections import Counter

    last: dict[str, Attempt] = {}
    for a in attempts:
        if a.run_id not in last or a.attempt > last[a.run_id].attempt:
            last[a.run_id] = a
    finals = {rid: _final(a) for rid, a in last.items()}
    counts = Counter(finals.values())
    n = len(last)
    text = f"{n} run{'s' * (n != 1)}: " + ", ".join(
        f"{c} {st}" for st, c in sorted(counts.items(), key=lambda kv: (kv[0] != "COMPLETED", -kv[1], kv[0]))
    )
    if any(not a.settled for a in last.values()):
        return EXIT_WAIT_TIMEOUT, f"{text} (still unfinished when --timeout ran out)"
    bad = [a for rid, a in last.items() if finals[rid] != "COMPLETED"]
    if bad:
        why = "; ".join(
            f"{a.run_id}: {finals[a.run_id]}" + (f" ({a.reason[:120]})" if a.reason else "") for a in bad[:3]
        )
        return EXIT_NOT_COMPLETED, f"{text} -- {why}"
    return EXIT_OK, text


def json_attempts(attempts: list[Attempt]) -> str:
    from dataclasses import asdict

    return json.dumps([asdict(a) for a in attempts], indent=2)
