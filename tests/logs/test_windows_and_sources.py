"""Issue 10: figures from every log with a timed step (with the window's quality), streaming in chunks, gzip,
bad files, TensorBoard events written by the real writer, the live view."""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bridgebench.logs import reader as reader_mod
from bridgebench.logs.parser import LogReadError, parse_log, to_json

LOGS = Path(__file__).parents[1] / "data" / "logs"
BB = [sys.executable, "-m", "bridgebench.cli"]


def test_tutorial_step_time_line_gives_figures_with_quality_short():
    p = parse_log("Step Time : 8.63s GPU utilization: 1562.8MODEL_TFLOP/s/GPU\n")
    j = to_json(p)
    assert (j["step_time_s"], j["tflops_per_gpu"], j["quality"]) == (8.63, 1562.8, "short")
    assert j["note"] == "1 timed step, none after warm-up 10: figures from all 1"
    # also with --warmup 0, and without the MODEL_ prefix
    j0 = to_json(parse_log("Step Time : 8.63s GPU utilization: 1562.8TFLOP/s/GPU\n", warmup_steps=0))
    assert (j0["step_time_s"], j0["tflops_per_gpu"], j0["quality"]) == (8.63, 1562.8, "short")


def test_three_iteration_nemo2_excerpt_gives_its_mean_step_time():
    lines = (LOGS / "bionemo_pr740_nemo2_iter120_125.log").read_text().splitlines()[:3]
    j = to_json(parse_log("\n".join(lines) + "\n"))
    assert j["step_time_s"] == pytest.approx((0.03146 + 0.03163 + 0.03215) / 3)
    assert j["quality"] == "short" and j["window"]["count"] == 3 and j["window"]["warmup_skipped"] == 0
    assert j["series"]["iteration"] == [120, 121, 122]


def test_truncated_log_has_quality_and_outcome_incomplete():
    p = parse_log(LOGS / "constructed_mbridge_truncated_running.log")
    j = to_json(p)
    assert j["outcome"] == "incomplete" and j["quality"] == "incomplete"
    st = p.steady["step_time_s"]
    assert (st.first_iteration, st.last_iteration, st.count, st.warmup_skipped) == (11, 18, 8, 10)
    assert j["step_time_s"] == pytest.approx(st.mean) and not j["window_ok"]
    assert "stops before the run's end" in j["note"]


def test_warmup_is_skipped_by_iteration_number_not_by_lines():
    # an excerpt from iterations 71-73: nothing in it is warm-up; a log from iteration 1: iterations 1..10 are
    p = parse_log(LOGS / "mlm_i756_mixtral8x7b_h100_iter71_73_tflops.log", warmup_steps=10, min_steps=3)
    assert p.steady["step_time_s"].warmup_skipped == 0 and p.quality == "incomplete"
    full = parse_log(LOGS / "mbridge_llama_7b_cp2_8rank_20iter_out1.log", warmup_steps=10)
    assert full.steady["step_time_s"].first_iteration == 11


def test_gaps_make_an_excerpt():
    base = (LOGS / "megatronllm_i11_iter182_185_no_throughput.log").read_text().splitlines()
    lines = [base[0], base[1], base[3]]  # 182, 183, 185: 184 is missing
    p = parse_log("\n".join(lines) + "\n", warmup_steps=0, min_steps=3)
    assert p.quality == "excerpt" and p.steady["step_time_s"].gaps == 1
    assert "gap" in to_json(p)["note"]


def test_terminal_wrapped_records_are_rejoined():
    wrapped = parse_log(LOGS / "constructed_megatron_lm_terminal_wrapped_120col.log")
    plain = parse_log(LOGS / "cloudai_megatron_run_3iter_tflops.log")
    assert [s.step_time_s for s in wrapped.steps] == [s.step_time_s for s in plain.steps]
    assert [s.tflops_per_gpu for s in wrapped.steps] == [s.tflops_per_gpu for s in plain.steps]
    assert [s.extra for s in wrapped.steps] == [s.extra for s in plain.steps]
    assert [s.lm_loss for s in wrapped.steps] == [s.lm_loss for s in plain.steps]


@pytest.mark.parametrize(
    "name",
    [
        "mbridge_llama_7b_cp2_8rank_20iter_out1.log",
        "nemo2_resiliency_crash_injob_restart.log",
        "constructed_mbridge_time_limit_steptime.log",
        "cloudai_mbridge_fp8mx_rankprefix.log",
    ],
)
def test_chunk_boundaries_change_nothing(monkeypatch, name):
    whole = to_json(parse_log(LOGS / name))
    monkeypatch.setattr(reader_mod, "CHUNK_BYTES", 97)  # every few lines cut mid-line
    chunked = to_json(parse_log(LOGS / name))
    assert chunked == whole


