"""Tests for bridgebench.logs.parser on real log excerpts and constructed failure fixtures
(tests/data/logs/SOURCES.md)."""

from __future__ import annotations

import importlib.util
import io
import json
import math
from pathlib import Path

import pytest

from bridgebench.logs.parser import (
    OUTCOME_PRECEDENCE,
    OUTCOMES,
    Step,
    classify_line,
    parse_log,
    steady_state,
    to_json,
)

LOGS = Path(__file__).parents[1] / "data" / "logs"
GB = 1e9 / 2**20  # Megatron-Bridge GB (1e9 bytes) in Megatron MB (2**20 bytes)


def P(name: str, **kw):
    return parse_log(LOGS / name, **kw)


# ---------------------------------------------------------------------------------------------------------------------
# Formats, on the real excerpts
# ---------------------------------------------------------------------------------------------------------------------


def test_mbridge_split_record_with_nemo_run_prefix_and_step_time():
    p = P("cloudai_mbridge_fp8mx_rankprefix.log")
    assert p.format == "megatron_bridge"
    assert p.outcome == "completed" and p.reached_final_iteration
    assert p.total_iters == 50 and [s.iteration for s in p.steps] == [50]
    s = p.steps[0]
    # the record was split over 4 physical lines: fields from every fragment must be there
    assert s.consumed_samples == 25600
    assert s.step_time_s == pytest.approx(9.089)  # elapsed time per iteration (ms) / 1000
    assert s.global_batch_size == 512 and s.learning_rate == pytest.approx(3e-5)
    assert s.lm_loss == pytest.approx(8.114214) and s.extra["load_balancing_loss"] == pytest.approx(1.0)
    assert s.grad_norm == pytest.approx(0.042)
    assert s.skipped == 0 and s.nan_iterations == 0
    # no 'throughput per GPU' field: TFLOP/s comes from the preceding Step Time line
    assert s.tflops_per_gpu == pytest.approx(663.5)
    assert p.ranks_seen == ["ain_fp8_mx/0"]


def test_megatron_lm_throughput_lines_are_incomplete_run():
    p = P("cloudai_megatron_run_3iter_tflops.log")
    assert p.format == "megatron_lm"
    assert [s.iteration for s in p.steps] == [5, 6, 7]
    assert [s.step_time_s for s in p.steps] == pytest.approx([15.8, 15.639, 15.4485])
    assert [s.tflops_per_gpu for s in p.steps] == pytest.approx([490.0, 494.6, 500.6])
    assert p.steps[0].extra["params norm"] == pytest.approx(8660.607)
    assert p.total_iters == 100
    assert p.outcome == "incomplete" and p.outcome_detail is None and not p.reached_final_iteration
    ss = steady_state(p.steps, warmup=0, min_steps=3)
    assert ss.window_ok and ss.count == 3 and ss.median == pytest.approx(15.639)
    assert (ss.first_iteration, ss.last_iteration) == (5, 7)
    # the same window judged against the run's outcome is flagged, never silently used
    ss2 = steady_state(p.steps, warmup=0, min_steps=3, outcome=p.outcome)
    assert not ss2.window_ok and "incomplete" in ss2.reason and ss2.median == pytest.approx(15.639)
    tf = steady_state(p.steps, warmup=0, min_steps=3, metric="tflops_per_gpu")
    assert tf.median == pytest.approx(494.6)


def test_nemo2_cloudai_lines():
    p = P("cloudai_nemo2_train_step_timing.log", warmup_steps=2, min_steps=5)
    assert p.format == "nemo2"
    assert [s.iteration for s in p.steps] == list(range(17, 29))
    assert p.steps[0].step_time_s == pytest.approx(12.64) and p.steps[7].step_time_s == pytest.approx(13.04)
    assert all(s.lm_loss == pytest.approx(11.03) for s in p.steps)
    assert p.steps[-1].consumed_samples == 3712 and p.steps[0].global_batch_size == 128
    assert p.total_iters == 100  # 'iteration N/99' is 0-based
    assert p.outcome == "incomplete"
    st = p.steady["step_time_s"]
    # issue 10: warm-up is skipped by iteration number, and this excerpt starts at global step 17 > warm-up 2
    assert st.count == 12 and st.first_iteration == 17 and st.median == pytest.approx(12.65)
    assert st.warmup_skipped == 0 and st.quality == "incomplete"
    assert not st.window_ok and "incomplete" in st.reason


