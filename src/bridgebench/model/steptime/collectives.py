"""Time of one collective (seconds) from its size, its group and the link it crosses: the alpha-beta model.

``t = steps x alpha + bytes_on_the_wire / (bandwidth x BUS_EFFICIENCY)`` with the ring algorithm's wire volume per
rank (Thakur, Rabenseifner and Gropp 2005, "Optimization of Collective Communication Operations in MPICH", IJHPCA
19(1); NCCL's "bus bandwidth" convention, nccl-tests ``doc/PERFORMANCE.md``):

- all-gather / reduce-scatter of a tensor of ``V`` bytes (the gathered size) over ``G`` ranks: ``(G - 1)/G x V``
  per rank, ``G - 1`` steps;
- all-reduce: twice that (reduce-scatter + all-gather), ``2 (G - 1)`` steps;
- all-to-all / point-to-point: the bytes that leave the GPU, one step (NCCL posts every peer's send at once).

Bandwidths are per GPU per direction from ``configs/gpu`` (datasheets). A ring collective whose group spans several
NVLink domains is hierarchical (NCCL's NVLS / tree / multi-ring algorithms on NVL72 and DGX nodes: every GPU of a
domain drives its own NIC, so the data a domain imports is spread over its ``g`` group members' NICs):
:func:`group_ring` prices the inside-domain part at NVLink bandwidth and the ``(d - 1)/d x V`` a domain imports over
``g`` NICs (``d`` domains). An all-to-all or a point-to-point send sends each GPU's own bytes through its own NIC.
The constants below are first-principles
values, not measured here (no GPU was lent to this work) and not fitted: the published tables hold no isolated
collective to fit them on.
"""

from __future__ import annotations

from bridgebench.model.placement import GroupPlacement

#: Fraction of the datasheet link bandwidth a large NCCL collective reaches (bus bandwidth / link bandwidth):
#: nccl-tests all-reduce on DGX H100 reports ~360-370 GB/s bus bandwidth on 450 GB/s NVLink 4 per direction and
#: ~42-45 GB/s on a 400 Gb/s NDR NIC (NVIDIA DGX H100 / nccl-tests published results): ~0.8.
BUS_EFFICIENCY = 0.8
#: Per-step latency (s) of a ring step or a point-to-point message inside an NVLink domain: NCCL Simple-protocol
#: hop latency of a few microseconds (NCCL 2.x tuning tables, ``src/graph/tuning.cc`` base latencies).
NVLINK_ALPHA = 2e-6
#: Per-step latency (s) across the scale-out network (InfiniBand / RoCE hop plus NIC): NCCL's network base latency.
NETWORK_ALPHA = 6e-6


def alpha(bandwidth: float, nvlink_bandwidth: float) -> float:
    """Per-step latency of a link given its bandwidth: NVLink's when the link is the NVLink one."""
    return NVLINK_ALPHA if bandwidth >= nvlink_bandwidth else NETWORK_ALPHA


def ring(bytes_: float, group: int, bandwidth: float, step_alpha: float, passes: int = 1) -> float:
    """Ring all-gather or reduce-scatter (``passes=1``) or all-reduce (``passes=2``) of ``bytes_`` (the full,
    gathered tensor) over ``group`` ranks; 0 for a group of one."""
    if group <= 1 or bytes_ <= 0:
        return 0.0
    return passes * ((group - 1) * step_alpha + (group - 1) / group * bytes_ / (bandwidth * BUS_EFFICIENCY))


def members_per_domain(group: int, stride: int, domain: int) -> int:
    """Members of a group of ``group`` ranks spaced ``stride`` apart that share one NVLink domain of ``domain``
    consecutive ranks (at least 1)."""
    if stride >= domain:
        return 1
    return max(1, min(group, domain // stride))


def group_ring(
    bytes_: float,
    group: int,
    stride: int,
    domain: int,
    nvlink_bw: float,
    network_bw: float,
    passes: int = 1,
) -> float:
    """Ring all-gather / reduce-scatter (``passes=1``) or all-reduce (``passes=2``) of ``bytes_`` over ``group``
    ranks spaced ``stride`` apart, hierarchical when the group leaves the NVLink domain (module docstring)."""
    if group <= 1 or bytes_ <= 0:
        return 0.0
    g = members_per_domain(group, stride, domain)
    if g >= group:
        return ring(bytes_, group, nvlink_bw, NVLINK_ALPHA, passes)
    d = group / g
    inside = ring(bytes_, g, nvlink_bw, NVLINK_ALPHA, passes) if g > 1 else 0.0
    across = passes * ((d - 1) * NETWORK_ALPHA + (d - 1) / d * bytes_ / (g * network_bw * BUS_EFFICIENCY))
    return inside + across


def send(bytes_: float, bandwidth: float, step_alpha: float) -> float:
    """One point-to-point transfer (or the outgoing half of an all-to-all) of ``bytes_`` leaving the GPU."""
    if bytes_ <= 0:
        return 0.0
    return step_alpha + bytes_ / (bandwidth * BUS_EFFICIENCY)


def placed_ring(bytes_: float, group: GroupPlacement, nvlink_bw: float, network_bw: float, passes: int = 1) -> float:
    """:func:`group_ring` over a group as the scheduler placed it (:class:`bridgebench.model.placement.
    GroupPlacement`): for each way a group splits over domains, ``m_j`` members in domain ``j``, the inside-domain
    ring of the largest piece at NVLink bandwidth plus, per pass, ``d - 1`` network steps and the ``(n - m_j) / n x
    V`` domain ``j`` imports through its ``m_j`` NICs (the slowest domain sets the pace); the worst split counts.
    Equals :func:`group_ring` when the groups split evenly and aligned."""
    n = group.size
    if n <= 1 or bytes_ <= 0:
        return 0.0
    worst = 0.0
    for split in group.splits:
        if len(split) == 1:
            t = ring(bytes_, n, nvlink_bw, NVLINK_ALPHA, passes)
        else:
            big = max(split)
            inside = ring(bytes_, big, nvlink_bw, NVLINK_ALPHA, passes) if big > 1 else 0.0
            share = max((n - m) / n / m for m in split)
            d = len(split)
            t = inside + passes * ((d - 1) * NETWORK_ALPHA + share * bytes_ / (network_bw * BUS_EFFICIENCY))
        worst = max(worst, t)
    return worst
