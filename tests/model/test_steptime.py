"""bridgebench.model.steptime (the step-time model): every parallelism has a price, the
structural facts that follow exactly from the formulas (Kimi K2 on 256 GB300: CP, EP all-to-all, scale-out), the
Muon per-GPU loads against the Newton-Schulz counter, the Muon what-ifs, the release level, and the calibration
(synthetic recovery; the shipped file reproduced from the shipped published table)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from bridgebench.config import calibration
from bridgebench.config.catalog import load_gpu
from bridgebench.model.flops import model_flops
from bridgebench.model.newton_schulz import NSPolicy, Parallelism, ns_load
from bridgebench.model.steptime import collectives, ep_comm, registry
from bridgebench.model.steptime.calibration import Calibration
from bridgebench.model.steptime.config import GpuFacts, TimeConfig, TimeModelError
from bridgebench.model.steptime.fit import Row, calibrate
from bridgebench.model.steptime.gemm import shape_factor
from bridgebench.model.steptime.muon import muon_cost
from bridgebench.model.steptime.optimizer import muon_rank_loads
from bridgebench.model.steptime.predict import TERMS, layer_shape, predict_time
from bridgebench.model.steptime.recompute import recompute_flops
from bridgebench.model.steptime.release import release_index

GB300 = GpuFacts.from_mapping(load_gpu("gb300"))
H100 = GpuFacts.from_mapping(load_gpu("h100"))
#: NVIDIA's Kimi K2 run (blog, 26.02.01 recipe): TP1 PP4 VP4 EP64 MBS2 GBS4096 on 256 GB300, HybridEP, Muon.
KIMI = dict(gpu=GB300, peak_key="mxfp8", num_gpus=256, mbs=2, gbs=4096, pp=4, vp=4, ep=64, etp=1,
            pipeline_model_parallel_layout="Et*4|(t*4|)*14tL", flops_formula="v1", optimizer="dist_muon",
            moe_token_dispatcher_type="flex", moe_flex_dispatcher_backend="hybridep", use_distributed_optimizer=False,
            overlap_param_gather=False, overlap_grad_reduce=True, release="26.02.01")  # fmt: skip
FLAT = Calibration(efficiency={("gb300", "fp8"): 0.5, ("h100", "fp8"): 0.4}, c_layer=0.0)


def test_gpu_facts_come_from_configs_gpu():
    assert GB300.hbm_bytes == 288e9 and GB300.hbm_bandwidth == 8e12 and GB300.nvlink_domain == 72
    assert GB300.compute_capability == pytest.approx(10.3) and GB300.gpus_per_node == 4
    assert H100.peak("bf16") == pytest.approx(989.4e12)
    with pytest.raises(TimeModelError, match="no mxfp8"):
        H100.peak("mxfp8")


def test_every_term_is_reported_and_they_sum_to_the_step(models):
    b = predict_time(models["kimi_k2"], TimeConfig.from_flat(**KIMI), FLAT)
    assert tuple(b.terms) == TERMS
    required = {"compute", "tp_comm", "cp_comm", "ep_a2a", "pp_p2p", "bubble", "dp_comm", "recompute", "optimizer"}
    assert required <= set(b.terms) and all(v >= 0 for v in b.terms.values())
    assert b.total == pytest.approx(sum(b.terms.values()))
    assert b.tflops_per_gpu == pytest.approx(b.flops / b.total / 256 / 1e12)
    assert b.release == "26.02.01" and b.efficiency_source == "fitted"


def test_the_bubble_is_pp_minus_one_over_vp_microbatch_times(models):
    spec = models["llama3_70b"]
    inter = predict_time(
        spec,
        TimeConfig.from_flat(
            gpu=H100, peak_key="fp8", num_gpus=64, mbs=1, gbs=256, tp=4, pp=8, vp=5, sequence_parallel=True
        ),
        FLAT,
    )
    plain = predict_time(
        spec,
        TimeConfig.from_flat(gpu=H100, peak_key="fp8", num_gpus=64, mbs=1, gbs=256, tp=4, pp=8, sequence_parallel=True),
        FLAT,
    )
    m = 256 // 2  # GBS / (MBS x DP), DP = 64 / 32
    per_mb = lambda b: sum(b.terms[k] for k in TERMS[:7]) / m  # noqa: E731  (the per-microbatch terms)
    assert inter.terms["bubble"] == pytest.approx(per_mb(inter) * 7 / 5)
    assert plain.terms["bubble"] == pytest.approx(per_mb(plain) * 7)
    # interleaving overlaps the stage sends (Megatron-Bridge: overlap_p2p_comm with VP > 1): fill and drain only
    assert inter.terms["pp_p2p"] < plain.terms["pp_p2p"]


def test_gemm_efficiency_falls_for_small_gemms_so_tp_shrinks_them():
    assert (
        shape_factor(8192, 8192, 8192, 256) > shape_factor(8192, 1024, 8192, 256) > shape_factor(256, 1024, 8192, 256)
    )
    assert 0 < shape_factor(128, 128, 128, 128) == pytest.approx(1 / 8)


def test_tensor_parallel_collectives_are_priced_and_overlap_hides_part(models):
    spec = models["llama3_70b"]
    base = dict(gpu=H100, peak_key="fp8", num_gpus=64, mbs=1, gbs=256, pp=8, vp=5)
    tp1 = predict_time(spec, TimeConfig.from_flat(**base, tp=1), FLAT)
    sp = predict_time(spec, TimeConfig.from_flat(**base, tp=8, sequence_parallel=True), FLAT)
    hidden = predict_time(spec, TimeConfig.from_flat(**base, tp=8, sequence_parallel=True, tp_comm_overlap=True), FLAT)
    assert tp1.terms["tp_comm"] == 0 and sp.terms["tp_comm"] > hidden.terms["tp_comm"] > 0
    # the same FLOPs per GPU per step, in smaller GEMMs: TP 8 computes more slowly than TP 1
    assert sp.terms["compute"] > tp1.terms["compute"]


def test_kimi_k2_cp2_and_cp1_differ_and_the_cp_term_is_why(models):
    """CP = 2 of NVIDIA's Kimi K2 point: the KV exchange is priced (never 0), CP2 is slower than CP1, and the step
    difference is exactly the sum of the term differences with the CP term among them (no hidden constant)."""
    spec = models["kimi_k2"]
    cal = calibration.load().time
    cp1 = predict_time(spec, TimeConfig.from_flat(**KIMI), cal)
    cp2 = predict_time(spec, TimeConfig.from_flat(**{**KIMI, "cp": 2}), cal)
    assert cp1.terms["cp_comm"] == 0.0 and cp2.terms["cp_comm"] > 0.0
    diff = {k: cp2.terms[k] - cp1.terms[k] for k in TERMS}
    assert cp2.total - cp1.total == pytest.approx(sum(diff.values()), rel=1e-12)
    assert cp2.total > cp1.total and diff["cp_comm"] > 0
    assert diff["compute"] >= 0  # half the tokens per GEMM: never faster
    # what CP cannot change: the same tokens per GPU per step move through the experts (twice the microbatches:
    # 4 exchange latencies more per MoE layer per extra microbatch, 16 MoE layers on the busiest rank) and the optimizer
    m1, m2 = 4096 // (2 * 64), 4096 // (2 * 32)
    assert diff["ep_a2a"] == pytest.approx(4 * collectives.NVLINK_ALPHA * 16 * (m2 - m1), rel=1e-6)
    assert cp2.terms["optimizer"] == pytest.approx(cp1.terms["optimizer"], rel=1e-9)


def test_kimi_k2_ep64_pays_an_nvlink_all_to_all(models):
    spec = models["kimi_k2"]
    b = predict_time(spec, TimeConfig.from_flat(**KIMI), calibration.load().time)
    assert b.terms["ep_a2a"] > 0 and not b.ep_scale_out
    ex = ep_comm.layer_exchange(
        registry.handle(spec), registry.handle(GB300), layer_shape(TimeConfig.from_flat(**KIMI)), "hybridep"
    )
    assert ex.network_bytes == 0 and ex.nvlink_bytes > 0
    # HybridEP sends a token once per distinct GPU: 64 (1 - (63/64)^8) GPUs hit, the own one excluded
    tokens = 2 * 4096
    gpus = 64 * (1 - (63 / 64) ** 8) * 63 / 64
    assert ex.nvlink_bytes == pytest.approx(tokens * gpus * spec.hidden_size * 2)
    assert ex.seconds == pytest.approx(4 * (ex.nvlink_bytes / (GB300.nvlink_bandwidth * 0.8) + 2e-6))


def test_kimi_k2_ep128_across_two_nvl72_racks_pays_the_scale_out_price(models):
    spec = models["kimi_k2"]
    cal = calibration.load().time
    cfg = TimeConfig.from_flat(**{**KIMI, "pp": 2, "vp": None, "ep": 128, "pipeline_model_parallel_layout": None})
    inside = TimeConfig.from_flat(**{**KIMI, "pp": 2, "vp": None, "ep": 64, "pipeline_model_parallel_layout": None})
    out, ins = predict_time(spec, cfg, cal), predict_time(spec, inside, cal)
    assert out.ep_scale_out and not ins.ep_scale_out
    ex = ep_comm.layer_exchange(registry.handle(spec), registry.handle(GB300), layer_shape(cfg), "hybridep")
    assert ex.network_bytes > 0
    # the scale-out share runs at the NIC's 100 GB/s, not NVLink's 900: it sets the exchange time
    assert ex.seconds >= 4 * ex.network_bytes / (GB300.network_bandwidth * collectives.BUS_EFFICIENCY)
    assert out.terms["ep_a2a"] > ins.terms["ep_a2a"] > 0
    alltoall = ep_comm.layer_exchange(registry.handle(spec), registry.handle(GB300), layer_shape(cfg), "alltoall")
    assert alltoall.network_bytes > ex.network_bytes  # no per-domain dedup: every copy crosses


def test_dispatcher_and_ep_overlap_change_the_exchange(models):
    spec = models["qwen3_30b_a3b"]
    base = dict(gpu=GB300, peak_key="mxfp8", num_gpus=8, mbs=4, gbs=512, ep=8, release="26.02")
    a2a = predict_time(spec, TimeConfig.from_flat(**base), FLAT)
    hybrid = predict_time(
        spec,
        TimeConfig.from_flat(**base, moe_token_dispatcher_type="flex", moe_flex_dispatcher_backend="hybridep"),
        FLAT,
    )
    hidden = predict_time(spec, TimeConfig.from_flat(**base, overlap_moe_expert_parallel_comm=True), FLAT)
    assert a2a.terms["ep_a2a"] > hybrid.terms["ep_a2a"] > 0
    assert 0 < hidden.terms["ep_a2a"] < a2a.terms["ep_a2a"]
    with pytest.raises(TimeModelError, match="dispatcher"):
        TimeConfig.from_flat(**base, moe_token_dispatcher_type="nvls")


def test_data_parallel_exposure_follows_the_overlap_flags(models):
    spec = models["llama3_70b"]
    base = dict(gpu=H100, peak_key="fp8", num_gpus=128, mbs=1, gbs=128, tp=4, pp=2, sequence_parallel=True)
    hidden = predict_time(spec, TimeConfig.from_flat(**base), FLAT)
    exposed = predict_time(
        spec, TimeConfig.from_flat(**base, overlap_grad_reduce=False, overlap_param_gather=False), FLAT
    )
    assert exposed.terms["dp_comm"] > hidden.terms["dp_comm"] >= 0
    # a group that leaves the NVLink domain is hierarchical: 8 members per node share the node's 8 NICs
    flat = collectives.ring(1e9, 16, H100.network_bandwidth, collectives.NETWORK_ALPHA)
    hier = collectives.group_ring(1e9, 16, 4, 8, H100.nvlink_bandwidth, H100.network_bandwidth)
    assert hier < flat


def test_recompute_repeats_the_forward_of_what_it_recomputes(models):
    spec = models["kimi_k2"]
    cfg = TimeConfig.from_flat(**KIMI)
    f = model_flops(spec, cfg.gbs, formula="v1")
    full = dataclasses.replace(cfg, recompute_granularity="full", recompute_method="uniform")
    layers = f.total - f.logits - f.mtp_projections
    assert recompute_flops(spec, full) == pytest.approx(float(layers) / 3)
    sel = lambda *m: dataclasses.replace(cfg, recompute_granularity="selective", recompute_modules=m)  # noqa: E731
    assert recompute_flops(spec, sel("moe_act", "layernorm")) == 0.0
    assert 0 < recompute_flops(spec, sel("mla_up_proj")) < recompute_flops(spec, sel("mla_up_proj", "moe"))
    base, up, act = (predict_time(spec, c, FLAT) for c in (cfg, sel("mla_up_proj"), sel("moe_act")))
    everything = predict_time(spec, full, FLAT)
    assert base.terms["recompute"] == 0 < act.terms["recompute"] < up.terms["recompute"] < everything.terms["recompute"]
    assert everything.terms["recompute"] < everything.terms["compute"] + everything.terms["ep_a2a"]


@pytest.mark.parametrize(
    "model, par",
    [
        (
            "kimi_k2",
            Parallelism.from_flat(
                num_gpus=256, tp=1, pp=4, vp=4, cp=1, ep=64, etp=1, pipeline_model_parallel_layout="Et*4|(t*4|)*14tL"
            ),
        ),
        (
            "kimi_k2",
            Parallelism.from_flat(
                num_gpus=256,
                tp=2,
                pp=4,
                vp=None,
                cp=1,
                ep=8,
                etp=1,
                pipeline_model_parallel_layout="Et*16|t*16|t*16|t*13L",
            ),
        ),
        ("qwen3_30b_a3b", Parallelism.from_flat(num_gpus=8, tp=1, pp=1, vp=None, cp=1, ep=8, etp=1)),
        ("qwen3_30b_a3b", Parallelism.from_flat(num_gpus=32, tp=1, pp=2, vp=2, cp=1, ep=4, etp=2)),
        ("deepseek_v3", Parallelism.from_flat(num_gpus=256, tp=1, pp=8, vp=None, cp=1, ep=32, etp=1)),
        ("llama3_70b", Parallelism.from_flat(num_gpus=64, tp=4, pp=4, vp=5, cp=1, ep=1, etp=None)),
    ],
)
@pytest.mark.parametrize(
    "policy", [NSPolicy(), NSPolicy(layer_wise=False), NSPolicy(tp_mode="distributed"), NSPolicy(kernel="syrk")]
)
def test_muon_rank_loads_equal_the_newton_schulz_counter(models, model, par, policy):
    """The per-layer, run-length deal gives exactly ns_load's busiest GPU and total (Megatron-Core's ping-pong)."""
    ref = ns_load(models[model], par, policy)
    loads = muon_rank_loads(models[model], par, policy)
    assert max(loads.ns_flops) == ref.per_gpu_max
    assert sum(loads.ns_flops) == ref.total


def test_cost_balanced_assignment_is_never_worse(models):
    for model, par in (
        ("qwen3_30b_a3b", Parallelism.from_flat(num_gpus=16, tp=1, pp=2, vp=None, cp=1, ep=4, etp=1)),
        ("llama3_70b", Parallelism.from_flat(num_gpus=64, tp=8)),
    ):
        ping = muon_rank_loads(models[model], par)
        balanced = muon_rank_loads(models[model], par, assignment="cost_balanced")
        assert sum(balanced.ns_flops) == sum(ping.ns_flops)
        assert max(balanced.ns_flops) <= max(ping.ns_flops)


def test_muon_cost_adds_up_and_names_its_release(models):
    cal = calibration.load().time
    cost = muon_cost(models["kimi_k2"], TimeConfig.from_flat(**KIMI), cal)
    assert cost.release == "26.02.01" == cost.adam.release
    assert cost.muon.total > cost.adam.total
    assert cost.muon.opt.ns == pytest.approx(cost.muon.opt.busiest_ns_flops / cost.ns_rate)
    assert cost.muon.opt.ns + cost.muon.opt.per_matrix == pytest.approx(cost.busiest_s(cost.ping_pong))
    assert cost.balanced_step_s <= cost.muon.total + 1e-12
    assert cost.muon.terms["compute"] == cost.adam.terms["compute"]
    assert cost.allgather_bytes > 0 and cost.muon.opt.allgather > 0
    assert len(cost.variants) == 12  # 2 deals x 3 TP modes x 2 kernels


def test_muon_what_ifs_price_each_choice(models):
    """TP modes: blockwise moves nothing, duplicated gathers the shards (and runs NS on full matrices), distributed
    all-reduces the Gram matrix every NS step; SYRK (hypothetical) cuts the NS time; cost-balanced never loses."""
    spec = models["qwen3_30b_a3b"]
    cfg = TimeConfig.from_flat(gpu=GB300, peak_key="mxfp8", num_gpus=16, mbs=2, gbs=512, tp=2, pp=2, ep=4, etp=1,
                     sequence_parallel=True, optimizer="dist_muon", release="26.02")  # fmt: skip
    cost = muon_cost(spec, cfg, calibration.load().time)
    v = {(x.assignment, x.tp_mode, x.kernel): x for x in cost.variants}
    pp = "ping_pong"
    assert v[(pp, "blockwise", "gemm")].tp_mode_s == 0
    assert v[(pp, "duplicated", "gemm")].tp_mode_s > 0 and v[(pp, "distributed", "gemm")].tp_mode_s > 0
    assert v[(pp, "duplicated", "gemm")].ns_s > v[(pp, "blockwise", "gemm")].ns_s
    assert v[(pp, "blockwise", "syrk")].ns_s < v[(pp, "blockwise", "gemm")].ns_s
    assert v[(pp, "blockwise", "syrk")].status.startswith("hypothetical")
    for mode in ("blockwise", "duplicated", "distributed"):
        assert v[("cost_balanced", mode, "gemm")].ns_s <= v[(pp, mode, "gemm")].ns_s + 1e-12


def test_the_release_level_moves_a_prediction_and_is_named(models):
    """The same Qwen3 30B-A3B point at 26.02 and 26.08 (its group's published levels differ) gives two answers,
    each naming its release; a group without published rows takes its model's other groups, else its family's."""
    cal = calibration.load().time
    spec = models["qwen3_30b_a3b"]
    base = dict(gpu=GB300, peak_key="mxfp8", num_gpus=8, mbs=8, gbs=512, ep=8, etp=1,
                moe_token_dispatcher_type="flex", moe_flex_dispatcher_backend="hybridep")  # fmt: skip
    early, late = (predict_time(spec, TimeConfig.from_flat(**base, release=r), cal) for r in ("26.02", "26.08"))
    assert (early.release, late.release) == ("26.02", "26.08") and early.level_source == "group"
    assert late.level > early.level and late.total < early.total
    other = predict_time(
        models["llama3_70b"],
        TimeConfig.from_flat(gpu=GB300, peak_key="bf16", num_gpus=64, mbs=1, gbs=256, release="26.04"),
        cal,
    )
    assert other.level_source == "same model and GPU"
    unknown = dataclasses.replace(models["llama3_70b"], name="my_dense_model")
    assert (
        predict_time(
            unknown, TimeConfig.from_flat(gpu=GB300, peak_key="bf16", num_gpus=64, mbs=1, gbs=256), cal
        ).level_source
        == "non-GEMM share"  # no group of this model: the level of its non-GEMM share (test_share_level.py)
    )
    assert release_index("26.04.01") > release_index("26.04") > release_index("26.02.01")
    with pytest.raises(ValueError):
        release_index("latest")


def test_calibration_recovers_a_known_efficiency(models):
    """Rows predicted by a known calibration (level 1 at every release) give back its efficiency, and the c_layer
    whose configuration physics leaves the release levels flat (two releases, different configurations)."""
    spec = models["llama3_70b"]
    gb200 = GpuFacts.from_mapping(load_gpu("gb200"))
    truth = Calibration(efficiency={("gb200", "fp8"): 0.37}, c_layer=1e-4)
    rows = []
    for release, points in (("26.02", ((1, 1, None), (2, 4, 5))), ("26.04", ((4, 4, None), (1, 4, 5)))):
        for tp, pp, vp in points:
            cfg = TimeConfig.from_flat(
                gpu=gb200,
                peak_key="fp8",
                num_gpus=64,
                mbs=1,
                gbs=256,
                tp=tp,
                pp=pp,
                vp=vp,
                sequence_parallel=tp > 1,
                release=release,
            )
            rows.append(Row(spec=spec, cfg=cfg, tflops=predict_time(spec, cfg, truth).tflops_per_gpu, release=release))
    cal = calibrate(rows, c_grid=(0.0, 1e-4, 4e-4))
    assert cal.c_layer == pytest.approx(1e-4)
    assert cal.efficiency[("gb200", "fp8")] == pytest.approx(0.37, rel=1e-4)
    assert all(abs(y) < 1e-4 for g in cal.groups.values() for y in g.y)


def test_calibration_file_round_trip():
    cal = calibration.load().time
    again = Calibration.from_mapping(cal.to_mapping())
    assert again.efficiency == pytest.approx(cal.efficiency, rel=1e-5)
    assert (again.c_layer, again.host_moe, again.host_moe_expert, again.kappa, again.ns_efficiency) == (
        cal.c_layer,
        cal.host_moe,
        cal.host_moe_expert,
        cal.kappa,
        cal.ns_efficiency,
    )
    with pytest.raises(TimeModelError, match="host_moe_s"):
        Calibration.from_mapping({**cal.to_mapping(), "host_moe_s": -1e-3})
    with pytest.raises(TimeModelError, match="positive"):
        Calibration.from_mapping({**cal.to_mapping(), "host_moe_expert_s": -1e-4})
    assert again.groups == cal.groups and cal.groups and again.family_level == cal.family_level
    assert again.bands == cal.bands and cal.bands and 0 < cal.band_default < 1
    with pytest.raises(TimeModelError, match="positive"):
        Calibration.from_mapping({**cal.to_mapping(), "kappa_s": 0})


def _around(grid: tuple[float, ...], value: float) -> tuple[float, ...]:
    """``value`` and its neighbours on ``grid``, the grid's first value first (the coordinate search of
    :func:`bridgebench.model.steptime.fit.calibrate` picks the host pair at ``c_grid[0]``)."""
    i = grid.index(value)
    return tuple(dict.fromkeys((grid[0], *grid[max(0, i - 1) : i + 2])))


@pytest.mark.background  # a refit of the published table (about 40 s): make test runs it beside the SLURM tests
def test_shipped_calibration_is_the_fit_of_the_shipped_published_table():
    """configs/calibration/default.yaml's time node equals a refit on results/reference (no stale numbers): the fit
    at the shipped ``c_layer`` and host pair, searched over them and their neighbours on the grids (the shipped
    constants are the criterion's minimum there: a neighbour that scored better would be chosen and the comparison
    fail; ``bridgebench calibrate --write`` searches the whole grids), with Muon's constants fitted on the blog's
    pairs at the first-principles constants first (as :func:`bridgebench.validation.time_calibration.fit` does:
    Kimi K2's published Muon rows make the fit depend on them)."""
    from bridgebench.model.steptime.fit import C_LAYER_GRID, HOST_EXPERT_GRID, HOST_MOE_GRID
    from bridgebench.validation.gemm_fit import measured_gemm_rates
    from bridgebench.validation.muon_fit import fit_muon
    from bridgebench.validation.time_calibration import published_rows

    shipped = calibration.load().time
    rows = published_rows()
    kw = dict(
        c_grid=_around(C_LAYER_GRID, shipped.c_layer),
        host_grid=_around(HOST_MOE_GRID, shipped.host_moe),
        expert_grid=_around(HOST_EXPERT_GRID, shipped.host_moe_expert),
        measured_rates=measured_gemm_rates(),
    )
    muon = fit_muon(calibrate(rows, **kw))
    refit = calibrate(rows, kappa=muon.kappa, ns_efficiency=muon.ns_efficiency, **kw)
    assert (refit.c_layer, refit.host_moe, refit.host_moe_expert) == (
        shipped.c_layer,
        shipped.host_moe,
        shipped.host_moe_expert,
    )
    assert refit.kappa == pytest.approx(shipped.kappa, rel=1e-3)
    assert refit.ns_efficiency == pytest.approx(shipped.ns_efficiency, rel=1e-3)
    assert refit.measured_rates == pytest.approx(shipped.measured_rates, rel=1e-3)
    assert set(refit.efficiency) == set(shipped.efficiency)
    for key, value in refit.efficiency.items():
        assert shipped.efficiency[key] == pytest.approx(value, rel=1e-4), key
        assert shipped.rows[key] == refit.rows[key]
    assert set(refit.groups) == set(shipped.groups)
    for key, g in refit.groups.items():
        assert shipped.groups[key].x == g.x, key
        assert shipped.groups[key].y == pytest.approx(g.y, abs=1e-4), key
    assert shipped.family_level == pytest.approx(refit.family_level, abs=1e-4)


def test_unknown_optimizer_is_refused(models):
    cfg = dataclasses.replace(TimeConfig.from_flat(**KIMI), optimizer="sgd")
    with pytest.raises(TimeModelError, match="unknown optimizer"):
        predict_time(models["kimi_k2"], cfg, calibration.load().time)


def test_an_unfitted_precision_borrows_the_same_gpu_at_its_peak_ratio(models):
    cal = Calibration(efficiency={("gb300", "fp8"): 0.4})
    b = predict_time(
        models["llama3_70b"], TimeConfig.from_flat(gpu=GB300, peak_key="bf16", num_gpus=64, mbs=1, gbs=256), cal
    )
    assert b.efficiency_source == "other precision"
    assert b.efficiency == pytest.approx(0.4 * math.sqrt(2))
