"""What one SLURM job of a planned run looks like on its cluster: the single source of the submission script.

``plan`` and ``submit`` both describe a job with :func:`job_spec` (resources, container, flags the cluster supports)
and :func:`job_paths` (where its files go), and both render it through :mod:`bridgebench.launch.nemorun`; so the
``submit.sh`` a plan shows is byte for byte the script ``submit`` sends for that run's first repeat and attempt
(tests/launch/test_submission_script.py diffs them). Later repeats and retries differ only in their run id, attempt
and (repeats) the ``--dependency`` that chains them.

Cluster facts decide the flags: ``--container-image``/``--container-mounts``/``--mpi=pmix`` only where
``cluster.pyxis`` and ``cluster.container`` are set, ``--segment`` only where ``cluster.supports_segment``,
``--exclusive`` where ``cluster.exclusive`` (every bridgebench job is a measurement: the shipped clusters set it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from bridgebench.config.cluster_fit import JobNeeds
from bridgebench.config.secrets import by_name_all
from bridgebench.launch import executor as ex
from bridgebench.launch import nodepaths, shellsafe
from bridgebench.launch.nodepaths import JobPaths


@dataclass(frozen=True, kw_only=True)
class JobSpec:
    """Resources and flags of one job of a run (no per-submission facts)."""

    job_type: str
    nodes: int
    tasks_per_node: int
    gpus_per_node: int | None  # #SBATCH --gpus-per-node (only where the cluster asks for it)
    container_image: str | None  # None: the payload runs on the host
    segment: int | None  # #SBATCH --segment (None where unsupported)
    exclusive: bool
    wrapper: list[str] = field(default_factory=list)

    def needs(self, cfg: DictConfig) -> JobNeeds:
        """What the cluster must offer for this job (:func:`bridgebench.config.cluster_fit.cluster_violations`).
        A pretrain job needs the run's GPU and the release's container (unless the cluster runs jobs on the host,
        ``cluster.container: false``); the optimizer-step payload needs neither."""
        pretrain = self.job_type == "pretrain"
        image = str(cfg.release.container_image) if pretrain and cfg.cluster.container else self.container_image
        return JobNeeds(
            nodes=self.nodes,
            tasks_per_node=self.tasks_per_node,
            gpu=str(cfg.gpu.name) if pretrain else None,
            gpus_per_node=self.tasks_per_node if pretrain else 0,
            container_image=image,
            job_type=self.job_type,
        )


def nodes_and_tasks(cfg: DictConfig) -> tuple[int, int]:
    """(nodes, tasks per node) of a run: whole nodes of ``gpu.gpus_per_node`` GPUs, or one partial node; the
    optimizer-step payload is one process on one node."""
    if cfg.job.type in ("optstep", "replay"):  # one process: the replay payload only prints the table's log
        return 1, 1
    per_node = int(cfg.gpu.gpus_per_node)
    if cfg.num_gpus < per_node:
        return 1, int(cfg.num_gpus)
    return int(cfg.num_gpus) // per_node, per_node


def job_spec(cfg: DictConfig) -> JobSpec:
    """The job of a composed run on its cluster (``cfg.cluster``)."""
    nodes, per_node = nodes_and_tasks(cfg)
    container = bool(cfg.cluster.pyxis and cfg.cluster.container)
    gpus = int(cfg.gpu.gpus_per_node)
    return JobSpec(
        job_type=str(cfg.job.type),
        nodes=nodes,
        tasks_per_node=per_node,
        gpus_per_node=gpus if cfg.job.type == "pretrain" and cfg.cluster.gpus_per_node_request else None,
        container_image=str(cfg.release.container_image) if container else None,
        segment=ex.segment_for(nodes, gpus, str(cfg.gpu.get("segment_policy") or "node"))
        if cfg.cluster.supports_segment and cfg.job.type == "pretrain"
        else None,
        exclusive=bool(cfg.cluster.exclusive),
        wrapper=list(cfg.job.wrapper),  # checked by shellsafe.check_config: a list of strings
    )


def run_id_for(config_hash: str, repeat: int) -> str:
    """A run's id: config hash + repeat index (``<hash>-r<repeat>``)."""
    return f"{config_hash}-r{repeat}"


def job_paths(cfg: DictConfig, name: str, run_id: str, attempt: int) -> JobPaths:
    """Paths and SLURM job name of one submission, on both sides (:mod:`bridgebench.launch.nodepaths`). The job name
    carries the repeat and the attempt so that ``sacct``'s JobName tells submissions apart.

    Raises:
        bridgebench.launch.executor.LaunchConfigError: the cluster gives the job no way to reach the code.
    """
    repeat = run_id.rsplit("-r", 1)[-1]
    container = job_spec(cfg).container_image is not None
    return nodepaths.job_paths(cfg, run_id, attempt, f"{name}-r{repeat}-a{attempt}", container=container)


