"""The MoE permutations the ``alltoall`` dispatcher adds on the receiving GPU (bridgebench.model.steptime.elementwise:
``sort_chunks_by_idxs`` before and after the experts when a GPU holds more than one expert, megatron-core 0.19.2
``transformer/moe/token_dispatcher.py``), and none for the flex dispatchers or one local expert."""

from __future__ import annotations

import dataclasses

import pytest

from bridgebench.model.steptime import registry
from bridgebench.model.steptime.elementwise import PERMUTE_FWD_BWD, SORT_CHUNKS_PASSES, layer_bytes
from bridgebench.model.steptime.gemm import LayerShape, tokens


def _other(spec, sh: LayerShape) -> float:
    return dict(layer_bytes(registry.handle(spec), "moe", sh))["other"]


@pytest.mark.parametrize("name", ["qwen3_30b_a3b", "deepseek_v3"])
def test_alltoall_with_several_local_experts_sorts_every_received_copy_twice(models, name):
    spec = models[name]
    flex = LayerShape(tp=1, cp=1, ep=8, etp=1, mbs=2, sp=False, peak_key="mxfp8", dispatcher="hybridep")
    a2a = dataclasses.replace(flex, dispatcher="alltoall")
    _, tsp = tokens(spec, a2a)
    copies = tsp * spec.moe_router_topk
    # each pass reads and writes every copy once (2h + 2h bytes), forward, and its backward permutes the gradient
    per_copy = SORT_CHUNKS_PASSES * 4.0 * spec.hidden_size * PERMUTE_FWD_BWD
    assert spec.num_moe_experts // a2a.ep > 1
    assert _other(spec, a2a) - _other(spec, flex) == pytest.approx(per_copy * copies)
    assert per_copy == 16.0 * spec.hidden_size


def test_one_local_expert_or_a_flex_dispatcher_sorts_nothing(models):
    spec = models["qwen3_30b_a3b"]
    one_local = LayerShape(
        tp=1, cp=1, ep=spec.num_moe_experts, etp=1, mbs=1, sp=False, peak_key="mxfp8", dispatcher="alltoall"
    )
    assert _other(spec, one_local) == _other(spec, dataclasses.replace(one_local, dispatcher="deepep"))
    several = dataclasses.replace(one_local, ep=8)
    assert _other(spec, dataclasses.replace(several, dispatcher="deepep")) == _other(
        spec, dataclasses.replace(several, dispatcher="hybridep")
    )
    dense = LayerShape(tp=1, cp=1, ep=1, etp=1, mbs=1, sp=False, peak_key="bf16", dispatcher="alltoall")
    llama = models["llama3_70b"]
    assert dict(layer_bytes(registry.handle(llama), "dense", dense)) == dict(
        layer_bytes(registry.handle(llama), "dense", dataclasses.replace(dense, dispatcher="hybridep"))
    )
