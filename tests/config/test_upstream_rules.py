"""Upstream's start-up assertions as rules (``bridgebench.config.rules.upstream``), one refused and one accepted point
each: HybridEP's EP limit and NVLink-domain arithmetic, MoE + TP needing sequence parallelism, the EP overlap
needing a virtual pipeline with PP > 1, DeepEP's fallback on
GB200/GB300, the layout a non-dividing split gets suggested, and enum values checked at once with a did-you-mean."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import typing

import pytest

from bridgebench.config import rules
from bridgebench.config.compose import ConfigError, compose
from bridgebench.config.rules import upstream as upstream_rules

KIMI = dict(
    num_gpus=256, num_layers=61, num_attention_heads=64, seq_length=4096, gbs=4096, mbs=2, gpus_per_node=4, pp=4,
    vp=4, ep=64, num_moe_experts=384, gpu="gb300", compute_capability=10.3, nvlink_domain=72,
    segment_policy="nvidia_launcher", moe_token_dispatcher_type="flex", moe_flex_dispatcher_backend="hybridep",
    pipeline_model_parallel_layout="Et*4|(t*4|)*14tL",
)  # fmt: skip


def ids(**changes) -> list[str]:
    return [v.rule for v in rules.check(rules.Point.from_flat(**{**KIMI, **changes}))]


def test_nvidia_kimi_k2_configuration_passes_every_rule():
    assert ids() == []


def test_every_upstream_rule_is_in_the_table_with_its_source():
    for rule in upstream_rules.RULE_IDS:
        assert ".py" in rules.RULES[rule].source and rules.RULES[rule].summary


def test_hybridep_ep_beyond_the_nvl72_domain_is_refused():
    """v0.3.1 perf_plugins.py _set_nvl_domain_size: assert ep_size <= 72 on GB200/GB300."""
    changes = {"pp": 2, "vp": None, "ep": 128, "pipeline_model_parallel_layout": None, "num_layers": 60}
    found = rules.check(rules.Point.from_flat(**{**KIMI, **changes}))
    by = {v.rule: v for v in found}
    assert "hybridep_ep_domain" in by and "EP = 128" in by["hybridep_ep_domain"].message
    assert by["hybridep_ep_domain"].fix.startswith("model.expert_model_parallel_size=64")
    assert "hybridep_ep_domain" not in ids(ep=64)
    # the limit is the launcher's NVL72 branch: on 8-GPU nodes HybridEP spans nodes at EP 16 (ranks per domain 8)
    h100 = {**KIMI, "gpu": "h100", "compute_capability": 9.0, "nvlink_domain": 8, "gpus_per_node": 8,
            "segment_policy": "node", "precision": "bf16"}  # fmt: skip
    assert not [
        v
        for v in rules.check(
            rules.Point.from_flat(
                **{**h100, "ep": 128, "pp": 2, "vp": None, "num_layers": 60, "pipeline_model_parallel_layout": None}
            )
        )
        if "hybridep" in v.rule
    ]


def test_hybridep_group_must_fit_the_domains_as_placed():
    """DeepEP HybridEPBuffer: the group is a multiple of NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN, and each of its
    domains holds whole multiples of them -- EP 64 on 72-GPU blocks (no segment) straddles racks 56/8."""
    assert "hybridep_ranks_per_domain" in ids(segment_policy="packed")
    (v,) = [v for v in rules.check(rules.Point.from_flat(**{**KIMI, "segment_policy": "packed"}))]
    assert "40/24" in v.message and v.fix.startswith("gpu.segment_policy=nvidia_launcher")
    assert ids(segment_policy="nvidia_launcher") == []
    assert "hybridep_ranks_per_domain" in ids(env_hybrid_ep_ranks_per_nvlink_domain=48)  # 64 % 48
    assert ids(env_hybrid_ep_ranks_per_nvlink_domain=64) == []
    # alltoall has no such rule: the same straddling groups run (and are priced across racks)
    assert ids(segment_policy="packed", moe_token_dispatcher_type="alltoall", moe_flex_dispatcher_backend=None) == []


def test_moe_with_tp_needs_sequence_parallelism():
    """megatron-core 0.19.2 MoELayer.forward raises in training with TP > 1 and no SP."""
    refused = [v for v in rules.check(rules.Point.from_flat(**{**KIMI, "tp": 2, "num_gpus": 512, "gbs": 4096}))
               if v.rule == "moe_tp_needs_sp"]  # fmt: skip
    assert refused and refused[0].fix == "model.sequence_parallel=true"
    assert "moe_tp_needs_sp" not in ids(tp=2, num_gpus=512, sequence_parallel=True)
    dense = {**KIMI, "num_moe_experts": None, "ep": 1, "tp": 2, "num_gpus": 512}
    assert not [v for v in rules.check(rules.Point.from_flat(**dense)) if v.rule == "moe_tp_needs_sp"]


def test_ep_overlap_with_pp_needs_a_virtual_pipeline():
    """megatron-core 0.19.2 TransformerConfig.__post_init__: the EP all-to-all overlap with PP > 1 asserts a virtual
    pipeline size; a layout's VP counts (it is set earlier in the same __post_init__)."""
    flat = {"overlap_moe_expert_parallel_comm": True, "pipeline_model_parallel_layout": None, "num_layers": 60}
    refused = [v for v in rules.check(rules.Point.from_flat(**{**KIMI, **flat, "vp": None}))
               if v.rule == "ep_overlap_needs_vp"]  # fmt: skip
    assert refused and "PP = 4" in refused[0].message
    assert refused[0].fix.startswith("comm_overlap.overlap_moe_expert_parallel_comm=false")
    assert "ep_overlap_needs_vp" not in ids(**flat, vp=3)  # 60 layers = 4 x 3 x 5
    assert "ep_overlap_needs_vp" not in ids(overlap_moe_expert_parallel_comm=True)  # the layout's VP 4
    assert "ep_overlap_needs_vp" not in ids(**flat, vp=None, pp=1, num_gpus=64, gbs=4096)
    assert "ep_overlap_needs_vp" not in ids(**{**flat, "overlap_moe_expert_parallel_comm": False}, vp=None)
    # a 4-stage layout at PP 4 is VP 1: refused as Megatron-Core refuses it
    assert "ep_overlap_needs_vp" in ids(overlap_moe_expert_parallel_comm=True,
                                        pipeline_model_parallel_layout="Et*16|t*15|t*15|t*15L", vp=None)  # fmt: skip