def test_nemo_launcher_step_timing_list():
    p = P("cloudai_nemo_launcher_step_timing_list.log", warmup_steps=10, min_steps=5)
    assert p.format == "nemo2"
    assert len(p.steps) == 50 and all(s.inferred_iteration for s in p.steps)
    assert p.steps[0].step_time_s == pytest.approx(11.85) and p.steps[-1].step_time_s == pytest.approx(2.13)
    st = steady_state(p.steps, warmup=10, min_steps=5)
    assert st.count == 40 and st.median == pytest.approx(2.14) and st.max == pytest.approx(2.46)
    assert st.window_ok


def test_dgxc_resume_glued_text_memory_gb_end_marker():
    p = P("dgxc_llama31_8b_ckpt_resume_mem_gb.log")
    assert p.format == "megatron_bridge"
    (s,) = p.steps
    assert (s.iteration, s.total_iters) == (1, 1)
    assert s.step_time_s == pytest.approx(20.2891) and s.lm_loss == pytest.approx(12.58695)
    assert s.grad_norm == pytest.approx(10.275) and s.nan_iterations == 0
    # text glued after the final '|' must not leak into the record
    assert not any("parameters" in k for k in s.extra)
    assert p.outcome == "completed" and p.outcome_detail.startswith("[after training is done]")
    m = p.memory
    assert m["source_unit"] == "GB" and m["ranks_reported"] == [0]
    assert m["peak_allocated_mb"] == pytest.approx(194.41 * GB)
    assert m["peak_reserved_mb"] == pytest.approx(216.89 * GB)
    assert m["per_rank"][0]["allocated_count"] == 571


def test_mtp_doc_line_extra_losses():
    p = P("mbridge_doc_mtp_loss_line.log")
    # a lone iteration line carries no Bridge-only marker: reported as the shared Megatron-LM format
    assert p.format == "megatron_lm"
    (s,) = p.steps
    assert (s.iteration, s.total_iters) == (100, 300000)
    assert s.step_time_s == pytest.approx(3.7386)
    assert s.lm_loss == pytest.approx(7.968678)
    assert s.extra["mtp_1 loss"] == pytest.approx(7.925096)
    assert s.extra["load_balancing_loss"] == pytest.approx(1.329517)
    assert p.outcome == "incomplete"


@pytest.mark.parametrize(
    "name,secs,tflops",
    [
        ("mbridge_tutorial_llama31_8b_4xgb200_bf16_steptime.log", 11.65, 1158.1),
        ("mbridge_tutorial_llama31_8b_4xgb200_mxfp8_steptime.log", 8.63, 1562.8),
    ],
)
def test_step_time_only_lines(name, secs, tflops):
    p = P(name)
    assert p.format == "megatron_bridge"
    (s,) = p.steps
    assert s.inferred_iteration and s.source == "step_time"
    assert s.step_time_s == pytest.approx(secs) and s.tflops_per_gpu == pytest.approx(tflops)
    # issue 10: a lone Step Time line gives its figures, with quality 'short'
    assert p.steady["step_time_s"].insufficient and p.quality == "short"
    j = to_json(p)
    assert j["step_time_s"] == pytest.approx(secs) and j["tflops_per_gpu"] == pytest.approx(tflops)
    assert j["quality"] == "short" and j["window"]["count"] == 1