def test_gzip_is_read_transparently(tmp_path):
    src = LOGS / "nemo2_resiliency_clean_run.log"
    gz = tmp_path / "run.log.gz"
    gz.write_bytes(gzip.compress(src.read_bytes()))
    a, b = to_json(parse_log(src)), to_json(parse_log(gz))
    assert {k: v for k, v in a.items() if k != "path"} == {k: v for k, v in b.items() if k != "path"}


def test_empty_and_binary_logs_raise(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    binary = tmp_path / "model.bin"
    binary.write_bytes(bytes(range(256)) * 10)
    with pytest.raises(LogReadError, match="empty log"):
        parse_log(empty)
    with pytest.raises(LogReadError, match="binary file"):
        parse_log(binary)


@pytest.mark.parametrize(
    "content,message",
    [(b"", "empty log"), (b"\x00\x01\x02" * 100, "binary file"), (b"import os\nprint('hi')\n", "not a training log")],
)
def test_cli_rejects_bad_files_with_a_clear_error(tmp_path, content, message):
    bad = tmp_path / "bad.log"
    bad.write_bytes(content)
    res = subprocess.run([*BB, "logs", "parse", str(bad)], capture_output=True, text=True)
    assert res.returncode == 2 and message in res.stderr and "Traceback" not in res.stderr


def test_cli_plain_line_says_why_figures_are_short():
    log = LOGS / "cloudai_megatron_run_3iter_tflops.log"
    res = subprocess.run([*BB, "logs", "parse", str(log)], capture_output=True, text=True, check=True)
    assert "step_time_s=15.63" in res.stdout and "quality=short" in res.stdout
    assert "3 timed steps, none after warm-up 10: figures from all 3" in res.stdout


def test_failed_run_reports_healthy_window_and_series_is_kept():
    p = parse_log(LOGS / "constructed_mbridge_oom_srun.log", warmup_steps=1, min_steps=3)
    j = to_json(p)
    assert j["outcome"] == "oom" and j["step_time_s"] is not None and j["quality"] == "steady" and not j["window_ok"]
    assert j["series"]["iteration"] == [1, 2, 3, 4, 5, 6] and len(j["series"]["step_time_s"]) == 6


def test_series_survives_the_results_store(tmp_path):
    from bridgebench.results.store import ResultStore

    j = to_json(parse_log(LOGS / "mbridge_llama_7b_cp2_8rank_20iter_out1.log"))
    rec = {
        "record_id": "1/a0/pretrain",
        "kind": "pretrain",
        "series": j["series"],
        "window": j["window"],
        "outcome": j["outcome"],
        "quality": j["quality"],
        "step_time_s": j["step_time_s"],
    }
    store = ResultStore(tmp_path / "runs")
    assert store.add([rec]) == 1 and store.add([rec]) == 0  # idempotent
    back = store.get("1/a0/pretrain")
    assert back["series"] == j["series"] and back["window"]["quality"] == "steady"


# --------------------------------------------------------------------------------------------------- TensorBoard
def _write_events(logdir: Path, steps) -> None:
    """Events as Megatron-Bridge 0.6.2 writes them (train_utils.py: 'iteration-time' l.1165 in s,
    'throughput/tflops/device' l.1141 in TFLOP/s/GPU, 'lm loss' l.967), with the real TensorBoard writer."""
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(log_dir=str(logdir))
    for s in steps:
        w.add_scalar("iteration-time", s.step_time_s, s.iteration)
        if s.tflops_per_gpu is not None:
            w.add_scalar("throughput/tflops/device", s.tflops_per_gpu, s.iteration)
        if s.lm_loss is not None:
            w.add_scalar("lm loss", s.lm_loss, s.iteration)
    w.close()


@pytest.mark.parametrize(
    "name", ["mbridge_llama_7b_cp2_8rank_20iter_out1.log", "constructed_mbridge_time_limit_steptime.log"]
)
def test_tensorboard_events_give_the_same_figures_as_the_log(tmp_path, name):
    from bridgebench.logs.events import parse_events

    log = parse_log(LOGS / name, warmup_steps=1, min_steps=3)
    _write_events(tmp_path / "tb", log.steps)
    ev = parse_events(tmp_path / "tb", warmup_steps=1, min_steps=3)
    assert ev.format == "tensorboard" and ev.outcome == "unknown"
    jl, je = to_json(log), to_json(ev)
    assert je["series"]["iteration"] == jl["series"]["iteration"]
    assert je["series"]["step_time_s"] == pytest.approx(jl["series"]["step_time_s"], rel=1e-6)  # float32 events
    assert je["step_time_s"] == pytest.approx(jl["step_time_s"], rel=1e-6)
    if jl["tflops_per_gpu"] is not None:
        assert je["tflops_per_gpu"] == pytest.approx(jl["tflops_per_gpu"], rel=1e-6)
    assert je["window"]["count"] == jl["window"]["count"]
    # the CLI takes the directory or the file
    files = list((tmp_path / "tb").glob("events.out.tfevents.*"))
    res = subprocess.run([*BB, "logs", "parse", str(files[0])], capture_output=True, text=True, check=True)
    assert "format=tensorboard" in res.stdout


def test_events_directory_without_events_is_an_error(tmp_path):
    res = subprocess.run([*BB, "logs", "parse", str(tmp_path)], capture_output=True, text=True)
    assert res.returncode == 2 and "without TensorBoard event files" in res.stderr


def test_collect_prefers_tensorboard_events_and_keeps_log_outcome(tmp_path):
    from bridgebench.launch.run_metrics import TENSORBOARD_SUBDIR, record_figures

    log = LOGS / "constructed_mbridge_time_limit_steptime.log"
    parsed = parse_log(log)
    _write_events(tmp_path / TENSORBOARD_SUBDIR, parsed.steps)
    rec = record_figures(str(tmp_path), [log])
    assert rec["figures_source"] == "tensorboard" and rec["log_outcome"] == "time_limit"
    assert rec["series"]["iteration"] == [1, 2, 3, 4, 5]
    no_tb = record_figures(str(tmp_path / "elsewhere"), [log])
    assert no_tb["figures_source"] == "log" and no_tb["step_time_s"] == pytest.approx(rec["step_time_s"], rel=1e-6)


def test_collect_reads_events_where_the_run_config_put_them(tmp_path):
    """job.tensorboard_subdir decides the folder under the attempt's out dir (mbridge/build.py apply_policies puts
    logger.tensorboard_dir = $BRIDGEBENCH_OUT_DIR/<subdir>); null means the run wrote none."""
    from omegaconf import OmegaConf

    from bridgebench.launch.run_metrics import record_figures, tensorboard_dir

    log = LOGS / "constructed_mbridge_time_limit_steptime.log"
    _write_events(tmp_path / "out" / "tb_events", parse_log(log).steps)
    cfg = OmegaConf.create({"job": {"type": "optstep", "tensorboard_subdir": "tb_events"}})
    assert tensorboard_dir(str(tmp_path), cfg) == tmp_path / "out" / "tb_events"
    assert record_figures(str(tmp_path), [log], cfg)["figures_source"] == "tensorboard"
    off = OmegaConf.create({"job": {"type": "optstep", "tensorboard_subdir": None}})
    assert tensorboard_dir(str(tmp_path), off) is None
    assert record_figures(str(tmp_path), [log], off)["figures_source"] == "log"


# --------------------------------------------------------------------------------------------------- live view
def test_live_figures_of_a_running_log():
    from bridgebench.launch.ledger import Attempt
    from bridgebench.launch.live import describe, live_figures

    fig = live_figures([LOGS / "constructed_mbridge_truncated_running.log"])
    assert (fig.iteration, fig.total, fig.outcome) == (18, 20, "incomplete")
    steps = parse_log(LOGS / "constructed_mbridge_truncated_running.log").steps
    assert fig.step_time_s == steps[-1].step_time_s
    assert fig.eta_s == pytest.approx(2 * sum(s.step_time_s for s in steps) / len(steps))
    a = Attempt(
        run_id="abc-r0", attempt=0, name="run", job_type="pretrain", state="RUNNING", submitted_at=0.0, updated_at=0.0
    )
    line = describe(a, fig)
    assert "iteration 18/20" in line and "ETA" in line
    assert describe(a, None).endswith("no log yet")


def test_progress_callback_reports_bytes(tmp_path):
    seen = []
    path = LOGS / "nemo2_resiliency_clean_run.log"
    parse_log(path, progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (os.path.getsize(path), os.path.getsize(path))
    parse_log(io.BytesIO(path.read_bytes()))  # binary streams work too