def test_deepep_on_gb300_runs_and_is_priced_as_alltoall():
    """Megatron-Bridge apply_flex_dispatcher_backend: DeepEP only on 8.x/9.x or B200/B300; GB200/GB300 fall back."""
    dtype, backend, note = upstream_rules.effective_dispatcher("flex", "deepep", "gb300", 10.3)
    assert (dtype, backend) == ("alltoall", None) and "deepep_falls_back" in note and "5992" in note
    assert upstream_rules.effective_dispatcher("flex", "deepep", "b200", 10.0)[:2] == ("flex", "deepep")
    assert upstream_rules.effective_dispatcher("flex", "deepep", "h100", 9.0)[2] == ""
    # the backend counts only under the flex type: Kimi K2's base recipe (alltoall, deepep) runs alltoall
    assert upstream_rules.requested_backend("alltoall", "deepep") == "alltoall"
    assert upstream_rules.effective_dispatcher("alltoall", "deepep", "gb300", 10.3) == ("alltoall", "deepep", "")
    assert upstream_rules.requested_backend(None, "hybridep") == "hybridep"  # a backend alone: the flex dispatcher
    assert upstream_rules.requested_backend("flex", None) == "deepep"  # megatron-core's default backend
    # never a prune: EP 64 DeepEP on GB300 passes the rules (the HybridEP ones do not apply to what runs)
    assert ids(moe_flex_dispatcher_backend="deepep", segment_policy="packed") == []


def test_non_dividing_split_gets_the_working_layout_suggested():
    found = rules.check(
        rules.Point.from_flat(**{**KIMI, "pipeline_model_parallel_layout": None, "pp": 8, "vp": None, "ep": 32})
    )
    (v,) = [v for v in found if v.rule == "layers_fit_pp_vp"]
    assert v.fix.startswith("model.pipeline_model_parallel_layout=auto") and "'E" in v.fix
    layout = v.fix.split("'")[1]
    assert ids(pipeline_model_parallel_layout=layout, pp=8, vp=None, ep=32) == []


