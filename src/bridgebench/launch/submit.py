"""Submit planned runs through nemo-run's ``SlurmExecutor``, track them in the ledger, refresh, cancel, retry, collect.

Flow: ``submit`` plans (``launch/plan.py``: every rule and Megatron-Bridge validation first), then submits each run
with ``nemo_run.Experiment(...).run(detach=True)`` and records an attempt in the ledger. ``refresh`` asks SLURM
accounting (``sacct``, as nemo-run itself does) for every unfinished attempt; a FAILED / NODE_FAIL attempt whose log
shows a known-flaky failure (NCCL error or watchdog timeout, CUDA illegal memory access, node failure) is resubmitted
with the failed nodes excluded, up to ``cluster.max_retries``, as a new attempt of the same run. ``collect`` parses the
logs of finished attempts into records and adds them to the results store (idempotent).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import subprocess
import time
from pathlib import Path
from typing import Callable

from omegaconf import DictConfig, OmegaConf

from bridgebench.errors import BridgebenchError
from bridgebench.launch import executor as ex
from bridgebench.launch.ledger import Attempt, Ledger
from bridgebench.paths import REPO_ROOT

FLAKY_OUTCOMES = {"nccl_error", "node_failure"}
FLAKY_TEXT = ("illegal memory access",)


class SubmitError(BridgebenchError, RuntimeError):
    """Submission or a SLURM command failed; the message says which and why."""


def _client_env(cfg: DictConfig) -> dict[str, str]:
    env = dict(os.environ)
    for key, value in OmegaConf.to_container(cfg.cluster.client_env, resolve=True).items():
        path = Path(value)
        env[key] = str(path if path.is_absolute() or "/" not in value else REPO_ROOT / path)
    return env


def _slurm(cmd: list[str], cfg: DictConfig) -> str:
    """Run a SLURM client command on the submit side (local tunnel) and return stdout. Raises SubmitError."""
    if cfg.cluster.tunnel.type != "local":
        import nemo_run as run

        tunnel = run.SSHTunnel(
            host=cfg.cluster.tunnel.host, user=cfg.cluster.tunnel.user, job_dir=str(cfg.cluster.tunnel.job_dir)
        )
        res = tunnel.run(shlex.join(cmd), hide=True, warn=True)
        if res.return_code:
            raise SubmitError(f"{cmd[0]} failed on {cfg.cluster.tunnel.host}: {res.stderr.strip()}")
        return res.stdout
    res = subprocess.run(cmd, capture_output=True, text=True, env=_client_env(cfg))
    if res.returncode:
        raise SubmitError(f"{' '.join(cmd)} failed: {res.stderr.strip()}")
    return res.stdout


def submit_run(
    cfg: DictConfig,
    run_dir: Path,
    name: str,
    run_id: str,
    ledger: Ledger,
    *,
    attempt: int = 0,
    exclude: list[str] | None = None,
) -> Attempt:
    """Submit one planned run (``run_dir`` holds its ``config.yaml``) and record the attempt. Raises SubmitError."""
    import nemo_run as run

    optstep = cfg.job.type == "optstep"
    from bridgebench.launch.plan import nodes_and_tasks

    nodes, per_node = (1, 1) if optstep else nodes_and_tasks(cfg)
    job_name = f"{name}-a{attempt}"
    base = ex.job_dir(cfg.cluster) / run_id / f"a{attempt}"
    base.mkdir(parents=True, exist_ok=True)
    out_dir = base / "out"
    container = bool(cfg.cluster.pyxis and cfg.cluster.container)
    env = {
        **OmegaConf.to_container(cfg.env_vars, resolve=True),
        "BRIDGEBENCH_CONFIG_HASH": run_id.split("-r")[0],
        "BRIDGEBENCH_ATTEMPT": str(attempt),
        "BRIDGEBENCH_OUT_DIR": str(out_dir),  # mbridge/build.py puts logger.tensorboard_dir under it
    }
    segment = ex.segment_for(nodes, int(cfg.gpu.gpus_per_node)) if cfg.cluster.supports_segment else None
    executor = ex.make_executor(
        cfg.cluster,
        nodes=nodes,
        tasks_per_node=per_node,
        gpus_per_node=None if optstep else cfg.gpu.gpus_per_node,
        container_image=str(cfg.release.container_image) if container else None,
        env=env,
        job_dir_path=base / "experiments",
        segment=segment,
    )
    executor.packager = run.Packager()  # the code is the repository itself (mounted on clusters), not an archive
    if exclude:
        executor.additional_parameters = {"exclude": ",".join(ex.check_name("node", n) for n in exclude)}
    command = ex.payload_command(
        str(cfg.job.type), str(run_dir / "config.yaml"), str(out_dir), container, list(cfg.job.wrapper)
    )
    script = run.Script(inline=command, entrypoint="bash")
    env_before = dict(os.environ)
    os.environ.update({k: v for k, v in _client_env(cfg).items() if k in cfg.cluster.client_env})
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            with run.Experiment(
                ex.check_name("run name", job_name), executor=executor, base_dir=str(base), log_level="ERROR"
            ) as exp:
                exp.add(script, name=job_name)
                exp.run(detach=True)
        handle = exp.jobs[0].handle if exp.jobs else ""
        job_id = str(handle).rstrip("/").split("/")[-1] if handle else None
        if not job_id or not job_id.isdigit():
            raise SubmitError(f"nemo-run returned no SLURM job id for {job_name} (handle {handle!r})")
        experiment_id = exp._id
    except SubmitError:
        raise
    except Exception as err:  # nemo-run raises plain exceptions for sbatch failures
        raise SubmitError(f"submitting {job_name} failed: {err}") from err
    finally:
        os.environ.clear()
        os.environ.update(env_before)
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
        job_dir=str(base),
        excluded_nodes=list(exclude or []),
    )
    ledger.add(a)
    return a


def submit(
    overrides: list[str],
    *,
    repeats: int = 1,
    ledger: Ledger | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[Attempt]:
    """Plan ``overrides`` (all checks first; bad input submits nothing), then submit every run ``repeats`` times."""
    from bridgebench.launch.plan import plan

    say = progress or (lambda msg: None)
    out_dir, runs = plan(overrides, progress=say)
    return submit_planned(runs, repeats=repeats, ledger=ledger, progress=say)


def submit_planned(
    runs: list,
    *,
    repeats: int = 1,
    ledger: Ledger | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[Attempt]:
    """Submit already planned runs (``bridgebench.launch.plan.PlannedRun``) ``repeats`` times each; run ids are
    ``<config hash>-r<repeat>``. Raises SubmitError."""
    say = progress or (lambda msg: None)
    ledger = ledger or Ledger()
    attempts = []
    for r in runs:
        cfg = OmegaConf.load(Path(r.dir) / "config.yaml")
        for rep in range(repeats):
            run_id = f"{r.config_hash}-r{rep}"
            say(f"submitting {r.name} (repeat {rep})")
            attempts.append(submit_run(cfg, Path(r.dir), r.name, run_id, ledger, attempt=ledger.next_attempt(run_id)))
    return attempts


def _sacct(job_ids: list[str], cfg: DictConfig) -> dict[str, dict[str, str]]:
    if not job_ids:
        return {}
    out = _slurm(
        ["sacct", "-X", "-n", "-P", "-j", ",".join(job_ids), "--format=JobID,State,ExitCode,NodeList,Reason"], cfg
    )
    states = {}
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) >= 4 and parts[0] in job_ids:
            states[parts[0]] = {
                "state": parts[1],
                "exit_code": parts[2],
                "node_list": parts[3],
                "reason": parts[4] if len(parts) > 4 else "",
            }
    return states


def attempt_logs(a: Attempt) -> list[Path]:
    """Log files of an attempt (nemo-run's sbatch and srun outputs for its SLURM job id)."""
    if not a.job_dir or not a.slurm_job_id:
        return []
    return sorted(p for p in Path(a.job_dir).rglob(f"*{a.slurm_job_id}*.out"))


def refresh(cfg: DictConfig, ledger: Ledger | None = None) -> list[Attempt]:
    """Update unfinished attempts from ``sacct``; classify failures from their logs; retry known-flaky failures
    (excluding the failed nodes) up to ``cluster.max_retries``. Returns all attempts."""
    from bridgebench.logs.parser import parse_log

    ledger = ledger or Ledger()
    pending = [a for a in ledger.attempts() if not a.finished]
    states = _sacct([a.slurm_job_id for a in pending if a.slurm_job_id], cfg)
    for a in pending:
        s = states.get(a.slurm_job_id)
        if not s:
            continue
        state = s["state"].split(" ")[0]
        fields = {"state": state, "exit_code": s["exit_code"], "node_list": s["node_list"]}
        if state in ("FAILED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY", "CANCELLED"):
            outcome, detail = (
                state.lower(),
                f"exit code {s['exit_code']}" + (f", {s['reason']}" if s["reason"] and s["reason"] != "None" else ""),
            )
            for log in attempt_logs(a):
                parsed = parse_log(log)
                if parsed.outcome not in ("completed", "incomplete"):
                    outcome, detail = parsed.outcome, (parsed.outcome_detail or "")[:300]
                    break
            fields["reason"] = f"{outcome}: {detail}".strip(": ")
        ledger.update(a.run_id, a.attempt, **fields)
        a.state, a.reason = state, fields.get("reason")
        if state in ("FAILED", "NODE_FAIL") and not a.retried:
            flaky = a.reason and (
                a.reason.split(":")[0] in FLAKY_OUTCOMES
                or state == "NODE_FAIL"
                or any(t in a.reason.lower() for t in FLAKY_TEXT)
            )
            if flaky and a.attempt < int(cfg.cluster.max_retries):
                run_cfg = OmegaConf.load(Path(a.plan_dir) / "config.yaml")
                nodes = [n for n in _expand_nodes(s["node_list"], cfg) if n and n != "None"]
                exclude = (
                    sorted(set(a.excluded_nodes) | set(nodes))
                    if state == "NODE_FAIL" or len(_all_nodes(cfg)) > len(nodes)
                    else list(a.excluded_nodes)
                )
                submit_run(run_cfg, Path(a.plan_dir), a.name, a.run_id, ledger, attempt=a.attempt + 1, exclude=exclude)
                ledger.update(a.run_id, a.attempt, retried=True)
    return ledger.attempts()


def _expand_nodes(node_list: str, cfg: DictConfig) -> list[str]:
    if not node_list or node_list in ("None assigned", "None"):
        return []
    return _slurm(["scontrol", "show", "hostnames", node_list], cfg).split()


def _all_nodes(cfg: DictConfig) -> list[str]:
    return _slurm(["sinfo", "-h", "-N", "-o", "%N"], cfg).split()


def cancel(cfg: DictConfig, run_ids: list[str] | None = None, ledger: Ledger | None = None) -> list[Attempt]:
    """``scancel`` the unfinished attempts (of ``run_ids``, or all) and mark them CANCELLED in the ledger."""
    ledger = ledger or Ledger()
    targets = [a for a in ledger.attempts() if not a.finished and (not run_ids or a.run_id in run_ids)]
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
    progress: Callable[[str], None] | None = None,
) -> list[Attempt]:
    """Refresh until every attempt is finished (retries included) or ``timeout_s`` passes. Returns all attempts."""
    ledger = ledger or Ledger()
    deadline = time.monotonic() + timeout_s
    while True:
        attempts = refresh(cfg, ledger)
        open_ = [a for a in attempts if not a.finished]
        if progress:
            progress(f"{len(attempts) - len(open_)}/{len(attempts)} attempts finished")
        if not open_ or time.monotonic() > deadline:
            return attempts
        time.sleep(poll_s)


def json_attempts(attempts: list[Attempt]) -> str:
    from dataclasses import asdict

    return json.dumps([asdict(a) for a in attempts], indent=2)
