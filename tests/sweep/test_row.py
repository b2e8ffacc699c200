"""bridgebench.sweep.row: the typed sweep row -- one schema for the stages' records, points.parquet and predict."""

from __future__ import annotations

import dataclasses

import pytest

from bridgebench.model.parallel import ParallelDims
from bridgebench.sweep.row import SweepRow, SweepRowError, read_rows, records, write_rows

RECORD = {
    "base": 0, "delta": "{}", "base_choices": "{}", "model": "kimi_k2", "gpu": "gb300", "precision": "mxfp8",
    "optimizer": "dist_muon", "num_gpus": 256, "tp": 1, "pp": 4, "vp": 4, "cp": 1, "ep": 64, "etp": 1, "dp": 64,
    "mbs": 2, "gbs": 4096, "sequence_parallel": False, "layout": "Et*4|(t*4|)*14tL", "account_embedding": False,
    "account_loss": False, "recompute_granularity": None, "recompute_modules": None, "job_type": "pretrain",
    "job_layers": None, "job_experts": None, "release": "26.02.01", "point_id": "abc", "status": "ranked",
    "rule": None, "reason": None, "mem_total_gb": 201.5, "mem_stage": 0, "step_time_s": 12.9,
    "t_gemm_s": 8.0, "t_ep_comm_s": 1.5, "tflops_per_gpu": 1037.0, "rank": 1,
}  # fmt: skip


def test_a_record_is_a_typed_row_with_one_dims_field_and_back():
    row = SweepRow.from_record(RECORD)
    assert row.dims == ParallelDims(num_gpus=256, pp=4, vp=4, ep=64, etp=1, mbs=2, gbs=4096)
    assert row.dp == 64 and row.terms_s == {"gemm": 8.0, "ep_comm": 1.5} and row.mem_total_gb == 201.5
    back = row.to_record()
    assert {k: back[k] for k in RECORD} == RECORD  # same columns and values (dp derived, terms flat)
    names = [f.name for f in dataclasses.fields(SweepRow)]
    assert "dims" in names and not {"tp", "num_gpus", "dp", "gbs"} & set(names)
    with pytest.raises(TypeError):
        SweepRow("abc")  # keyword-only


def test_an_unknown_column_is_refused_by_name():
    with pytest.raises(SweepRowError, match="'mem_total_gib'"):
        SweepRow.from_record({**RECORD, "mem_total_gib": 187.6})


def test_dp_is_none_where_the_world_does_not_divide():
    assert SweepRow.from_record({**RECORD, "num_gpus": 250, "dp": None}).dp is None


def test_parquet_round_trip_gives_back_ints_and_none(tmp_path):
    sparse = {k: v for k, v in RECORD.items() if not k.startswith("t_")} | {"rank": None, "vp": None, "mem_stage": None}
    path = tmp_path / "points.parquet"
    write_rows(path, [RECORD, sparse])  # a column with gaps is stored as floats
    first, second = read_rows(path)
    assert first == records([RECORD])[0] and isinstance(first["rank"], int) and isinstance(first["vp"], int)
    assert second["rank"] is None and second["vp"] is None and second["t_gemm_s"] is None
    assert type(first["tp"]) is int and type(first["tie"]) is type(None)
