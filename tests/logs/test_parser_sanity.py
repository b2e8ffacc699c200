"""Parser sanity (issue 17, break 6): step times <= 0, non-finite or beyond a day are invalid data with a quality
saying so -- never ``steady``, no headline figure --; an iteration number of 10**25 is invalid data, not an
OverflowError; FIFOs, devices and other non-regular files are refused at once instead of hanging."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bridgebench.logs.parser import MAX_ITERATION, LogReadError, parse_log, to_json

BB = [sys.executable, "-m", "bridgebench.cli"]


def megatron_log(times_ms, *, start: int = 1, tflops: float = 490.0, total: int = 100, it=None) -> str:
    lines = []
    for k, ms in enumerate(times_ms):
        i = it(k) if it else start + k
        lines.append(
            f" [2026-01-16 07:32:24] iteration {i:8d}/{total:8d} | consumed samples: {i * 2048:12d} | "
            f"elapsed time per iteration (ms): {ms} | throughput per GPU (TFLOP/s/GPU): {tflops} | "
            "learning rate: 4.1E-07 | global batch size:  2048 | lm loss: 1.3E+01 | loss scale: 1.0 | "
            "grad norm: 2.870 | number of skipped iterations:   0 | number of nan iterations:   0 |"
        )
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    "ms,why",
    [
        ("-15000.0", "negative"),
        ("0.0", "zero"),
        ("1e300", "beyond a day"),
        ("86400001.0", "just beyond a day"),
        ("nan", "not a number"),
        ("inf", "infinite"),
    ],
)
def test_impossible_step_times_are_invalid_never_steady(tmp_path, ms, why):
    """The issue: `step_time_s=-15 tflops_per_gpu=-490 quality=steady`; 1e300 s was steady too."""
    log = tmp_path / "run.log"
    log.write_text(megatron_log([ms] * 30, tflops=-490.0 if why == "negative" else 490.0, total=30))
    p = parse_log(log)
    j = to_json(p)
    assert p.quality == "invalid" and j["quality"] == "invalid" and not j["window_ok"], why
    assert j["step_time_s"] is None and "invalid data" in j["note"]
    res = subprocess.run([*BB, "logs", "parse", str(log)], capture_output=True, text=True)
    out = res.stdout.replace(str(log), "<log>")  # the figures, not the temp path (pytest-15x/... holds '-15')
    assert res.returncode == 0 and "quality=invalid" in out and "steady" not in out, res.stdout
    assert "step_time_s=-" in out and "-15" not in out and "-490" not in out


def test_one_impossible_step_in_a_healthy_window_makes_it_invalid(tmp_path):
    times = ["9000.0"] * 30
    times[20] = "-1.0"
    p = parse_log(megatron_log(times, total=30))
    st = p.steady["step_time_s"]
    assert st.quality == "invalid" and "1 invalid step_time_s values" in st.reason
    assert st.count == 20 and st.mean == pytest.approx(9.0)  # statistics over the valid values only
    assert to_json(p)["step_time_s"] is None  # ... but no headline figure from invalid data


def test_healthy_logs_stay_steady():
    p = parse_log(megatron_log(["9000.0"] * 30, total=30))
    assert p.quality == "steady" and to_json(p)["step_time_s"] == pytest.approx(9.0)


def test_an_oversized_iteration_number_is_invalid_data_not_a_crash(tmp_path):
    """The issue: iteration 10**25 crashed the parser with an OverflowError traceback."""
    log = tmp_path / "big.log"
    log.write_text(megatron_log(["9000.0"] * 30, it=lambda k: 10**25 + k, total=10**26))
    p = parse_log(log)
    assert p.invalid_iterations == 30 and p.step_count == 0 and p.quality == "invalid"
    assert "impossible iteration number" in to_json(p)["note"]
    res = subprocess.run([*BB, "logs", "parse", str(log)], capture_output=True, text=True)
    assert res.returncode == 0 and "quality=invalid" in res.stdout and "Traceback" not in res.stderr, res.stderr


def test_oversized_iterations_among_valid_ones_are_dropped_and_said(tmp_path):
    text = megatron_log(["9000.0"] * 30, total=30) + megatron_log(["9000.0"], it=lambda k: MAX_ITERATION + 1)
    p = parse_log(text)
    assert p.step_count == 30 and p.invalid_iterations == 1 and p.quality == "steady"
    assert "1 record(s) with an impossible iteration number" in to_json(p)["note"]


def run_with_timeout(args, timeout=30):
    return subprocess.run([*BB, *args], capture_output=True, text=True, timeout=timeout)


def test_a_fifo_is_refused_at_once_not_read(tmp_path):
    """The issue: a FIFO hung `logs parse` (nobody writes to it)."""
    fifo = tmp_path / "job.log"
    os.mkfifo(fifo)
    with pytest.raises(LogReadError, match="FIFO"):
        parse_log(fifo)
    with pytest.raises(LogReadError, match="FIFO"):
        parse_log(str(fifo))
    res = run_with_timeout(["logs", "parse", str(fifo)])
    assert res.returncode == 2 and f"{fifo}: a FIFO" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/null", "dir"])
def test_devices_and_folders_are_refused(tmp_path, path):
    target = tmp_path if path == "dir" else Path(path)
    with pytest.raises(LogReadError, match="not a regular file"):
        parse_log(target)


def test_a_tensorboard_event_fifo_is_refused(tmp_path):
    tb = tmp_path / "tb"
    tb.mkdir()
    os.mkfifo(tb / "events.out.tfevents.1.host")
    (tb / "events.out.tfevents.2.host").write_bytes(b"")
    res = run_with_timeout(["logs", "parse", str(tb)])
    assert res.returncode == 2 and "not a regular file" in res.stderr and "Traceback" not in res.stderr


def test_a_gzipped_log_still_parses_and_closes(tmp_path):
    import gzip

    path = tmp_path / "run.log.gz"
    with gzip.open(path, "wt") as f:
        f.write(megatron_log(["9000.0"] * 30, total=30))
    assert parse_log(path).quality == "steady"