def job_env(cfg: DictConfig, config_hash: str, run_id: str, attempt: int) -> dict[str, Any]:
    """Environment the sbatch script exports: the run's ``env_vars`` plus bridgebench's own ids (no secrets: the
    config was checked by :func:`bridgebench.config.secrets.check_secrets`). Variables passed by name
    (``${oc.env:VAR}``, :func:`bridgebench.config.secrets.by_name`) are not among them: the payload command sets
    them on the node (:func:`bridgebench.launch.executor.payload_command`) and their value is never read here."""
    names = by_name_all(cfg)
    return {
        **{str(k): cfg.env_vars[k] for k in cfg.env_vars if str(k) not in names},
        "BRIDGEBENCH_CONFIG_HASH": config_hash,
        "BRIDGEBENCH_RUN_ID": run_id,
        "BRIDGEBENCH_ATTEMPT": str(attempt),
    }


@dataclass(kw_only=True)
class Job:
    """Everything one submission needs: the nemo-run executor, the payload command, paths, the spec, what the
    rendered script must do (:class:`bridgebench.launch.shellsafe.Intent`, checked by :mod:`.nemorun`) and the
    config the job reads."""

    executor: Any
    command: str
    paths: JobPaths
    spec: JobSpec
    intent: shellsafe.Intent
    config_text: str = ""  # the job's configs/config.yaml (launch/nodepaths.py node_config)


def build_job(
    cfg: DictConfig,
    run_dir: Path,
    name: str,
    config_hash: str,
    run_id: str,
    attempt: int,
    *,
    exclude: list[str] | None = None,
) -> Job:
    """The executor and payload command of one submission of the run planned in ``run_dir`` -- the same call for
    ``plan`` (its ``submit.sh``: repeat 0, attempt 0) and ``submit``.

    Raises:
        bridgebench.launch.shellsafe.ShellValueError: a value that cannot reach the script safely (rule
            ``shell_safe_value``: names, mounts, image, time, memory, environment, wrapper, node names).
    """
    shellsafe.check_config(cfg)  # every config value that reaches the script, named (before anything is built)
    spec = job_spec(cfg)
    paths = job_paths(cfg, name, run_id, attempt)
    env = job_env(cfg, config_hash, run_id, attempt) | {"BRIDGEBENCH_OUT_DIR": paths.out_dir}
    executor = ex.make_executor(
        cfg.cluster,
        nodes=spec.nodes,
        tasks_per_node=spec.tasks_per_node,
        gpus_per_node=spec.gpus_per_node,
        container_image=spec.container_image,
        # BRIDGEBENCH_OUT_DIR (node side: launch/nodepaths.py): mbridge/build.py puts logger.tensorboard_dir =
        # <it>/<job.tensorboard_subdir> (collect reads the events back from the job folder: launch/run_metrics.py)
        env=env,
        job_dir_path=Path(paths.tunnel_dir),
        segment=spec.segment,
        exclusive=spec.exclusive,
    )
    sbatch: dict[str, str | None] = {
        "account": str(cfg.cluster.account),
        "partition": str(cfg.cluster.partition),
        "time": str(executor.time),
        "nodes": str(spec.nodes),
        "ntasks-per-node": str(spec.tasks_per_node),
        # nemo-run names the SLURM job "<account>-<account's last _ word>.<job name>" (SlurmBatchRequest.materialize)
        "job-name": f"{cfg.cluster.account}-{str(cfg.cluster.account).split('_')[-1]}.{paths.job_name}",
    }
    if cfg.cluster.mem is not None:
        sbatch["mem"] = str(cfg.cluster.mem)
    if executor.gpus_per_node:
        sbatch["gpus-per-node"] = str(executor.gpus_per_node)
    if spec.segment:
        sbatch["segment"] = str(spec.segment)
    if executor.exclusive:
        sbatch["exclusive"] = None
    if exclude:
        executor.additional_parameters = {"exclude": ",".join(ex.check_name("node", n) for n in exclude)}
        sbatch["exclude"] = executor.additional_parameters["exclude"]
    container = spec.container_image is not None
    command = ex.payload_command(
        spec.job_type, paths.config, paths.out_dir, paths.repo, paths.python, spec.wrapper, by_name_all(cfg)
    )
    intent = shellsafe.Intent(
        sbatch=sbatch,
        env=shellsafe.env_intent(env, host_mode=not container),
        image=spec.container_image,
        mounts=list(cfg.cluster.container_mounts) if container else [],
        command=command,
    )
    return Job(
        executor=executor,
        command=command,
        paths=paths,
        spec=spec,
        intent=intent,
        config_text=nodepaths.node_config(cfg),
    )
