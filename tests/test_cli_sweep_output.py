"""The sweep's terminal output (issue 18): the top-K table shows what tells near-identical points apart (recompute
modules, and any other field two rows differ in only there), and a log or pipe does not read "0 points" for the
compose stage, whose count is not known when it starts."""

from __future__ import annotations

import io

from rich.console import Console

from bridgebench.cli.sweep_output import SweepProgress, _recompute, _separating_fields

SHOWN = ("tp", "pp", "vp", "cp", "ep", "etp", "dp", "mbs", "gbs")


def _row(**kw):
    base = dict(tp=1, pp=4, vp=None, cp=1, ep=64, etp=1, dp=64, mbs=1, gbs=4096, recompute_granularity="selective",
                recompute_modules=["mla_up_proj"], layout="auto", sequence_parallel=False, tflops_per_gpu=1000.0,
                mem_total_gb=150.0, step_time_s=12.9, rank=1, config_hash="a")  # fmt: skip
    return {**base, **kw}


def test_recompute_modules_are_shown():
    assert _recompute(_row()) == "selective (mla_up_proj)"
    assert _recompute(_row(recompute_modules=["mla_up_proj", "moe_act"])) == "selective (mla_up_proj,moe_act)"
    assert _recompute(_row(recompute_granularity=None, recompute_modules=None)) == "none"


def test_a_field_that_separates_look_alike_rows_gets_a_column():
    same = [_row(rank=1, layout="Et*4|(t*4|)*14tL"), _row(rank=2, layout="Et*3|(t*4|)*14t*2L", tflops_per_gpu=999.0)]
    assert _separating_fields(same, SHOWN) == ["layout"]  # results (TFLOP/s, memory) never count
    apart = [_row(rank=1), _row(rank=2, recompute_modules=["mla_up_proj", "moe_act"])]
    assert _separating_fields(apart, SHOWN) == []  # the recompute column already separates them


def test_compose_stage_line_has_no_zero_count():
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=False, width=120)
    with SweepProgress(console) as progress:
        progress.start("compose", 0)
        progress.start("1 enumerate", 7200)
    text = buf.getvalue()
    assert "stage compose: one config per group combination" in text and "compose: 0 points" not in text
    assert "stage 1 enumerate: 7,200 points" in text
