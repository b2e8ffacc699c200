"""Where one submission's files are, on the submit side and on the compute node: the one place that maps every path a
job reads or writes to the node side.

A job on a real cluster sees the cluster's filesystem, and inside the NeMo container (pyxis) only the declared
``container_mounts`` plus nemo-run's job-folder mount (``<job folder>:/nemo_run``). So nothing the job reads may
name a path of the submitting machine -- not the checkout, not the plan folder (``--out``), not the local job folder.
By construction here:

* **job folder** -- nemo-run's folder for the job on the cluster: ``<cluster.tunnel.job_dir>/<run id>/a<attempt>/
  <title>/<experiment id>/<job name>`` over SSH, ``<paths.job_dir>/<run id>/a<attempt>/experiments/...`` with a
  local tunnel (the submit host is then a cluster host sharing the filesystem). It holds the sbatch script, the
  payload script, the logs, and what bridgebench puts there: ``configs/config.yaml`` (:func:`node_config`, written
  on the submit side and copied with the job by nemo-run) and ``out/`` (the payload's output). In a container the job
  addresses it as ``/nemo_run``; on the host by its path on the cluster.
* **out dir** (``BRIDGEBENCH_OUT_DIR``, the optimizer-step ``--out``, Megatron-Bridge's ``logger.tensorboard_dir =
  <out>/<job.tensorboard_subdir>``): ``<job folder>/out``.
* **config**: ``<job folder>/configs/config.yaml`` -- the run's resolved config without the submit side's sections
  (``paths``, ``cluster.client_env``, ``cluster.identity_file``, ``cluster.tunnel.identity``,
  ``cluster.tunnel.known_hosts``).
* **code**: in a container, the repository mounted at :data:`bridgebench.launch.executor.CONTAINER_REPO` (one of the
  cluster's ``container_mounts`` must put the cluster's checkout there) and the image's ``python``; on the host with a
  local tunnel, this checkout and this Python (the same machine). A cluster reached over SSH that runs jobs on the
  host is refused: bridgebench does not know where a checkout and a Python are there.
* **the submit side's mirror** of the job folder: ``<paths.job_dir>/<run id>/a<attempt>/experiments/<title>/
  <experiment id>/<job name>`` -- where nemo-run writes the job before copying it (SSH) or where it runs (local), and
  where ``collect`` reads its logs and ``out/`` (fetched back through the tunnel over SSH: ``launch/tunnel.py``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from bridgebench.launch import executor as ex
from bridgebench.paths import REPO_ROOT, load_paths

#: nemo-run's mount point of the job folder inside a container (``nemo_run.config.RUNDIR_NAME``).
RUNDIR = "/nemo_run"
#: The payload's output folder and its config, relative to the job folder.
OUT = "out"
CONFIG = "configs/config.yaml"
#: Sections of the resolved config that only the submit side uses (and that hold its paths): dropped from, or emptied
#: in, the job's copy.
SUBMIT_SIDE_ONLY = ("paths",)
SUBMIT_SIDE_EMPTY = {
    ("cluster", "client_env"): {},
    ("cluster", "identity_file"): None,
    ("cluster", "tunnel", "identity"): None,
    ("cluster", "tunnel", "known_hosts"): None,
}


def experiment_id(title: str) -> str:
    """nemo-run's experiment id of a job: a fixed id (nemo-run's default is ``<title>_<time_ns>``) makes every path
    a function of the job alone; nemo-run derives the title back from the id's last ``_``."""
    return f"{title}_job"


@dataclass(frozen=True, kw_only=True)
class JobPaths:
    """Every path of one submission (run id + attempt); see the module docstring.

    ``base`` (submit side): ``<paths.job_dir>/<run id>/a<attempt>``, nemo-run's experiment base folder.
    ``tunnel_dir`` (node side): the folder nemo-run's tunnel puts the experiment under.
    ``node_job_folder`` (node side) / ``local_job_folder`` (its mirror on the submit side).
    ``root``: the job folder as the job addresses it (``/nemo_run`` in a container, else ``node_job_folder``).
    ``out_dir`` / ``config``: node side, under ``root``. ``repo`` / ``python``: the code the job runs.
    """

    base: Path
    tunnel_dir: str
    job_name: str
    container: bool
    repo: str
    python: str

    @property
    def experiment_id(self) -> str:
        return experiment_id(self.job_name)

    @property
    def node_job_folder(self) -> str:
        return f"{self.tunnel_dir.rstrip('/')}/{self.job_name}/{self.experiment_id}/{self.job_name}"

    @property
    def local_job_folder(self) -> Path:
        return self.base / "experiments" / self.job_name / self.experiment_id / self.job_name

    @property
    def root(self) -> str:
        return RUNDIR if self.container else self.node_job_folder

    @property
    def out_dir(self) -> str:
        return f"{self.root}/{OUT}"

    @property
    def config(self) -> str:
        return f"{self.root}/{CONFIG}"

    @property
    def local_out(self) -> Path:
        return self.local_job_folder / OUT

    @property
    def local_config(self) -> Path:
        return self.local_job_folder / CONFIG

    @property
    def local_tunnel(self) -> bool:
        return self.tunnel_dir == str(self.base / "experiments")

    def tensorboard_dir(self, subdir: str) -> str:
        """Megatron-Bridge's ``logger.tensorboard_dir`` as the job sees it."""
        return f"{self.out_dir}/{subdir}"


