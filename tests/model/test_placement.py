"""Placement of a job's ranks on NVLink domains (``bridgebench.model.placement``): the segment Megatron-Bridge's
launcher asks SLURM for, the domains each parallel group crosses in Megatron-Core's own rank order (checked against
``megatron.core.parallel_state.RankGenerator`` itself), and what crossing costs in the time model."""

from __future__ import annotations

import pytest

from bridgebench.model import placement as pl


@pytest.mark.parametrize(
    "nodes, gpn, policy, expected",
    [
        (64, 4, "nvidia_launcher", 16),  # 256 GB300: four racks of 16 trays (64 GPUs)
        (18, 4, "nvidia_launcher", 18),
        (2, 4, "nvidia_launcher", 2),
        (72, 4, "nvidia_launcher", 18),
        (19, 4, "nvidia_launcher", 1),  # prime: largest divisor <= 18 is 1
        (40, 4, "nvidia_launcher", 10),
        (64, 8, "nvidia_launcher", None),  # only 4-GPU nodes get a segment (executors.py)
        (64, 4, "packed", None),
        (64, 4, "node", None),
    ],
)
def test_segment_is_the_launcher_s(nodes, gpn, policy, expected):
    """Megatron-Bridge scripts/performance/utils/executors.py (v0.3.1 and HEAD): all nodes when <= 18, else the
    largest divisor of the node count <= 18, on 4-GPU nodes only."""
    assert pl.segment_nodes(nodes, gpn, policy) == expected


def test_domains_as_the_scheduler_fills_them():
    assert pl.domain_gpus(256, 4, 72, "nvidia_launcher") == 64
    assert pl.domain_gpus(288, 4, 72, "nvidia_launcher") == 72
    assert pl.domain_gpus(256, 4, 72, "packed") == 72
    assert pl.domain_gpus(8, 4, 72, "nvidia_launcher") == 8
    assert pl.domain_gpus(256, 8, 8, "node") == 8
    with pytest.raises(pl.PlacementError, match="segment_policy"):
        pl.segment_nodes(4, 4, "racks")


def _megatron_groups(world, tp, cp, pp, ep, etp):
    """Every group of every kind as Megatron-Core 0.19.2's RankGenerator builds them (initialize_model_parallel's
    decoder and expert generators, order tp-cp-ep-dp-pp)."""
    from megatron.core.parallel_state import RankGenerator

    dp, edp = world // (tp * cp * pp), world // (etp * ep * pp)
    dense = RankGenerator(tp=tp, ep=1, dp=dp, pp=pp, cp=cp, order="tp-cp-ep-dp-pp")
    expert = RankGenerator(tp=etp, ep=ep, dp=edp, pp=pp, cp=1, order="tp-cp-ep-dp-pp")
    return {
        "tp": dense.get_ranks("tp"),
        "cp": dense.get_ranks("cp"),
        "dp": dense.get_ranks("dp"),
        "dp_cp": dense.get_ranks("dp-cp"),
        "pp": dense.get_ranks("pp"),
        "etp": expert.get_ranks("tp"),
        "ep": expert.get_ranks("ep"),
        "tp_ep": expert.get_ranks("tp-ep"),
        "edp": expert.get_ranks("dp"),
    }