def test_mbridge_out1_full_run_warmup_and_memory():
    p = P("mbridge_llama_7b_cp2_8rank_20iter_out1.log", warmup_steps=10, min_steps=5)
    assert p.format == "megatron_bridge"
    assert [s.iteration for s in p.steps] == list(range(1, 21))
    assert p.outcome == "completed" and p.reached_final_iteration and p.total_iters == 20
    assert p.outcome_detail == "[after training is done] datetime: 2025-08-29 17:03:08"
    # iteration 1 has '> padded vocab ...' glued after its last '|'
    assert p.steps[0].lm_loss == pytest.approx(10.56832) and p.steps[0].nan_iterations == 0
    assert p.steps[0].step_time_s == pytest.approx(12.953)
    st = p.steady["step_time_s"]
    assert (st.count, st.first_iteration, st.last_iteration) == (10, 11, 20)
    assert st.median == pytest.approx(0.4514) and st.window_ok and st.reason == "ok"
    assert st.max < 0.46  # warmup spikes at iterations 1 and 10 are outside the window
    assert p.steady["tflops_per_gpu"].median is None  # this Bridge version printed no TFLOP/s
    assert p.memory["unit"] == "MB" and p.memory["source_unit"] == "MB"
    assert p.memory["ranks_reported"] == [0, 1]
    assert p.memory["peak_allocated_mb"] == pytest.approx(55251.01708984375)
    assert p.memory["peak_reserved_mb"] == pytest.approx(56088.0)
    j = to_json(p)
    # issue 10: the headline is the window's mean step time (upstream evaluate.py averages), median kept in window
    assert j["steps"] == 20 and j["step_time_s"] == pytest.approx(st.mean) and j["tflops_per_gpu"] is None
    assert st.mean == pytest.approx(0.45179) and j["window"]["median_s"] == pytest.approx(0.4514)
    # with no warmup the 12.95 s first iteration drags the mean far above the median
    raw = steady_state(p.steps, warmup=0, min_steps=5)
    assert raw.mean > 1.0 > raw.median


def test_dsv3_memory_records_glued_on_one_line():
    p = P("mbridge_dsv3_nvfp4_v2_mem_gb_rankprefix.log")
    assert p.format == "megatron_bridge" and p.steps == []
    assert p.memory["ranks_reported"] == [0, 1, 2, 3]  # rank 3's record is glued onto rank 2's line
    assert p.memory["reports"] == 4
    assert p.memory["peak_allocated_mb"] == pytest.approx(153.48 * GB)  # rank 0
    assert p.memory["peak_reserved_mb"] == pytest.approx(182.24 * GB)  # rank 2
    assert p.memory["per_rank"][3]["max_reserved_mb"] == pytest.approx(181.59 * GB)
    assert p.ranks_seen == ["p4_v2_perf/0"]
    assert p.outcome == "incomplete"


def test_nemo2_clean_run_completed():
    p = P("nemo2_resiliency_clean_run.log", warmup_steps=10, min_steps=5)
    assert p.format == "nemo2"
    # the last step is printed as 'Training epoch 1, iteration 0/19' but is global_step 19
    assert [s.iteration for s in p.steps] == list(range(20))
    assert p.total_iters == 20  # Lightning max_steps
    assert p.outcome == "completed" and p.outcome_detail == "`Trainer.fit` stopped: `max_steps=20` reached."
    assert p.steps[0].step_time_s == pytest.approx(10.31)
    st = p.steady["step_time_s"]
    assert st.count == 10 and st.median == pytest.approx(7.578) and st.window_ok
    assert p.iteration_ranks == ["ining-demo/0 [default0]"]
    assert to_json(p)["step_time_s"] == pytest.approx(st.mean)  # issue 10: headline = window mean


def test_nemo2_crash_with_in_job_restart():
    p = P("nemo2_resiliency_crash_injob_restart.log", warmup_steps=2, min_steps=5)
    # issue 10: crashed, restarted in the same job, then finished -> completed, with the restart counted
    assert p.outcome == "completed" and p.recovered == ["crash"]
    assert p.recovered_detail["crash"] == "Exception: Simulating a crash at step 17!"
    assert "1 in-job restart" in p.outcome_detail
    assert p.signal_counts["crash"] == 8  # one traceback per rank
    assert len(p.ranks_seen) == 8
    # steps 10-15 were logged twice; the post-restart attempt supersedes the first
    assert [s.iteration for s in p.steps] == list(range(20))
    assert p.restarts == 1 and p.superseded_steps == 6
    by_it = {s.iteration: s for s in p.steps}
    assert by_it[9].segment == 0 and by_it[10].segment == 1
    assert by_it[10].step_time_s == pytest.approx(10.26)  # re-warm after the restart
    assert p.reached_final_iteration and p.end_marker is not None
    st = p.steady["step_time_s"]
    assert st.window_ok and st.quality == "steady"
    assert st.segments == 2 and st.first_iteration == 2 and st.count == 17
    # warm-up per attempt: the run's iterations 0,1, and the restarted attempt's own first step (10: 10.26 s)
    ws = steady_state(p.steps, warmup=2, min_steps=5)
    assert ws.count == 17 and ws.window_ok and ws.max < 8
    j = to_json(p)
    assert j["outcome"] == "completed" and j["step_time_s"] == pytest.approx(st.mean)
    assert j["detail"]["restarts"] == 1 and j["detail"]["recovered_from"] == ["crash"]


