"""bridgebench.model.layout.stage_layers against Megatron-Core 0.19.2's own layer assignment
(``transformer_block.py::get_num_layers_to_build``, ``transformer_layer.py::get_transformer_layer_offset``) for the
splits without a layout string: even, uneven first / last stage, embedding and loss counted as layers."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bridgebench.model.layout import split_divides, stage_layers

pytestmark = pytest.mark.megatron

CASES = [
    # (num_layers, pp, vp, first, last, account_embedding, account_loss)
    (126, 8, 4, None, None, True, True),  # Llama 3.1 405B, the 26.x GB300 recipes
    (94, 4, 12, None, None, True, True),  # Qwen3 235B, PP 4 VP 12
    (94, 4, None, None, None, True, True),
    (127, 8, None, None, None, True, False),
    (61, 4, None, 13, 12, False, False),
    (62, 4, 2, 8, None, False, False),
    (48, 4, 3, None, None, False, False),
    (80, 8, 5, None, None, False, False),
]


@pytest.mark.parametrize("layers, pp, vp, first, last, acc_e, acc_l", CASES)
def test_stage_layers_equal_megatron_cores(layers, pp, vp, first, last, acc_e, acc_l):
    from bridgebench.mbridge import setup

    setup()
    from megatron.core.transformer.transformer_block import get_num_layers_to_build
    from megatron.core.transformer.transformer_layer import get_transformer_layer_offset

    assert split_divides(layers, pp, vp, first, last, acc_e, acc_l)
    cfg = SimpleNamespace(
        num_layers=layers, pipeline_model_parallel_size=pp, virtual_pipeline_model_parallel_size=vp,
        pipeline_model_parallel_layout=None, num_layers_in_first_pipeline_stage=first,
        num_layers_in_last_pipeline_stage=last, account_for_embedding_in_pipeline_split=acc_e,
        account_for_loss_in_pipeline_split=acc_l,
    )  # fmt: skip
    ours = stage_layers(layers, pp, vp, None, 0, first, last, acc_e, acc_l)
    for rank in range(pp):
        for chunk in range(vp or 1):
            vp_stage = chunk if vp else None
            n = get_num_layers_to_build(cfg, vp_stage=vp_stage, pp_rank=rank)
            offset = get_transformer_layer_offset(cfg, vp_stage=vp_stage, pp_rank=rank)
            assert ours[rank][chunk][0] == tuple(range(offset, offset + n)), (rank, chunk)
