"""Records and MFU."""

from __future__ import annotations

import pytest

from bridgebench.config.catalog import CatalogError, load_gpu, peak_key
from bridgebench.model.mfu import PeakError, mfu, peak_tflops
from bridgebench.results.records import RecordError, RunRecord, load_blog_table1, load_published


def test_published_rows_become_records():
    recs = load_published()
    assert len(recs) >= 280
    kimi = [r for r in recs if r.model == "kimi_k2"]
    assert kimi and all(r.optimizer == "muon" and r.system == "gb300" and r.precision == "mxfp8" for r in kimi)
    q = next(r for r in recs if r.model == "qwen3_30b_a3b" and r.release == "26.02" and r.system == "gb300")
    assert (q.num_gpus, q.gbs, q.mbs, q.ep, q.optimizer) == (8, 512, 8, 8, "adamw")
    # step time from tokens/s: 512 x 4096 tokens / (30376 tokens/s/GPU x 8 GPUs)
    assert q.resolved_step_time_s() == pytest.approx(512 * 4096 / (30376 * 8))
    assert all(r.source.startswith("NVIDIA Megatron-Bridge ") for r in recs)


def test_blog_table1():
    blog = load_blog_table1().set_index(["model", "optimizer"])
    assert blog.loc[("kimi_k2", "muon"), "published_total_tflops_per_gpu"] == 1080
    assert blog.loc[("qwen3_30b_a3b", "muon"), "published_newton_schulz_tflops_per_gpu"] == 35


#: one Kimi K2 record's fields; each bad case changes one of them
KIMI_RECORD = dict(release="26.02", model="kimi_k2", model_label="Kimi_K2", system="gb300", num_gpus=8,
                   precision="mxfp8", optimizer="muon", gbs=4096, mbs=2, seq_length=4096)  # fmt: skip


def test_bad_records():
    with pytest.raises(RecordError, match="num_gpus must be a positive integer"):
        RunRecord(**{**KIMI_RECORD, "num_gpus": 0}, step_time_s=10.0)
    with pytest.raises(RecordError, match="needs step_time_s or tokens_per_sec_per_gpu"):
        RunRecord(**KIMI_RECORD)
    with pytest.raises(RecordError, match="step_time_s must be positive"):
        RunRecord(**KIMI_RECORD, step_time_s=-1.0)


def test_mfu_and_peaks():
    gb300, h100 = load_gpu("gb300"), load_gpu("h100")
    assert mfu(1250, gb300, "bf16") == pytest.approx(0.5)
    assert peak_tflops(gb300, peak_key("FP8-MX")) == peak_tflops(gb300, peak_key("mxfp8")) == 5000
    assert peak_key("FP8-CS") == peak_key("fp8_cs") == "fp8"
    assert gb300["gpus_per_node"] == 4 and h100["gpus_per_node"] == 8
    for name in ("gb300", "gb200", "b300", "b200", "h100", "h200"):
        g = load_gpu(name)
        assert g["source"] and g["peak_table_version"]
        assert g["peak_tflops"]["fp8"] == pytest.approx(2 * g["peak_tflops"]["bf16"], rel=1e-3)
    with pytest.raises(PeakError, match="no mxfp8 tensor-core peak"):
        peak_tflops(h100, "mxfp8")
    with pytest.raises(PeakError, match="unknown gpu 'z100'"):
        load_gpu("z100")  # a100 ships (configs/gpu/a100.yaml, issue 15)
    with pytest.raises(PeakError, match="unknown precision peak key"):
        peak_tflops(gb300, "fp16")
    with pytest.raises(CatalogError, match="unknown precision 'fp16'"):
        peak_key("fp16")