# ---------------------------------------------------------------------------------------------------------------------
# Failure classes, on the constructed fixtures
# ---------------------------------------------------------------------------------------------------------------------


def test_oom_beats_nccl_and_crash():
    p = P("constructed_mbridge_oom_srun.log")
    assert p.outcome == "oom" and "torch.OutOfMemoryError: CUDA out of memory" in p.outcome_detail
    assert {"oom", "nccl_error", "crash"} <= set(p.signals)
    assert [s.iteration for s in p.steps] == [1, 2, 3, 4, 5, 6]
    assert p.ranks_seen == ["0", "1", "3", "7"] and p.iteration_ranks == ["7"]
    assert p.format == "megatron_bridge"
    assert not p.steady["step_time_s"].window_ok


def test_nccl_watchdog_timeout():
    p = P("constructed_megatron_lm_nccl_timeout.log")
    assert p.outcome == "nccl_error"
    assert p.outcome_detail == "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=281)"
    assert p.signal_counts["nccl_error"] == 2 and p.signal_counts["crash"] == 1
    assert len(p.steps) == 3


def test_nan_from_iteration_record():
    p = P("constructed_megatron_lm_nan_iterations.log")
    assert p.outcome == "nan" and "number of nan iterations:   1" in p.outcome_detail
    s = p.steps[-1]
    assert s.iteration == 7 and s.nan_iterations == 1 and s.lm_loss is None and math.isnan(s.grad_norm)
    assert s.is_bad and not p.steps[0].is_bad
    ss = steady_state(p.steps, warmup=0, min_steps=2)
    assert not ss.window_ok and "NaN/skipped" in ss.reason and ss.count == 3


def test_nan_from_rerun_state_machine_runtimeerror():
    p = P("constructed_mbridge_nan_rerun_runtimeerror.log")
    assert p.outcome == "nan"
    assert "found NaN in local forward loss calculation" in p.outcome_detail
    assert "crash" in p.signals  # the RuntimeError traceback is seen, but nan takes precedence
    assert len(p.steps) == 4


def test_time_limit_with_step_time_lines():
    p = P("constructed_mbridge_time_limit_steptime.log", warmup_steps=1, min_steps=3)
    assert p.outcome == "time_limit" and "DUE TO TIME LIMIT" in p.outcome_detail
    assert p.end_marker is None  # 'exiting program after receiving SIGTERM.' is not completion
    assert [s.tflops_per_gpu for s in p.steps] == pytest.approx([432.6, 610.5, 614.6, 613.7, 615.2])
    assert [s.step_time_s for s in p.steps] == pytest.approx([12.9134, 9.1502, 9.089, 9.1017, 9.0799])
    st = p.steady["step_time_s"]
    assert st.count == 4 and st.median == pytest.approx(9.09535) and not st.window_ok
    tf = p.steady["tflops_per_gpu"]
    assert tf.median == pytest.approx((613.7 + 614.6) / 2)
    # issue 10: a failed run still reports its healthy window's figures (quality steady), never window_ok
    j = to_json(p)
    assert j["step_time_s"] == pytest.approx(st.mean) and j["tflops_per_gpu"] == pytest.approx(tf.mean)
    assert j["quality"] == "steady" and not j["window_ok"] and j["outcome"] == "time_limit"
    assert j["detail"]["steady_state"]["step_time_s"]["median"] == pytest.approx(9.09535)


def test_node_failure_beats_nccl():
    p = P("constructed_nemo2_node_failure.log")
    assert p.outcome == "node_failure" and "DUE TO NODE FAILURE" in p.outcome_detail
    assert "nccl_error" in p.signals
    assert p.format == "nemo2" and [s.iteration for s in p.steps] == list(range(6))


def test_crash_illegal_memory_access():
    p = P("constructed_mbridge_illegal_memory_access.log")
    assert p.outcome == "crash"
    assert p.outcome_detail == "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert p.signal_counts["crash"] == 3  # Traceback, RuntimeError, Segmentation fault
    assert len(p.steps) == 3


