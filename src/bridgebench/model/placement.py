"""Where a job's ranks land: NVLink domains as the scheduler makes them, and the domains every parallel group crosses.

Pure Python (no torch, megatron, Hydra or YAML import); every function is exact integer arithmetic over the ranks.

**Domains as the scheduler makes them.** A GPU system declares its GPUs per node and its NVLink domain (``configs/gpu``:
8 GPUs = one HGX node; 72 GPUs = 18 four-GPU compute trays of an NVL72 rack). SLURM numbers a job's tasks node by
node, ``gpus_per_node`` consecutive ranks per node (``srun`` block distribution, ``--ntasks-per-node`` = GPUs per
node as Megatron-Bridge's launcher sets it), so an NVLink domain holds a block of consecutive ranks. How many nodes
share one domain is the scheduler's choice: Megatron-Bridge's performance launcher passes ``sbatch --segment`` on
4-GPU (NVL72) nodes -- all nodes when there are at most 18, else the largest divisor of the node count <= 18
(``scripts/performance/utils/executors.py::slurm_executor``, identical at v0.3.1 = the 26.02.01 release and at HEAD
067f987d, 2026-08-22) -- and SLURM's topology/block plugin keeps each segment inside one block (rack). 256 GB300 =
64 nodes -> segments of 16 nodes = 4 racks x 64 GPUs, not 72-GPU blocks (:func:`segment_nodes`,
:func:`domain_gpus`). Without a segment (policy ``packed``) the ranks fill whole domains in order.

**Groups in Megatron-Core's rank order.** Megatron-Core 0.19.2 builds the dense groups with ``RankGenerator(tp, ep=1,
dp, pp, cp, order='tp-cp-ep-dp-pp')`` and the expert groups with ``RankGenerator(tp=ETP, ep=EP, dp=EDP, pp, cp=1,
order='tp-cp-ep-dp-pp')`` (``megatron/core/parallel_state.py::initialize_model_parallel``, ``RankGenerator``,
``generate_masked_orthogonal_rank_groups``: the leftmost name varies fastest). So a rank is
``tp + TP (cp + CP (dp + DP pp))`` in the dense grid and ``etp + ETP (ep + EP (edp + EDP pp))`` in the expert grid,
and every group is an arithmetic progression: TP (stride 1), CP (stride TP), DP (stride TP x CP), the gradient
group DP x CP (stride TP), PP (stride TP x CP x DP), ETP (stride 1), EP (stride ETP), the flex dispatcher's ETP x EP
group (stride 1), expert DP (stride ETP x EP).
:func:`place` lists, for each kind, how its groups split over domains (e.g. an EP 64 group on 72-GPU blocks at
ranks 64..127 splits 8 / 56).

**What crossing costs.** A token routed to ``k`` experts of an EP group of ``n`` ranks, ``m_j`` of them in domain
``j`` (uniform routing over the group's ranks, as NVIDIA's perf recipes force balanced routing): an all-to-all
dispatcher sends one copy per routed expert, ``k (n - m_own) / n`` of them leave the sender's domain; a
deduplicating dispatcher (DeepEP, HybridEP, NCCL EP: one copy per distinct remote domain, forwarded over NVLink
inside it; Zhao et al. 2025, github.com/deepseek-ai/DeepEP; HybridEP in DeepEP's hybrid-ep branch) sends
``sum_j (1 - (1 - m_j / n)^k)`` over the remote domains ``j`` (:func:`cross_domain_copies`). A ring collective over
a group split ``m_j`` per domain imports ``(n - m_j) / n`` of the data into domain ``j`` through its ``m_j`` NICs
(:func:`bridgebench.model.steptime.collectives.placed_ring`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from bridgebench.errors import BridgebenchError
from bridgebench.model.parallel import ParallelDims

#: Largest segment (nodes) Megatron-Bridge's launcher asks SLURM for on 4-GPU nodes: one NVL72 rack holds 18
#: compute trays (``scripts/performance/utils/executors.py``: ``range(18, 0, -1)``).
NVIDIA_MAX_SEGMENT_NODES = 18
#: Segment policies: ``nvidia_launcher`` (Megatron-Bridge's ``--segment``, 4-GPU nodes only), ``packed`` (ranks fill
#: whole domains in order, no segment), ``node`` (the NVLink domain is one node: nothing to choose).
SEGMENT_POLICIES = ("nvidia_launcher", "packed", "node")
#: Group kinds :func:`place` reports, in report order.
KINDS = ("tp", "cp", "dp", "dp_cp", "pp", "etp", "ep", "tp_ep", "edp")


class PlacementError(BridgebenchError):
    """Sizes that do not tile the job (rule ``world_size`` / ``expert_grid``), or an unknown segment policy."""


def segment_nodes(nodes: int, gpus_per_node: int, policy: str = "nvidia_launcher") -> int | None:
    """``sbatch --segment`` (nodes) the launcher sets for a job of ``nodes`` nodes: under ``nvidia_launcher`` and 4
    GPUs per node, all nodes when ``nodes <= 18``, else the largest divisor of ``nodes`` that is <= 18; None
    otherwise (no segment).

    Source: Megatron-Bridge ``scripts/performance/utils/executors.py::slurm_executor`` (v0.3.1 and HEAD 067f987d).

    Raises:
        PlacementError: an unknown policy.
    """
    if policy not in SEGMENT_POLICIES:
        raise PlacementError(f"segment_policy must be one of {SEGMENT_POLICIES}, got {policy!r}")
    if policy != "nvidia_launcher" or gpus_per_node != 4 or nodes < 1:
        return None
    if nodes <= NVIDIA_MAX_SEGMENT_NODES:
        return nodes
    return next(s for s in range(NVIDIA_MAX_SEGMENT_NODES, 0, -1) if nodes % s == 0)


def domain_gpus(num_gpus: int, gpus_per_node: int, nvlink_domain: int, policy: str = "nvidia_launcher") -> int:
    """GPUs of one NVLink domain as the scheduler fills it for this job: a block of that many consecutive ranks.

    ``nvlink_domain`` <= ``gpus_per_node`` (HGX: the domain is a node): the domain. Otherwise (NVL72) the segment
    (:func:`segment_nodes`) x GPUs per node when a segment is set, capped by the domain; else the domain (``packed``).
    Jobs smaller than a domain hold it all.
    """
    if nvlink_domain <= gpus_per_node or gpus_per_node < 1:
        return max(1, min(nvlink_domain, num_gpus))
    nodes = max(1, num_gpus // gpus_per_node)
    seg = segment_nodes(nodes, gpus_per_node, policy)
    block = nvlink_domain if seg is None else min(nvlink_domain, seg * gpus_per_node)
    return max(1, min(block, num_gpus))


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupPlacement:
    """How the groups of one kind lie on the domains.

    ``kind`` (:data:`KINDS`), ``size`` (ranks per group), ``stride`` (rank distance between members), ``groups``
    (how many), ``splits``: the distinct ways a group divides over domains, each a tuple of members per domain,
    largest first (``((64,),)``: every group inside one domain; ``((56, 8), (64,))``: some split 56 / 8).
    Hashable (a cache key of the time model)."""

    kind: str
    size: int
    stride: int
    groups: int
    splits: tuple[tuple[int, ...], ...]

    @property
    def domains(self) -> int:
        """Most domains any group of this kind touches (1: all inside NVLink)."""
        return max(len(s) for s in self.splits)

    @property
    def min_members(self) -> int:
        """Fewest members a group has in one of its domains (the NICs a domain's share goes through)."""
        return min(min(s) for s in self.splits)

    @property
    def crosses(self) -> bool:
        """Some group of this kind spans more than one domain."""
        return self.domains > 1

    def as_dict(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "stride": self.stride,
            "groups": self.groups,
            "domains": self.domains,
            "splits": [list(s) for s in self.splits],
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    """A job's ranks on NVLink domains: ``num_gpus``, ``domain_gpus`` (consecutive ranks per domain), ``segment``
    (nodes per ``sbatch --segment``, None = none) and one :class:`GroupPlacement` per kind (:data:`KINDS`)."""

    num_gpus: int
    domain_gpus: int
    segment: int | None
    groups: tuple[GroupPlacement, ...]

    def group(self, kind: str) -> GroupPlacement:
        """The placement of one group kind. Raises KeyError for an unknown kind."""
        for g in self.groups:
            if g.kind == kind:
                return g
        raise KeyError(kind)

    @property
    def domains(self) -> int:
        """Domains the job spans."""
        return -(-self.num_gpus // self.domain_gpus)


def _splits(world: int, size: int, stride: int, domain: int) -> tuple[int, tuple[tuple[int, ...], ...]]:
    """(number of groups, distinct member-per-domain splits) of the groups ``{b + stride i, i < size}`` whose base
    ``b`` has coordinate 0 along this dimension, over domains of ``domain`` consecutive ranks. Exact: every group is
    listed (numpy over the ``world`` ranks), equal splits kept once."""
    ranks = np.arange(world, dtype=np.int64).reshape(world // (stride * size), size, stride)
    ids = (ranks.transpose(0, 2, 1).reshape(-1, size) // domain).astype(np.int64)
    rows = np.unique(ids - ids[:, :1], axis=0)  # members are increasing ranks: domain ids never decrease
    seen = set()
    for row in rows:
        _, counts = np.unique(row, return_counts=True)
        seen.add(tuple(sorted((int(c) for c in counts), reverse=True)))
    return ids.shape[0], tuple(sorted(seen, key=lambda s: (-len(s), s)))


@lru_cache(maxsize=4096)
def place(
    num_gpus: int,
    *,
    tp: int = 1,
    cp: int = 1,
    pp: int = 1,
    ep: int = 1,
    etp: int | None = None,
    domain: int,
    segment: int | None = None,
) -> Placement:
    """Every group kind of a job on domains of ``domain`` consecutive ranks (module docstring: Megatron-Core's
    ``tp-cp-ep-dp-pp`` order). ``etp`` None = TP (Megatron-Core ``ModelParallelConfig.__post_init__``).

    Raises:
        PlacementError: TP x CP x PP or ETP x EP x PP does not divide ``num_gpus``, or a size below 1.
    """
    etp = tp if etp is None else etp
    sizes = (num_gpus, tp, cp, pp, ep, etp, domain)
    if any(type(x) is not int or x < 1 for x in sizes):
        raise PlacementError(f"placement needs positive integer sizes, got {sizes}")
    dims = ParallelDims(num_gpus=num_gpus, tp=tp, cp=cp, pp=pp, ep=ep, etp=etp)  # the DP formula, once
    if dims.world_size_problem():
        raise PlacementError(f"world_size: {num_gpus} GPUs are not divisible by TP x CP x PP = {tp * cp * pp}")
    if dims.expert_grid_problem():
        raise PlacementError(f"expert_grid: {num_gpus} GPUs are not divisible by ETP x EP x PP = {etp * ep * pp}")
    dp, edp = dims.dp, dims.edp
    spec = (
        ("tp", tp, 1),
        ("cp", cp, tp),
        ("dp", dp, tp * cp),
        ("dp_cp", dp * cp, tp),  # gradient reduction group (dense DP x CP): cp and dp adjacent in the order
        ("pp", pp, tp * cp * dp),
        ("etp", etp, 1),
        ("ep", ep, etp),
        ("tp_ep", etp * ep, 1),  # the flex dispatcher's group (DeepEP / HybridEP): expert TP x EP ranks
        ("edp", edp, etp * ep),
    )
    groups = []
    for kind, size, stride in spec:
        n, splits = _splits(num_gpus, size, stride, domain)
        groups.append(GroupPlacement(kind=kind, size=size, stride=stride, groups=n, splits=splits))
    return Placement(num_gpus=num_gpus, domain_gpus=domain, segment=segment, groups=tuple(groups))


def domain_hit(m: int, n: int, topk: int, groups: int | None = None, group_topk: int | None = None) -> float:
    """Probability that a token's ``topk`` experts include one on the ``m`` of the ``n`` EP ranks in one domain
    (balanced routing: experts drawn uniformly): ``1 - (1 - m / n)^topk``. With node-limited routing (``groups``
    expert groups, ``group_topk`` of them picked per token, the experts then drawn among the picked groups'; Megatron-
    Core ``moe_router_num_groups`` / ``moe_router_group_topk``, DeepSeek-V3 report Sec. 2.1.2) and the domain holding
    ``g_j = m groups / n`` whole groups (experts lie on the EP ranks in order): ``1 - sum_c Hyp(c; groups, g_j,
    group_topk) (1 - c / group_topk)^topk``; a domain that splits a group is read as uniform routing."""
    if groups is None or group_topk is None or (m * groups) % n:
        return 1.0 - (1.0 - m / n) ** topk
    g_j = m * groups // n
    total = math.comb(groups, group_topk)
    miss = sum(
        math.comb(g_j, c) * math.comb(groups - g_j, group_topk - c) / total * (1.0 - c / group_topk) ** topk
        for c in range(0, min(g_j, group_topk) + 1)
    )
    return 1.0 - miss


def cross_domain_copies(
    group: GroupPlacement, topk: int, dispatcher: str, groups: int | None = None, group_topk: int | None = None
) -> float:
    """Copies of one token that leave the sender's NVLink domain, on the worst rank of the worst group split.

    ``alltoall`` / ``allgather``: one copy per routed expert, ``topk (n - m_own) / n``; ``deepep`` / ``hybridep`` /
    ``ncclep``: one copy per distinct remote domain, the sum over remote domains of :func:`domain_hit` (node-limited
    routing with ``groups`` / ``group_topk``). 0 when every group fits one domain.
    """
    worst = 0.0
    n = group.size
    for split in group.splits:
        if len(split) < 2:
            continue
        for own in range(len(split)):
            if dispatcher in ("alltoall", "allgather"):
                c = topk * (n - split[own]) / n
            else:
                c = sum(domain_hit(m, n, topk, groups, group_topk) for j, m in enumerate(split) if j != own)
            worst = max(worst, c)
    return worst


def local_members(group: GroupPlacement) -> int:
    """Members in the sender's own domain on the worst rank (the rank whose domain holds the fewest of its
    group): what stays on NVLink."""
    return group.min_members