@pytest.mark.parametrize(
    "key, bad, good, hint",
    [
        ("model.recompute_granularity", "selectiv", "selective", "selective"),
        ("model.moe_flex_dispatcher_backend", "hybrid_ep", "hybridep", "hybridep"),
        ("model.moe_token_dispatcher_type", "all2all", "alltoall", None),
        ("model.cp_comm_type", "allgather", "all_gather", "all_gather"),
        ("model.recompute_modules", ["mla_up_proj", "moe_actt"], ["mla_up_proj", "moe_act"], "moe_act"),
    ],
)
def test_enum_values_are_checked_at_compose_with_did_you_mean(key, bad, good, hint):
    base = ["recipe=kimi_k2_gb300_mxfp8", "release=26.02.01"]
    fmt = (lambda v: "[" + ",".join(v) + "]") if isinstance(bad, list) else str
    with pytest.raises(ConfigError, match="enum_value") as err:
        compose([*base, f"++{key}={fmt(bad)}"])
    if hint:
        assert f"did you mean {hint!r}" in str(err.value)
    assert compose([*base, f"++{key}={fmt(good)}"]) is not None


def test_enum_tables_match_megatron_core():
    """The values are megatron-core 0.19.2's own (TransformerConfig's Literal types)."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    hints = typing.get_type_hints(TransformerConfig)

    def literal(tp):
        for arg in typing.get_args(tp) or ():
            if typing.get_origin(arg) is typing.Literal:
                return set(typing.get_args(arg))
        return set(typing.get_args(tp)) if typing.get_origin(tp) is typing.Literal else set()

    for key in ("recompute_granularity", "recompute_method", "moe_token_dispatcher_type",
                "moe_flex_dispatcher_backend", "cuda_graph_impl"):  # fmt: skip
        assert literal(hints[key]) == set(upstream_rules.ENUMS[f"model.{key}"]), key


def _bb(*args):
    env = {**os.environ}
    return subprocess.run([sys.executable, "-m", "bridgebench.cli", *args], capture_output=True, text=True, env=env,
                          timeout=600)  # fmt: skip


def test_predict_refuses_moe_tp_without_sp_with_the_fix_and_shows_knobs_and_placement():
    bad = _bb("predict", "recipe=qwen3_30b_a3b_gb300_mxfp8", "release=26.08", "model.tensor_model_parallel_size=2",
              "model.sequence_parallel=false", "model.expert_model_parallel_size=4", "--json")  # fmt: skip
    assert bad.returncode == 2 and "moe_tp_needs_sp" in bad.stderr and "model.sequence_parallel=true" in bad.stderr
    assert "Traceback" not in bad.stderr
    ok = _bb("predict", "recipe=kimi_k2_gb300_mxfp8", "release=26.02.01", "optimizer=muon", "--json")
    assert ok.returncode == 0, ok.stderr[-2000:]
    out = json.loads(ok.stdout)
    assert out["knobs"]["dispatcher"] == "hybridep" and out["knobs"]["recompute"] == "selective (mla_up_proj)"
    assert out["knobs"]["expert_capacity"] == "dropless"
    assert out["knobs"]["knobs_source"].startswith("recipe kimi_k2_gb300_mxfp8 @ 26.02.01")
    place = out["placement"]
    assert place["domain_gpus"] == 64 and place["segment_nodes"] == 16 and place["domains"] == 4
    assert place["groups"]["ep"]["splits"] == [[64]] and place["ep_cross_domain_copies_per_token"] == 0.0
    assert out["ep_leaves_nvlink"] is False


def test_predict_refuses_the_ep_overlap_without_a_virtual_pipeline_with_the_fix():
    base = (
        "predict",
        "recipe=kimi_k2_gb300_mxfp8",
        "release=26.02.01",
        "+comm_overlap.overlap_moe_expert_parallel_comm=true",
    )
    bad = _bb(*base, "model.virtual_pipeline_model_parallel_size=null", "model.pipeline_model_parallel_layout=auto",
              "--json")  # fmt: skip
    assert bad.returncode == 2 and "ep_overlap_needs_vp" in bad.stderr and "Traceback" not in bad.stderr
    assert "comm_overlap.overlap_moe_expert_parallel_comm=false" in bad.stderr
    ok = _bb(*base, "--json")  # the recipe's layout gives VP 4: accepted, priced with the overlap
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert json.loads(ok.stdout)["knobs"]["ep_overlap"] is True


def test_deepep_on_gb300_is_priced_as_the_alltoall_it_runs():
    """NVIDIA's Kimi K2 point with DeepEP asked for: priced exactly as alltoall, and the knobs say why."""
    from bridgebench.config import calibration
    from bridgebench.sweep import predict

    calib = calibration.load()
    base = ["recipe=kimi_k2_gb300_mxfp8", "release=26.02.01", "optimizer=muon"]
    deepep = predict([*base, "model.moe_flex_dispatcher_backend=deepep"], calib)
    a2a = predict([*base, "model.moe_token_dispatcher_type=alltoall", "model.moe_flex_dispatcher_backend=null"], calib)
    hybrid = predict(base, calib)
    assert deepep.knobs["dispatcher"] == "alltoall" and "deepep_falls_back" in deepep.knobs["dispatcher_note"]
    assert deepep.step_time_s == pytest.approx(a2a.step_time_s) and deepep.fits
    assert hybrid.knobs["dispatcher"] == "hybridep" and hybrid.step_time_s != deepep.step_time_s