def test_interleaved_ranks_pick_the_loss_rank_and_drop_duplicates():
    p = P("constructed_mpirun_two_ranks_interleaved.log")
    assert p.outcome == "completed"
    assert [s.iteration for s in p.steps] == [1, 2, 3]
    assert all(s.lm_loss is not None and s.rank == "[1,1]<stdout>" for s in p.steps)
    assert p.duplicates_dropped == 1
    assert p.iteration_ranks == ["[1,0]<stdout>", "[1,1]<stdout>"]
    assert p.memory["peak_allocated_mb"] == pytest.approx(55300.5)
    assert p.memory["peak_reserved_mb"] == pytest.approx(57000.0)


def test_resume_in_same_log_makes_segments():
    p = P("constructed_megatron_lm_resume_restart.log")
    assert p.outcome == "incomplete"
    assert p.restarts == 1 and p.superseded_steps == 2
    assert [(s.iteration, s.segment) for s in p.steps] == [(5, 0), (6, 1), (7, 1)]


# ---------------------------------------------------------------------------------------------------------------------
# Unit-level behaviour
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line,expected",
    [
        (
            "slurmstepd: error: *** JOB 123 ON node1 CANCELLED AT 2026-01-01T00:00:00 DUE TO TIME LIMIT ***",
            "time_limit",
        ),
        (
            "slurmstepd: error: *** JOB 123 ON node1 CANCELLED AT 2026-01-01T00:00:00 DUE TO NODE FAILURE ***",
            "node_failure",
        ),
        ("JobState=NODE_FAIL Reason=NodeDown", "node_failure"),
        ("srun: error: Node failure on vm", "node_failure"),  # the local cluster's NODE_FAIL e2e test saw this line
        ("torch.OutOfMemoryError: CUDA out of memory", "oom"),
        ("torch.cuda.OutOfMemoryError: CUDA out of memory.", "oom"),
        ("RuntimeError: CUDA error: out of memory", "oom"),
        # host memory, as the local cluster's slurmstepd / srun print it (task/cgroup; jobacct_gather OverMemoryKill)
        (
            "slurmstepd-vm: error: Detected 1 oom-kill event(s) in StepId=22817005.1. Some of your processes may "
            "have been killed by the cgroup out-of-memory handler.",
            "oom",
        ),
        ("srun: error: vm: task 0: Out Of Memory", "oom"),
        ("slurmstepd-vm: error: Exceeded job memory limit", "oom"),
        ("Watchdog caught collective operation timeout: WorkNCCL(SeqNum=281)", "nccl_error"),
        ("torch.distributed.DistBackendError: ncclRemoteError", "nccl_error"),
        ("RuntimeError: NCCL error: unhandled system error, ncclSystemError", "nccl_error"),
        ("[E ProcessGroupNCCL.cpp:1] Some NCCL operations have failed or timed out.", "nccl_error"),
        (
            "found NaN in local grad norm for bucket #0 in backward pass before data-parallel communication collective",
            "nan",
        ),
        ("Traceback (most recent call last):", "crash"),
        ("RuntimeError: CUDA error: an illegal memory access was encountered", "crash"),
        ("Segmentation fault (core dumped)", "crash"),
        ("Aborted (core dumped)", "crash"),
        ("Signal 6 (SIGABRT) received by PID 1234", "crash"),
        ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError:", "crash"),
        # benign lines
        ("NCCL version 2.27.3+cuda12.9", None),
        ("node001:1234:1234 [0] NCCL INFO Connected all rings", None),
        (
            "[W ProcessGroupNCCL.cpp:1] Warning: process group has NOT been destroyed before we destruct "
            "ProcessGroupNCCL",
            None,
        ),
        ("No checkpoint found in /ckpt, training from scratch", None),
        ("the communicator was aborted by the user", None),
    ],
)
def test_classify_line(line, expected):
    assert classify_line(line) == expected


def test_outcome_precedence_is_documented_order():
    assert OUTCOME_PRECEDENCE == ("time_limit", "node_failure", "oom", "nccl_error", "nan", "crash")
    assert OUTCOMES[-2:] == ("completed", "incomplete")
    lines = [
        "Traceback (most recent call last):",
        "found NaN in local forward loss calculation",
        "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1)",
        "torch.OutOfMemoryError: CUDA out of memory",
        "slurmstepd: error: *** JOB 1 ON n1 CANCELLED AT 2026-01-01T00:00:00 DUE TO NODE FAILURE ***",
        "slurmstepd: error: *** JOB 1 ON n1 CANCELLED AT 2026-01-01T00:00:00 DUE TO TIME LIMIT ***",
    ]
    # adding each more decisive signal changes the outcome to that class
    for k, expected in enumerate(reversed(OUTCOME_PRECEDENCE), 1):
        assert parse_log("\n".join(lines[:k]) + "\n").outcome == expected


