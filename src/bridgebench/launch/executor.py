"""nemo-run ``SlurmExecutor`` for a planned run: nodes, tasks, container, mounts, env vars, NVL72 segment.

Every value handed to nemo-run is checked or quoted by :mod:`bridgebench.launch.shellsafe` (the one place: strict
grammars for names, mounts, partitions, accounts, time limit, memory, image, environment names; ``shlex.quote`` for
environment values, since nemo-run 0.11.1 writes ``export KEY=value`` as given). Secrets (``HF_TOKEN``,
``WANDB_API_KEY``, any credential-like name or value: :mod:`bridgebench.config.secrets`) are never put into an
executor: they must come from the submitting environment. nemo-run itself is driven only through
:mod:`bridgebench.launch.nemorun`, which also guards the paths nemo-run formats into shell commands and checks the
rendered script (:func:`bridgebench.launch.shellsafe.verify_sbatch`).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Mapping, Sequence

from bridgebench.launch import shellsafe
from bridgebench.launch.shellsafe import LaunchConfigError, ShellValueError  # noqa: F401  (re-exported)
from bridgebench.model import placement
from bridgebench.paths import REPO_ROOT

#: the grammars of :mod:`bridgebench.launch.shellsafe` (kept here for callers of the old names)
SAFE_NAME = shellsafe.GRAMMARS["name"].pattern
SAFE_PATH = shellsafe.GRAMMARS["path"].pattern
#: Where the repository is mounted inside the container (the compute-node entrypoint runs from there).
CONTAINER_REPO = "/opt/bridgebench"


def check_name(kind: str, value: Any) -> str:
    """Validate a run/job/account/partition/node name (:data:`bridgebench.launch.shellsafe.GRAMMARS` ``name``)."""
    return shellsafe.check("name", value, kind)


def check_mount(mount: str) -> str:
    """Validate ``src:dst[:flags]`` for ``srun --container-mounts`` (comma-separated list: no commas/spaces)."""
    return shellsafe.check("mount", mount, "container mount", "srun --container-mounts (unquoted, comma-joined)")


def quoted_env(env: Mapping[str, Any], container: bool = False) -> dict[str, str]:
    """Environment for the sbatch script, each value quoted for nemo-run
    (:func:`bridgebench.launch.shellsafe.env_value`; ``container``: the job runs in one, where ``/nemo_run`` is the
    job folder's mount, not rewritten); secrets are refused.

    Raises:
        ShellValueError: a name that is not an upper-case shell identifier, or a value no script can hold.
        bridgebench.config.rules.RuleError: a credential-like name or value (rule ``secret_in_config``).
    """
    from bridgebench.config.secrets import check_secrets

    check_secrets({"env_vars": {str(k): v for k, v in env.items()}})
    intent = shellsafe.env_intent(env, host_mode=not container)
    return {key: shellsafe.env_value(value) for key, value in intent.items()}


def payload_command(
    job_type: str,
    config_path: str,
    out_dir: str,
    repo: str,
    python: str,
    wrapper: Sequence[str] = (),
    by_name: Mapping[str, str] | None = None,
) -> str:
    """The shell command each task runs: the compute-node entrypoint (``pretrain``) or the optimizer-step payload
    (``optstep``), run with ``python`` from the repository at ``repo`` -- both as the node sees them
    (:mod:`bridgebench.launch.nodepaths`: the container's mount and ``python``, or this checkout and interpreter on
    the host). The checkout is not installed in a container: its ``src/`` goes on ``PYTHONPATH`` (src layout). Paths
    and ``wrapper`` words are shell-quoted; ``by_name`` (``NAME -> VARIABLE``,
    :func:`bridgebench.config.secrets.by_name`) become ``NAME="${VARIABLE?...}"`` assignments, so the value is read
    from the job's environment on the node and never written anywhere (not in the sbatch script either, whose
    ``set -x`` would print it into the job's log).

    Raises:
        ShellValueError: a wrapper word that is not a string or cannot be quoted, or a bad variable name.
    """
    path = f"PYTHONPATH={shlex.quote(repo + '/src')} " if repo == CONTAINER_REPO else ""
    words = [shellsafe.check_word(w, f"job.wrapper[{i}]", "the payload command") for i, w in enumerate(wrapper)]
    prefix = shlex.join(words) + " " if words else ""  # job.wrapper: numactl, nsys ...
    env = ""
    for name, var in (by_name or {}).items():
        shellsafe.check("env_name", name, f"env_vars.{name} (name)", "the payload command")
        shellsafe.check("env_name", var, f"env_vars.{name} (variable)", "the payload command")
        env += f'{name}="${{{var}?is not set in the job environment: export it where bridgebench submit runs}}" '
    head = f"cd {shlex.quote(repo)} && {env}{path}{prefix}{shlex.quote(python)} -m"
    for what, value in (("config path", config_path), ("job out folder", out_dir)):
        shellsafe.check_word(value, what, "the payload command", host_mode=repo != CONTAINER_REPO)
    if job_type == "optstep":
        return f"{head} bridgebench.payloads.optstep --config {shlex.quote(config_path)} --out {shlex.quote(out_dir)}"
    if job_type == "replay":
        return f"{head} bridgebench.payloads.replay --config {shlex.quote(config_path)} --out {shlex.quote(out_dir)}"
    return f"{head} bridgebench.payloads.pretrain --config {shlex.quote(config_path)}"


def segment_for(nodes: int, gpus_per_node: int, policy: str = "nvidia_launcher") -> int | None:
    """``sbatch --segment`` as Megatron-Bridge's perf launcher sets it (4-GPU NVL72 nodes: all nodes when <= 18, else
    the largest divisor of the node count <= 18; None otherwise) -- the same segment the time model prices
    (:func:`bridgebench.model.placement.segment_nodes`, declared once there; ``policy`` = the GPU's
    ``segment_policy``).

    Source: Megatron-Bridge v0.3.1 ``scripts/performance/utils/executors.py::slurm_executor``.
    """
    return placement.segment_nodes(nodes, gpus_per_node, policy)


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

    check_name("cluster.account", cluster.account)
    check_name("cluster.partition", cluster.partition)
    mounts = [check_mount(m) for m in cluster.container_mounts]
    time = shellsafe.check("time", time_limit or cluster.time_limit, "cluster.time_limit", "#SBATCH --time")
    if cluster.mem is not None:
        shellsafe.check("mem", str(cluster.mem), "cluster.mem", "#SBATCH --mem")
    if container_image is not None:
        shellsafe.check("image", container_image, "release.container_image", "srun --container-image")
    if cluster.tunnel.type == "local":
        tunnel = run.LocalTunnel(job_dir=str(job_dir_path))
    elif cluster.tunnel.type == "ssh":
        from bridgebench.launch.tunnel import ssh_tunnel  # checks every tunnel field (rule shell_safe_value)

        tunnel = ssh_tunnel(cluster, str(job_dir_path))
    else:
        raise LaunchConfigError(f"cluster.tunnel.type must be 'local' or 'ssh', got {cluster.tunnel.type!r}")
    kwargs: dict[str, Any] = dict(
        account=cluster.account,
        partition=cluster.partition,
        nodes=nodes,
        ntasks_per_node=tasks_per_node,
        time=time,
        tunnel=tunnel,
        env_vars=quoted_env(env, container=container_image is not None),
        exclusive=(bool(cluster.exclusive) if exclusive is None else exclusive) or None,
        segment=segment,
        # nemo-run 0.11.1's default starts a thread per job that runs `squeue --start` through the tunnel as a shell
        # string and prints "[SLURM] Job ... State: ..." on stdout (breaking --json); bridgebench polls SLURM itself
        poll_estimated_start_time=False,
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
