"""analysis/flops.py against Megatron-Bridge's own calculator, on real provider objects built from configs/model.

v2 is checked against the installed megatron-bridge 0.6.2; v1 against megatron-bridge 0.3.1's flop_utils.py (the
NeMo 26.02.01 code), taken from its PyPI wheel by `make setup` into .cache/mbridge-0.3.1/. 0.3.1 imports
``calculate_avg_seqlen`` from ``megatron.bridge.data.datasets.packing_utils``, which 0.6.2 moved to
``megatron.bridge.data.packing.algorithms``; that import line is rewritten (the function is used only for LoRA).
"""

from __future__ import annotations

import types
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridgebench.model.flops import model_flops
from bridgebench.model.spec import ModelSpec
from bridgebench.paths import REPO_ROOT

pytestmark = pytest.mark.megatron
MB031 = REPO_ROOT / ".cache" / "mbridge-0.3.1" / "flop_utils.py"


@pytest.fixture(scope="module")
def calculators():
    from bridgebench.mbridge import setup
    from bridgebench.mbridge.provider import build_provider

    setup()  # the TE stand-in before megatron.bridge is imported
    from megatron.bridge.training.utils.flop_utils import num_floating_point_operations as v062

    if not MB031.exists():
        pytest.fail(f"{MB031} missing: run `make setup` (downloads megatron-bridge 0.3.1's flop_utils.py)")
    src = (
        Path(MB031)
        .read_text()
        .replace("megatron.bridge.data.datasets.packing_utils", "megatron.bridge.data.packing.algorithms")
    )
    mod = types.ModuleType("mbridge031_flop_utils")
    exec(compile(src, str(MB031), "exec"), mod.__dict__)
    return build_provider, {"v1": mod.num_floating_point_operations, "v2": v062}


def _mb(calculators, version, spec, batch, tp):
    build_provider, fns = calculators
    provider = build_provider(spec, tensor_model_parallel_size=tp)
    return fns[version](types.SimpleNamespace(model=provider), batch)


@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_shipped_models_equal_megatron_bridge(calculators, models, version, tp):
    for m in models.values():
        if m.query_groups % tp:
            continue
        for spec in (m, m.replace(mtp_num_layers=0), m.replace(mtp_num_layers=2), m.replace(seq_length=8192)):
            ours = float(model_flops(spec, 16, tensor_model_parallel_size=tp, formula=version).total)
            assert ours == pytest.approx(_mb(calculators, version, spec, 16, tp), rel=1e-12), (m.name, tp)


def test_gelu_glu_is_where_the_versions_differ(calculators, models):
    llama = models["llama3_70b"].replace(activation_func="gelu")
    v1 = float(model_flops(llama, 2, formula="v1").total)
    v2 = float(model_flops(llama, 2, formula="v2").total)
    assert v1 < v2
    assert v1 == pytest.approx(_mb(calculators, "v1", llama, 2, 1), rel=1e-12)
    assert v2 == pytest.approx(_mb(calculators, "v2", llama, 2, 1), rel=1e-12)


@st.composite
def architectures(draw):
    heads = draw(st.sampled_from([4, 8, 16, 32]))
    groups = draw(st.sampled_from([g for g in (1, 2, 4, 8, 16, 32) if heads % g == 0]))
    layers = draw(st.integers(1, 6))
    moe = draw(st.booleans())
    spec = dict(
        name="random",
        num_layers=layers,
        hidden_size=draw(st.sampled_from([64, 128, 256])),
        ffn_hidden_size=draw(st.sampled_from([128, 384, 512])),
        num_attention_heads=heads,
        num_query_groups=groups,
        kv_channels=draw(st.sampled_from([16, 32, 64])),
        vocab_size=draw(st.integers(100, 5000)),
        seq_length=draw(st.sampled_from([64, 512, 4096])),
        make_vocab_size_divisible_by=draw(st.sampled_from([1, 64, 128])),
        mtp_num_layers=draw(st.integers(0, 2)),
    )
    if draw(st.booleans()):
        spec |= dict(
            multi_latent_attention=True,
            num_query_groups=heads,
            q_lora_rank=draw(st.sampled_from([None, 32, 96])),
            kv_lora_rank=draw(st.sampled_from([16, 64])),
            qk_head_dim=draw(st.sampled_from([16, 32])),
            qk_pos_emb_head_dim=draw(st.sampled_from([0, 8])),
            v_head_dim=draw(st.sampled_from([16, 32])),
        )
    if moe:
        experts = draw(st.sampled_from([4, 8, 16]))
        spec |= dict(
            num_moe_experts=experts,
            moe_router_topk=draw(st.integers(1, 4)),
            moe_ffn_hidden_size=draw(st.sampled_from([32, 96])),
            moe_shared_expert_intermediate_size=draw(st.sampled_from([None, 64])),
            moe_layer_freq=draw(st.lists(st.integers(0, 1), min_size=layers, max_size=layers).filter(any)),
        )
    return ModelSpec.from_mapping(spec), draw(st.sampled_from([1, 2]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(arch=architectures())
def test_random_architectures_equal_megatron_bridge(calculators, arch):
    spec, tp = arch
    if spec.query_groups % tp or spec.num_attention_heads % tp:
        return
    for version in ("v1", "v2"):
        ours = float(model_flops(spec, 4, tensor_model_parallel_size=tp, formula=version).total)
        assert ours == pytest.approx(_mb(calculators, version, spec, 4, tp), rel=1e-12)