def test_failure_signal_beats_completion():
    good = (LOGS / "mbridge_llama_7b_cp2_8rank_20iter_out1.log").read_text()
    assert parse_log(good).outcome == "completed"
    p = parse_log(good + "[rank0]: Traceback (most recent call last):\n[rank0]: ValueError: teardown\n")
    assert p.outcome == "crash" and p.outcome_detail == "ValueError: teardown" and p.reached_final_iteration


def test_input_kinds_agree():
    path = LOGS / "cloudai_megatron_run_3iter_tflops.log"
    text = path.read_text()
    results = [
        parse_log(path),
        parse_log(str(path)),
        parse_log(text),
        parse_log(io.StringIO(text)),
    ]
    assert {len(r.steps) for r in results} == {3}
    assert results[0].path == str(path) and results[2].path is None
    assert all(r.steps[-1].tflops_per_gpu == pytest.approx(500.6) for r in results)


def test_split_record_survives_other_rank_lines_in_between():
    text = (
        "job/1 some other rank's warning line\n"
        "job/0  [2025-12-22 15:18:33] iteration       10/      10 | consumed samples:         5120 | \n"
        "job/1 another unrelated line\n"
        "job/0 elapsed time per iteration (ms): 1000.0 | learning rate: 1.0E-04 | global batch size:   512 | \n"
        "\n"
        "job/0 lm loss: 2.5E+00 | loss scale: 1.0 | grad norm: 0.5 | \n"
        "job/0 number of skipped iterations:   0 | number of nan iterations:   0 |\n"
    )
    p = parse_log(text)
    (s,) = p.steps
    assert (s.iteration, s.step_time_s, s.lm_loss, s.grad_norm, s.nan_iterations) == (10, 1.0, 2.5, 0.5, 0)
    assert p.outcome == "completed"


def test_step_time_line_after_its_iteration_line_is_attached():
    it = (
        " [2025-12-22 15:18:33] iteration {i:8d}/      10 | consumed samples: 512 | "
        "elapsed time per iteration (ms): {ms} | learning rate: 1.0E-04 | global batch size:   512 | "
        "lm loss: 2.5E+00 | loss scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:   0 |\n"
    )
    text = (
        it.format(i=1, ms="2001.0")
        + "Step Time : 2.00s GPU utilization: 100.0MODEL_TFLOP/s/GPU\n"
        + "Step Time : 1.50s GPU utilization: 133.3MODEL_TFLOP/s/GPU\n"
        + it.format(i=2, ms="1502.0")
    )
    p = parse_log(text)
    assert [s.tflops_per_gpu for s in p.steps] == pytest.approx([100.0, 133.3])
    assert p.orphan_step_time_lines == 0


def test_skipped_iterations_count_as_nan_unless_disabled():
    line = (LOGS / "cloudai_megatron_run_3iter_tflops.log").read_text().splitlines()[0]
    line = line.replace("number of skipped iterations:   0", "number of skipped iterations:   1")
    assert parse_log(line + "\n").outcome == "nan"
    assert parse_log(line + "\n", skipped_is_nan=False).outcome == "incomplete"


def test_nemo2_tflops_field_and_colon_job_prefix():
    # a real cloudai NeMo 2 line, behind a NeMo-Run 'name/0: ' prefix, with the TFLOPS_per_GPU field appended
    line = (LOGS / "cloudai_nemo2_train_step_timing.log").read_text().splitlines()[0]
    p = parse_log(f"pretrain_x/0: {line} | TFLOPS_per_GPU: 456.7\n")
    (s,) = p.steps
    assert (s.iteration, s.step_time_s, s.tflops_per_gpu, s.lm_loss) == (17, 12.64, 456.7, 11.03)
    assert p.ranks_seen == ["pretrain_x/0"] and p.format == "nemo2"