def _splits_of(groups, domain):
    out = set()
    for g in groups:
        counts = {}
        for r in g:
            counts[r // domain] = counts.get(r // domain, 0) + 1
        out.add(tuple(sorted(counts.values(), reverse=True)))
    return out


@pytest.mark.parametrize(
    "world, tp, cp, pp, ep, etp, domain",
    [
        (256, 1, 1, 4, 64, 1, 64),
        (256, 1, 1, 4, 64, 1, 72),
        (256, 2, 2, 2, 32, 2, 72),
        (256, 1, 1, 1, 128, 1, 64),
        (64, 2, 1, 4, 8, 1, 8),
        (96, 2, 2, 2, 4, 3, 8),
    ],
)
def test_groups_match_megatron_core_rank_generator(world, tp, cp, pp, ep, etp, domain):
    placed = pl.place(world, tp=tp, cp=cp, pp=pp, ep=ep, etp=etp, domain=domain)
    for kind, groups in _megatron_groups(world, tp, cp, pp, ep, etp).items():
        g = placed.group(kind)
        assert g.groups == len(groups) and g.size == len(groups[0]), kind
        assert set(g.splits) == _splits_of(groups, domain), kind


def test_kimi_k2_on_256_gb300_groups():
    """NVIDIA's Kimi K2 run (TP1 PP4 EP64, 256 GB300): under the launcher's segments every EP group is one 64-GPU
    rack; on 72-GPU blocks (no segment) three of the four straddle two racks (56/8, 48/16, 40/24); EP 128 spans two
    64-GPU racks, one token reaching the other rack ~1 time with HybridEP and 4 times with alltoall (topk 8)."""
    seg = pl.place(256, pp=4, ep=64, domain=pl.domain_gpus(256, 4, 72, "nvidia_launcher"))
    assert seg.group("ep").splits == ((64,),) and not seg.group("ep").crosses
    assert seg.group("pp").domains == 4  # stages in different racks: PP sends over the network
    packed = pl.place(256, pp=4, ep=64, domain=72)
    assert set(packed.group("ep").splits) == {(64,), (56, 8), (48, 16), (40, 24)}
    wide = pl.place(256, ep=128, domain=64).group("ep")
    assert wide.splits == ((64, 64),)
    assert pl.cross_domain_copies(wide, 8, "hybridep") == pytest.approx(1 - 0.5**8)
    assert pl.cross_domain_copies(wide, 8, "alltoall") == pytest.approx(4.0)
    assert pl.cross_domain_copies(seg.group("ep"), 8, "hybridep") == 0.0


def test_split_group_is_priced_across_domains():
    """An EP 64 group split 48/16 over two domains is not NVLink-only: the rank with 16 local peers sends 3/4 of
    its copies over the network, and the exchange takes longer than the same group inside one domain."""
    from bridgebench.config.catalog import load_gpu
    from bridgebench.config.compose import compose, model_spec
    from bridgebench.model.steptime import ep_comm, registry
    from bridgebench.model.steptime.config import GpuFacts
    from bridgebench.model.steptime.gemm import LayerShape

    spec = model_spec(compose(["model=kimi_k2"]))
    gb300 = GpuFacts.from_mapping(load_gpu("gb300"))
    sh = LayerShape(tp=1, cp=1, ep=64, etp=1, mbs=1, sp=False, peak_key="mxfp8")
    inside = pl.place(256, pp=4, ep=64, domain=64).group("ep")
    split = pl.place(256, pp=4, ep=64, domain=72).group("ep")
    sid, gid = registry.handle(spec), registry.handle(gb300)
    a, b = (
        ep_comm.layer_exchange(sid, gid, sh, "alltoall", inside),
        ep_comm.layer_exchange(sid, gid, sh, "alltoall", split),
    )
    assert a.network_bytes == 0 and not a.scale_out
    assert b.scale_out and b.network_bytes > 0 and b.seconds > a.seconds
    assert b.network_bytes / b.nvlink_bytes == pytest.approx(56 / 7)  # worst rank: 8 of 64 in its domain


def test_placed_ring_equals_group_ring_when_aligned():
    """On evenly split, aligned groups the placed ring is the hierarchical ring it replaces."""
    from bridgebench.model.steptime import collectives

    for tp in (1, 2, 4, 8, 16):
        g = pl.place(64, tp=tp, domain=8).group("dp_cp")
        a = collectives.placed_ring(1e9, g, 450e9, 50e9, 2)
        assert a == pytest.approx(collectives.group_ring(1e9, 64 // tp, tp, 8, 450e9, 50e9, 2))


def test_node_limited_routing_cuts_the_copies_that_leave_a_domain(models):
    """DeepSeek V3 (8 expert groups, 4 picked per token: HF n_group / topk_group) on 1,024 H100 at EP 64: a remote
    8-GPU node holds one group and is reached with probability 1 - [C(7,4) + C(7,3) (3/4)^8] / C(8,4), not
    1 - (7/8)^8: ~3.1 remote copies per token with DeepEP instead of ~4.6; alltoall sends one per expert either way."""
    spec = models["deepseek_v3"]
    assert (spec.moe_router_num_groups, spec.moe_router_group_topk) == (8, 4)
    miss = (35 + 35 * 0.75**8) / 70
    assert pl.domain_hit(8, 64, 8, 8, 4) == pytest.approx(1 - miss)
    assert pl.domain_hit(8, 64, 8) == pytest.approx(1 - (7 / 8) ** 8)
    assert pl.domain_hit(12, 64, 8, 8, 4) == pl.domain_hit(12, 64, 8)  # a domain that splits a group: uniform
    ep = pl.place(1024, tp=2, pp=8, ep=64, etp=1, domain=8).group("ep")
    limited = pl.cross_domain_copies(ep, 8, "deepep", 8, 4)
    assert limited == pytest.approx(7 * (1 - miss)) and pl.cross_domain_copies(ep, 8, "deepep") == pytest.approx(
        7 * (1 - (7 / 8) ** 8)
    )
    assert pl.cross_domain_copies(ep, 8, "alltoall", 8, 4) == pl.cross_domain_copies(ep, 8, "alltoall") == 7


def test_node_limited_routing_is_checked_in_the_spec(models):
    from bridgebench.model.spec import ModelSpecError

    spec = models["deepseek_v3"]
    with pytest.raises(ModelSpecError, match="set together"):
        spec.replace(moe_router_group_topk=None)
    with pytest.raises(ModelSpecError, match="must divide num_moe_experts"):
        spec.replace(moe_router_num_groups=7, moe_router_group_topk=4)
