"""Can this cluster run this run at all? Checked by ``submit`` before anything reaches SLURM.

SLURM accepts a job it can never start and leaves it PENDING forever (two nodes asked of a one-node partition:
reason ``PartitionNodeLimit``/``PartitionConfig``; a GPU job on a node without that GPU; a ``--container-image`` on a
cluster without pyxis fails at ``srun``). The cluster config (``configs/cluster/<name>.yaml``) declares what the
cluster has -- ``nodes`` (of its partition), ``gpu`` (the ``configs/gpu`` name of its nodes' GPUs, null for none),
``gpus_per_node``, ``pyxis`` (containers) -- and :func:`cluster_violations` names each rule a run breaks
(``cluster_nodes``, ``cluster_gpus``, ``cluster_container`` in :data:`bridgebench.config.rules.RULES`). ``submit``
also passes the node count SLURM itself reports (``sinfo``), so a config that promises more nodes than the partition
has is caught too. Pure Python.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bridgebench.config.rules import Violation


@dataclass(frozen=True, kw_only=True)
class JobNeeds:
    """What one submission needs: ``nodes``, ``tasks_per_node``, the GPU type and count per node (None and 0 for a
    CPU payload such as the optimizer-step benchmark) and whether it runs in a container."""

    nodes: int
    tasks_per_node: int
    gpu: str | None
    gpus_per_node: int
    container_image: str | None
    job_type: str


def cluster_violations(cluster: Any, needs: JobNeeds, *, live_nodes: int | None = None) -> list[Violation]:
    """Rules ``needs`` breaks on ``cluster`` (the composed ``cfg.cluster`` node, or a mapping with the same keys).

    Args:
        live_nodes: nodes SLURM reports for the partition (``sinfo``), when it could be asked.
    """
    get = cluster.get
    name = get("name")
    out = []
    declared = get("nodes")
    for source, have in ((f"configs/cluster/{name}.yaml nodes", declared), ("sinfo", live_nodes)):
        if have is not None and needs.nodes > int(have):
            out.append(
                Violation(
                    "cluster_nodes",
                    f"the run needs {needs.nodes} node(s), cluster {name} partition {get('partition')} has "
                    f"{have} ({source}); SLURM would keep it PENDING forever (PartitionNodeLimit)",
                )
            )
            break
    if needs.gpu:
        have_gpu, per_node = get("gpu"), int(get("gpus_per_node") or 0)
        if not have_gpu or per_node == 0:
            out.append(
                Violation(
                    "cluster_gpus",
                    f"the run needs {needs.gpus_per_node} {needs.gpu} GPU(s) per node; cluster {name} declares no "
                    "GPUs (gpu: null); run the CPU optimizer-step benchmark there (experiment=optstep_local) or "
                    "choose a GPU cluster (cluster=<name>)",
                )
            )
        elif str(have_gpu) != needs.gpu:
            out.append(
                Violation(
                    "cluster_gpus",
                    f"the run is planned for {needs.gpu} GPUs, cluster {name} has {have_gpu}: plan it with "
                    f"gpu={have_gpu} (or a {have_gpu} recipe)",
                )
            )
        elif needs.gpus_per_node > per_node:
            out.append(
                Violation(
                    "cluster_gpus",
                    f"the run needs {needs.gpus_per_node} GPUs per node, cluster {name} nodes have {per_node}",
                )
            )
    if needs.container_image and not get("pyxis"):
        out.append(
            Violation(
                "cluster_container",
                f"a {needs.job_type} run needs the container {needs.container_image}; cluster {name} cannot start "
                "containers (pyxis: false)",
            )
        )
    return out