def test_unknown_text():
    p = parse_log("hello\nworld\n")
    assert (p.format, p.outcome, p.steps, p.memory) == ("unknown", "incomplete", [], {})
    assert to_json(p)["step_time_s"] is None


def test_steady_state_edges():
    steps = [Step(iteration=i, step_time_s=1.0 + (i == 1), segment=0) for i in range(1, 4)]
    ss = steady_state(steps, warmup=1, min_steps=5)
    assert ss.insufficient and not ss.window_ok and ss.count == 2 and ss.median == 1.0 and ss.iqr == 0.0
    empty = steady_state([], warmup=0, min_steps=1)
    assert empty.count == 0 and empty.median is None and not empty.window_ok
    one = steady_state(steps[:1], warmup=0, min_steps=1)
    assert one.window_ok and one.median == 2.0 and one.stdev == 0.0
    many = [Step(iteration=i, step_time_s=float(v)) for i, v in enumerate([1, 2, 3, 4, 100], 1)]
    ss = steady_state(many, warmup=0, min_steps=3)
    assert ss.median == 3.0 and (ss.q1, ss.q3, ss.iqr) == (2.0, 4.0, 2.0)  # quantiles(method='inclusive')
    assert ss.mean == pytest.approx(22.0) and ss.stdev == pytest.approx(43.6176567, rel=1e-6)


@pytest.mark.parametrize("name", sorted(p.name for p in LOGS.glob("*.log")))
def test_to_json_is_strict_json_with_required_keys(name):
    j = to_json(parse_log(LOGS / name))
    s = json.dumps(j, allow_nan=False)  # NaN/inf never leak into JSON
    assert {"format", "outcome", "steps", "step_time_s", "tflops_per_gpu", "detail"} <= set(j)
    assert j["outcome"] in OUTCOMES
    assert j["format"] in ("megatron_bridge", "megatron_lm", "nemo2", "nemo1", "unknown")
    assert isinstance(j["steps"], int) and json.loads(s)["steps"] == j["steps"]


def test_benchmark_generator_round_trip(tmp_path):
    spec = importlib.util.spec_from_file_location(
        "bench_logparse", Path(__file__).parents[2] / "benchmarks" / "bench_logparse.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    path = tmp_path / "synthetic.log"
    total = bench.generate(path, size_mb=0.5, mode="realistic")
    p = parse_log(path)
    assert len(p.steps) == total and p.outcome == "completed" and p.format == "megatron_bridge"
    assert p.memory["ranks_reported"] == list(range(8))
    assert p.steady["step_time_s"].window_ok and 9.0 < p.steady["step_time_s"].median < 9.2
    assert p.steady["tflops_per_gpu"].median == pytest.approx(663.5, abs=5.0)
    # dense: all 8 ranks print every iteration line; ties go to the highest rank label (last pipeline stage)
    dense = tmp_path / "dense.log"
    total = bench.generate(dense, size_mb=0.3, mode="dense")
    d = parse_log(dense)
    assert len(d.steps) == total and len(d.iteration_ranks) == 8
    assert {s.rank for s in d.steps} == {"7"} and d.duplicates_dropped == 0
    assert [s.iteration for s in d.steps] == list(range(1, total + 1))


def test_restart_warmup_counted_per_attempt_with_the_default_warmup():
    """Issue 18: with the default warm-up of 10 the first attempt has no step after it (iterations 0-9) and the
    restarted one (10-19) must not lose all of its own to the run's warm-up: its first step (10.26 s, the restart's
    warm-up) is left out, iterations 11-19 are the window. Before: 'none after warm-up 10', the mean of all 20 steps
    with both first steps (7.87 s against a 7.59 s median)."""
    p = P("nemo2_resiliency_crash_injob_restart.log", warmup_steps=10, min_steps=5)
    st = p.steady["step_time_s"]
    assert (st.first_iteration, st.last_iteration, st.count, st.quality) == (11, 19, 9, "steady")
    assert not st.fallback and st.max < 7.7
    assert st.mean == pytest.approx(7.5918, abs=1e-4) and st.median == pytest.approx(7.592)
    assert "after warm-up 10 and 1 step after each of 1 restart" in st.note
    j = to_json(p)
    assert j["statistic"] == "mean" and j["step_time_s"] == j["step_time_s_mean"] == pytest.approx(st.mean)
    assert j["step_time_s_median"] == pytest.approx(st.median)