def has_repo_mount(cluster) -> bool:
    """True when one of ``cluster.container_mounts`` puts something at the container's repository path."""
    return any(str(m).split(":")[1].rstrip("/") == ex.CONTAINER_REPO for m in cluster.container_mounts if ":" in str(m))


def job_paths(cfg: DictConfig, run_id: str, attempt: int, job_name: str, *, container: bool) -> JobPaths:
    """The paths of one submission of the run ``cfg`` on ``cfg.cluster`` (``container``: the job starts in the
    release's container).

    Raises:
        bridgebench.launch.executor.LaunchConfigError: a container cluster that does not mount the repository at
            :data:`bridgebench.launch.executor.CONTAINER_REPO`, or an SSH cluster that runs jobs on the host.
    """
    base = load_paths().job_dir / run_id / f"a{attempt}"
    cluster = cfg.cluster
    if cluster.tunnel.type == "local":
        tunnel_dir = str(base / "experiments")
    else:
        tunnel_dir = f"{str(cluster.tunnel.job_dir).rstrip('/')}/{run_id}/a{attempt}"
    if container:
        if not has_repo_mount(cluster):
            raise ex.LaunchConfigError(
                f"cluster {cluster.name}: the job runs in a container and runs bridgebench from "
                f"{ex.CONTAINER_REPO}, but no entry of cluster.container_mounts mounts the cluster's checkout there "
                f"(add '<checkout on the cluster>:{ex.CONTAINER_REPO}')"
            )
        repo, python = ex.CONTAINER_REPO, "python"
    elif cluster.tunnel.type == "local":
        repo, python = str(REPO_ROOT), sys.executable
    else:
        raise ex.LaunchConfigError(
            f"cluster {cluster.name} is reached over SSH and runs jobs on the host (no container): bridgebench does "
            "not know where a checkout and a Python are on that cluster; run jobs in the release's container "
            f"(pyxis: true, container: true, the checkout mounted at {ex.CONTAINER_REPO})"
        )
    return JobPaths(base=base, tunnel_dir=tunnel_dir, job_name=job_name, container=container, repo=repo, python=python)


def node_config(cfg: DictConfig) -> str:
    """The job's ``configs/config.yaml``: the resolved config without the submit side's sections (module docstring),
    as YAML. The payloads read model, optimizer, job, precision, training and recipe sections only. Written as
    :func:`bridgebench.config.secrets.disk_container` writes every config: variables passed by name stay
    ``${oc.env:VAR}``, so no value read from the submitting environment reaches the job folder; a ``${`` a value holds
    as text is escaped (:func:`bridgebench.config.secrets.omegaconf_container`), so the job reads it back as written."""
    from bridgebench.config.secrets import omegaconf_container

    plain: dict[str, Any] = omegaconf_container(cfg)
    for key in SUBMIT_SIDE_ONLY:
        plain.pop(key, None)
    for path, value in SUBMIT_SIDE_EMPTY.items():
        node = plain
        for k in path[:-1]:
            node = node.get(k) if isinstance(node, dict) else None
        if isinstance(node, dict) and path[-1] in node:
            node[path[-1]] = value
    return OmegaConf.to_yaml(OmegaConf.create(plain))


def attempt_folder(job_dir: str | None, job_name: str | None) -> Path | None:
    """The submit side's mirror of an attempt's job folder (logs, ``out/``, ``configs/``) from the ledger's
    ``job_dir`` (the base folder) and ``job_name``; the base folder itself for attempts submitted before the job
    folder held ``out/``; None without a ``job_dir``."""
    if not job_dir:
        return None
    base = Path(job_dir)
    if job_name:
        folder = base / "experiments" / job_name / experiment_id(job_name) / job_name
        if folder.is_dir():
            return folder
    return base
