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
    point = Point.from_flat(num_gpus=pp * 8, num_layers=layers, num_attention_heads=64, seq_length=4096, gbs=pp * 64,
                            pp=pp, vp=vp, mtp_num_layers=mtp, pipeline_model_parallel_layout=layout)  # fmt: skip
    assert check(point) == []
    stages = parse_layout(layout)
    assert len(stages) == pp * (vp or 1) and "".join(stages).count("t") == layers


def test_even_splits_need_no_layout_and_bad_sizes_are_refused():
    assert balanced_layout(48, 4, 2) is None and balanced_layout(61, 1) is None
    with pytest.raises(LayoutError):
        balanced_layout(61, 0)


def test_auto_split_follows_the_recipe_then_megatron_core():
    from bridgebench.model.layout import PipelineSplit, auto_split, split_divides

    counted = PipelineSplit(account_for_embedding=True, account_for_loss=True)

    # Qwen3 235B's recipe counts the embedding and the loss: 96 / 4 = 24 per rank, kept
    assert auto_split(94, 4, None, 0, counted) == counted
    # an even split needs nothing; Llama 3.1 405B on PP 8 x VP 4 takes the account_for split, not a layout string
    assert auto_split(48, 4, 2) == PipelineSplit()
    assert auto_split(126, 8, 4) == counted
    # Kimi K2 (61 layers): no Megatron-Core split divides; Megatron-Bridge's layout rule
    assert auto_split(61, 4, 4) == PipelineSplit(layout=balanced_layout(61, 4, 4))
    # a recipe's own layout string is kept when it has PP x VP stages holding every layer
    kimi = PipelineSplit(layout="Et*4|(t*4|)*14tmL")
    assert auto_split(61, 4, 4, 1, kimi) == kimi
    assert auto_split(61, 2, None, 1, kimi).layout == balanced_layout(61, 2, None, 1)
    assert not split_divides(94, 4) and split_divides(94, 4, None, None, None, True, True)
    assert not split_divides(61, 4, None, 13, 12, True, False)  # uneven stages exclude account_for
