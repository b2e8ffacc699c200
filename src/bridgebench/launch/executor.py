"""nemo-run ``SlurmExecutor`` for a planned run: nodes, tasks, container, mounts, env vars, NVL72 segment.

Every config value that reaches the shell goes through here and is either validated against a strict pattern (names,
mounts, partitions, accounts: SLURM itself forbids spaces and commas there) or quoted with ``shlex.quote``
(environment values: nemo-run 0.11.1 writes ``export KEY=value`` unquoted into the sbatch script). Secrets
(``HF_TOKEN``, ``WANDB_API_KEY``, any credential-like name or value: :mod:`bridgebench.config.secrets`) are never put
into an executor: they must come from the submitting environment. nemo-run itself is driven only through
:mod:`bridgebench.launch.nemorun`, which also guards the paths nemo-run formats into shell commands.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any, Mapping, Sequence

from bridgebench.errors import BridgebenchError
from bridgebench.paths import REPO_ROOT

SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
SAFE_PATH = re.compile(r"^[A-Za-z0-9_./@+-]+$")
SAFE_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: Where the repository is mounted inside the container (the compute-node entrypoint runs from there).
CONTAINER_REPO = "/opt/bridgebench"


class LaunchConfigError(BridgebenchError):
    """A cluster or run value would be unsafe or invalid in a SLURM script; the message names the value and rule."""


def check_name(kind: str, value: Any) -> str:
    """Validate a run/job/account/partition name: letters, digits, ``.``, ``_``, ``-`` (max 128)."""
    if not isinstance(value, str) or not SAFE_NAME.match(value):
        raise LaunchConfigError(
            f"{kind} {value!r} must match {SAFE_NAME.pattern} (no spaces, quotes or shell characters)"
        )
    return value


def check_mount(mount: str) -> str:
    """Validate ``src:dst[:flags]`` for ``srun --container-mounts`` (comma-separated list: no commas/spaces)."""
    parts = str(mount).split(":")
    if not 2 <= len(parts) <= 3 or not all(p and SAFE_PATH.match(p) for p in parts):
        raise LaunchConfigError(
            f"container mount {mount!r} must be src:dst[:flags] of plain path characters "
            f"({SAFE_PATH.pattern}); spaces, commas and shell characters are not allowed"
        )
    return str(mount)


def quoted_env(env: Mapping[str, Any]) -> dict[str, str]:
    """Environment for the sbatch script with every value shell-quoted; secrets are refused.

    Raises:
        LaunchConfigError: a key that is not a shell identifier.
        bridgebench.config.rules.RuleError: a credential-like name or value (rule ``secret_in_config``).
    """
    from bridgebench.config.secrets import check_secrets

    check_secrets({"env_vars": {str(k): v for k, v in env.items()}})
    out = {}
    for key, value in env.items():
        if not SAFE_ENV_KEY.match(str(key)):
            raise LaunchConfigError(f"environment variable name {key!r} is not a valid shell identifier")
        out[str(key)] = shlex.quote(str(value))
    return out


def payload_command(
    job_type: str, config_path: str, out_dir: str, repo: str, python: str, wrapper: Sequence[str] = ()
) -> str:
    """The shell command each task runs: the compute-node entrypoint (``pretrain``) or the optimizer-step payload
    (``optstep``), run with ``python`` from the repository at ``repo`` -- both as the node sees them
    (:mod:`bridgebench.launch.nodepaths`: the container's mount and ``python``, or this checkout and interpreter on
    the host). The checkout is not installed in a container: its ``src/`` goes on ``PYTHONPATH`` (src layout). Every
    path is shell-quoted."""
    path = f"PYTHONPATH={shlex.quote(repo + '/src')} " if repo == CONTAINER_REPO else ""
    prefix = shlex.join([str(w) for w in wrapper]) + " " if wrapper else ""  # job.wrapper: numactl, nsys ...
    head = f"cd {shlex.quote(repo)} && {path}{prefix}{shlex.quote(python)} -m"
    if job_type == "optstep":
        return f"{head} bridgebench.payloads.optstep --config {shlex.quote(config_path)} --out {shlex.quote(out_dir)}"
    return f"{head} bridgebench.payloads.pretrain --config {shlex.quote(config_path)}"


def segment_for(nodes: int, gpus_per_node: int) -> int | None:
    """``sbatch --segment`` as Megatron-Bridge's perf launcher sets it: for 4-GPU (NVL72) nodes, all nodes when
    <= 18, else the largest divisor of the node count <= 18; None otherwise.

    Source: Megatron-Bridge v0.3.1 ``scripts/performance/utils/executors.py::slurm_executor``.
    """
    if gpus_per_node != 4:
        return None
    if nodes <= 18:
        return nodes
    return next(s for s in range(18, 0, -1) if nodes % s == 0)


def job_dir(cluster: Mapping[str, Any]) -> Path:
    """The cluster's job directory (relative paths are under the repository)."""
    path = Path(str(cluster["tunnel"]["job_dir"]))
    return path if path.is_absolute() else REPO_ROOT / path


def make_executor(
    cluster,
    *,
    nodes: int,
    tasks_per_node: int,
    gpus_per_node: int | None,
    container_image: str | None,
    env: Mapping[str, Any],
    job_dir_path: Path,
    segment: int | None = None,
    time_limit: str | None = None,
    exclusive: bool | None = None,
):
    """A nemo-run ``SlurmExecutor`` for one run on ``cluster`` (the composed ``cfg.cluster`` node).

    Raises:
        LaunchConfigError: unsafe names, mounts or environment, or an unknown tunnel type.
    """
    import nemo_run as run

    check_name("account", cluster.account)
    check_name("partition", cluster.partition)
    mounts = [check_mount(m) for m in cluster.container_mounts]
    if cluster.tunnel.type == "local":
        tunnel = run.LocalTunnel(job_dir=str(job_dir_path))
    elif cluster.tunnel.type == "ssh":
        from bridgebench.launch.tunnel import ssh_tunnel

        tunnel = ssh_tunnel(cluster, str(job_dir_path))
    else:
        raise LaunchConfigError(f"cluster.tunnel.type must be 'local' or 'ssh', got {cluster.tunnel.type!r}")
    kwargs: dict[str, Any] = dict(
        account=cluster.account,
        partition=cluster.partition,
        nodes=nodes,
        ntasks_per_node=tasks_per_node,
        time=time_limit or cluster.time_limit,
        tunnel=tunnel,
        env_vars=quoted_env(env),
        exclusive=(bool(cluster.exclusive) if exclusive is None else exclusive) or None,
        segment=segment,
    )
    if cluster.mem is not None:
        kwargs["mem"] = str(cluster.mem)
    if gpus_per_node and cluster.gpus_per_node_request:
        kwargs["gpus_per_node"] = gpus_per_node
    if cluster.container and container_image:
        kwargs["container_image"] = container_image
        kwargs["container_mounts"] = mounts
        kwargs["srun_args"] = ["--mpi=pmix", "--no-container-mount-home"]
    return run.SlurmExecutor(**kwargs)