def test_the_fallback_note_prints_as_text_not_markup():
    """``predict`` prints the DeepEP fallback note as it is (the console reads no markup: a literal ``[yellow]`` was
    printed before)."""
    res = _bb("predict", "model=qwen3_235b_a22b", "gpu=gb200", "num_gpus=64", "model.expert_model_parallel_size=64",
              "+model.moe_token_dispatcher_type=flex", "+model.moe_flex_dispatcher_backend=deepep")  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    text = " ".join(res.stdout.split())
    assert "deepep_falls_back: DeepEP was requested on gb200" in text and "[yellow]" not in text and "[/]" not in text


def test_override_text_is_read_as_hydra_gives_it_before_the_enum_check():
    """``override_enum_errors`` reads a word, a quoted string or a ``[list]`` (item by item)."""
    from bridgebench.config.rules.upstream import override_enum_errors

    assert override_enum_errors("model.recompute_modules", "[core_attn,moe_act]") == []
    bad = override_enum_errors("model.recompute_modules", "[core_atn,moe_act]")
    assert len(bad) == 1 and "did you mean 'core_attn'" in bad[0]
    assert "did you mean 'selective'" in override_enum_errors("model.recompute_granularity", "'selectiv'")[0]
    assert override_enum_errors("model.recompute_granularity", "[unclosed") != []  # not YAML: judged as the text


def test_the_quantized_output_layer_needs_the_mxfp8_recipe():
    """megatron-core 0.19.2 TransformerConfig.__post_init__ refuses fp8_output_proj outside fp8_recipe='mxfp8'."""
    refused = [v for v in rules.check(rules.Point.from_flat(**KIMI, fp8_output_proj=True, precision="fp8_cs"))
               if v.rule == "fp8_output_proj_needs_mxfp8"]  # fmt: skip
    assert refused and refused[0].fix == "model.fp8_output_proj=false" and "fp8_cs" in refused[0].message
    assert "fp8_output_proj_needs_mxfp8" in ids(fp8_output_proj=True, precision="bf16")
    assert "fp8_output_proj_needs_mxfp8" not in ids(fp8_output_proj=True, precision="mxfp8")
    assert "fp8_output_proj_needs_mxfp8" not in ids(precision="fp8_cs")


def test_predict_reads_the_recipes_quantized_output_layer_and_refuses_it_outside_mxfp8():
    base = ("predict", "recipe=deepseek_v3_gb300_mxfp8", "release=26.08")
    ok = _bb(*base, "--json")  # the 26.08 recipe sets model.fp8_output_proj under MXFP8: accepted
    assert ok.returncode == 0, ok.stderr[-2000:]
    bad = _bb(*base, "precision=fp8_cs", "--json")
    assert bad.returncode == 2 and "fp8_output_proj_needs_mxfp8" in bad.stderr and "Traceback" not in bad.stderr
    assert "model.fp8_output_proj=false" in bad.stderr
