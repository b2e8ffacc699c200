"""bridgebench.model.layout.balanced_layout against Megatron-Bridge 0.6.2's own Kimi K2 layouts
(``recipes/kimi/h100/kimi_k2.py::_get_kimi_k2_pipeline_layout``), and the rules' view of what it produces."""

from __future__ import annotations

import pytest

from bridgebench.config.rules import Point, check
from bridgebench.model.layout import LayoutError, balanced_layout, parse_layout


def _as_stages(layout: list[list[str]]) -> list[str]:
    names = {"embedding": "E", "decoder": "t", "mtp": "m", "loss": "L"}
    return ["".join(names[x] for x in stage) for stage in layout]


@pytest.mark.megatron
def test_kimi_k2_layouts_equal_megatron_bridges():
    from bridgebench.mbridge import setup

    setup()
    from megatron.bridge.recipes.kimi.h100.kimi_k2 import _get_kimi_k2_pipeline_layout

    for pp, vp in ((1, 1), (4, 1), (8, 1), (4, 2), (16, 1), (8, 2), (4, 4), (2, 8)):
        theirs = _get_kimi_k2_pipeline_layout(pp, vp)
        ours = balanced_layout(61, pp, vp if vp > 1 else None)
        assert (None if theirs is None else _as_stages(theirs)) == (None if ours is None else parse_layout(ours))


@pytest.mark.parametrize("layers, pp, vp, mtp", [(61, 2, None, 0), (61, 32, None, 0), (61, 4, 4, 1), (94, 4, None, 0)])
def test_balanced_layouts_pass_megatron_cores_layout_rules(layers, pp, vp, mtp):
    layout = balanced_layout(layers, pp, vp, mtp)
    point = Point(num_gpus=pp * 8, num_layers=layers, num_attention_heads=64, seq_length=4096, gbs=pp * 64, pp=pp,
                  vp=vp, mtp_num_layers=mtp, pipeline_model_parallel_layout=layout)  # fmt: skip
    assert check(point) == []
    stages = parse_layout(layout)
    assert len(stages) == pp * (vp or 1) and "".join(stages).count("t") == layers


def test_even_splits_need_no_layout_and_bad_sizes_are_refused():
    assert balanced_layout(48, 4, 2) is None and balanced_layout(61, 1) is None
    with pytest.raises(LayoutError):
        balanced_layout(61, 0)
