"""bridgebench.model.layout.split_layout: a pipeline split written as the layout string the time model reads, and
the split the published calibration rows take (``recipe_layout``) against Megatron-Bridge 0.6.2's own recipe."""

from __future__ import annotations

import itertools

import pytest

from bridgebench.model.layout import PipelineSplit, auto_split, split_divides, split_layout, stage_layers


def _layers_per_rank(ranks) -> list[int]:
    return [sum(len(layers) for layers, _, _ in chunks) for chunks in ranks]


@pytest.mark.parametrize("layers, pp, vp", [(126, 8, 4), (126, 16, 8), (94, 8, 2), (94, 4, None), (30, 4, None)])
def test_a_counted_split_as_a_layout_builds_the_same_stages(layers, pp, vp):
    split = PipelineSplit(account_for_embedding=True, account_for_loss=True)
    assert split_divides(layers, pp, vp, None, None, True, True)
    layout = split_layout(layers, pp, vp, 0, split)
    assert layout is not None and layout.startswith("E") and layout.endswith("L")
    assert stage_layers(layers, pp, vp, layout) == stage_layers(layers, pp, vp, None, 0, None, None, True, True)


def test_uneven_first_and_last_stages_and_mtp_as_a_layout_build_the_same_stages():
    for first, last, mtp in itertools.product((None, 2, 4), (None, 3), (0, 1)):
        split = PipelineSplit(first_stage_layers=first, last_stage_layers=last)
        layout = split_layout(27, 4, None, mtp, split)
        if first is None and last is None:
            assert layout is None
            continue
        assert stage_layers(27, 4, None, layout, mtp) == stage_layers(27, 4, None, None, mtp, first, last), (
            first,
            last,
        )


def test_an_even_split_or_one_stage_needs_no_layout_and_a_layout_is_kept():
    assert split_layout(48, 4, 2, 0, PipelineSplit()) is None
    assert split_layout(61, 1, None, 0, PipelineSplit(account_for_embedding=True)) is None
    assert split_layout(61, 4, 4, 0, PipelineSplit(layout="Et*4|(t*4|)*14tL")) == "Et*4|(t*4|)*14tL"


def test_llama31_405b_published_rows_take_the_recipes_counted_split_not_a_balanced_layout():
    """Stop 36: the calibration rows of Llama 3.1 405B at PP 8 x VP 4 were priced with a balanced layout string that
    put 20 layers on the first rank (25 stages of 5, six empty); the recipe counts the embedding and loss as layers,
    15 or 16 a rank."""
    from bridgebench.config.compose import compose, model_spec
    from bridgebench.validation.time_calibration import recipe_layout

    spec = model_spec(compose(["model=llama31_405b"]))
    layout = recipe_layout(spec, 8, 4)
    assert _layers_per_rank(stage_layers(126, 8, 4, layout)) == [15, 16, 16, 16, 16, 16, 16, 15]
    assert auto_split(126, 8, 4) == PipelineSplit(account_for_embedding=True, account_for_loss=True)
    assert recipe_layout(spec, 1, None) is None


@pytest.mark.megatron
def test_the_405b_recipe_counts_the_embedding_and_the_loss_as_megatron_bridge_writes_it():
    from bridgebench.mbridge import setup

    setup()
    from megatron.bridge.recipes.llama import llama31_405b_pretrain_config

    model = llama31_405b_pretrain_config().model
    assert model.account_for_embedding_in_pipeline_split and model.account_for_loss_in_pipeline_split
    assert model.num_layers == 126 and model.pipeline_model_parallel_layout is None


def test_the_sweep_prices_a_recipes_counted_split_with_its_own_stages():
    """Qwen3 235B-A22B's GB300 recipe (PP 4 x VP 12, embedding and loss counted): with the point's model the time
    model reads the stages Megatron-Core builds (23 or 24 layers a rank, 2 per chunk but the first and last);
    without it the counted layers were spread as an even split with the remainder up front."""
    from bridgebench import sweep as engine

    base = engine.base_of(["recipe=qwen3_235b_a22b_gb300_mxfp8", "release=26.08"])
    v = engine.effective(base, {})
    assert (v["pp"], v["vp"], v["account_embedding"], v["account_loss"], v["layout"]) == (4, 12, True, True, None)
    cfg = engine.time_config(v, base.gpu, base.spec)
    ranks = stage_layers(94, 4, 12, cfg.pipeline_model_parallel_layout)
    assert ranks == stage_layers(94, 4, 12, None, 0, None, None, True, True)
    assert _layers_per_rank(ranks) == [23, 24, 24, 23]
    assert engine.time_config(v, base.gpu).pipeline_model_parallel_layout is None


def test_non_positive_sizes_are_refused_naming_them():
    from bridgebench.model.layout import LayoutError

    counted = PipelineSplit(account_for_embedding=True, account_for_loss=True)
    with pytest.raises(LayoutError, match="positive sizes"):
        split_layout(0, 4, None, 0, counted)
    with pytest.raises(LayoutError, match="positive sizes"):
        split_layout(126, 8, 0, 0, counted)
