"""The values a built ConfigContainer keeps where a composed config leaves a field out (its base recipe's, its
mixed-precision recipe's): the shipped mbridge_starts.json is the installed Megatron-Bridge's, and the sweep engine's
models see exactly what the build holds."""

from __future__ import annotations

import json

import pytest

from bridgebench.config import sweep as engine
from bridgebench.config.schema import START_FIELDS, STARTS_FILE

pytestmark = pytest.mark.megatron


def test_shipped_start_values_are_the_installed_megatron_bridges():
    from bridgebench.mbridge.recipes import start_catalog

    assert json.loads(STARTS_FILE.read_text()) == start_catalog(), "run: bridgebench recipes fields"


@pytest.mark.parametrize(
    "overrides",
    [
        ["recipe=kimi_k2_gb300_mxfp8", "release=26.02.01", "optimizer=muon"],  # selective recompute from the base
        ["model=qwen3_30b_a3b"],  # no recipe: full recompute and FP32 grad reduce from Megatron-Bridge's base recipe
        ["recipe=deepseek_v3_gb300_mxfp8", "release=26.08"],
    ],
)
def test_the_sweep_sees_what_the_build_keeps(overrides):
    from bridgebench.mbridge.recipes import built_flat

    built = built_flat(overrides)
    base = engine.base_of(overrides)
    assert {k: base.flat[k] for k in START_FIELDS} == {k: built[k] for k in START_FIELDS}
