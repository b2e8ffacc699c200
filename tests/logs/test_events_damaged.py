"""Damaged TensorBoard event files are marked ``damaged``, never read silently as ``steady`` (issue 24, "Crashes
instead of answers"). Events are written with the real TensorBoard writer (through torch's ``SummaryWriter``, as
Megatron-Bridge writes them), then truncated or corrupted on disk; TensorBoard's own loader reads both as a clean,
shorter run."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bridgebench.logs.events import DAMAGED, damage, parse_events
from bridgebench.logs.parser import parse_log, to_json
from tests.logs.test_windows_and_sources import BB, LOGS, _write_events

LOG = LOGS / "mbridge_llama_7b_cp2_8rank_20iter_out1.log"


@pytest.fixture()
def events(tmp_path) -> Path:
    _write_events(tmp_path / "tb", parse_log(LOG, warmup_steps=1, min_steps=3).steps)
    (f,) = (tmp_path / "tb").glob("events.out.tfevents.*")
    return f


def _truncate(f: Path) -> None:
    f.write_bytes(f.read_bytes()[:-30])  # a crash mid-write: the last record cut short


def _corrupt(f: Path) -> None:
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped bit-pattern in a record's middle
    f.write_bytes(bytes(data))


def test_an_intact_file_is_steady(events):
    assert damage(events) == []
    ev = parse_events(events.parent, warmup_steps=1, min_steps=3)
    assert ev.quality == "steady"


@pytest.mark.parametrize("harm,says", [(_truncate, "truncated"), (_corrupt, "CRC")])
def test_a_damaged_file_is_marked_damaged(events, harm, says):
    harm(events)
    found = damage(events)
    assert len(found) == 1 and says in found[0] and str(events) in found[0]
    ev = parse_events(events.parent, warmup_steps=1, min_steps=3)
    j = to_json(ev)
    assert ev.quality == DAMAGED and j["quality"] == DAMAGED and not j["window_ok"]
    assert "damaged" in ev.outcome_detail and says in j["window_reason"]
    res = subprocess.run([*BB, "logs", "parse", str(events)], capture_output=True, text=True)
    assert res.returncode == 0 and "quality=damaged" in res.stdout and "quality=steady" not in res.stdout, res


def test_collect_marks_damaged_events_and_takes_the_log_figures(tmp_path):
    from bridgebench.launch.run_metrics import TENSORBOARD_SUBDIR, record_figures

    log = LOGS / "constructed_mbridge_time_limit_steptime.log"
    _write_events(tmp_path / TENSORBOARD_SUBDIR, parse_log(log).steps)
    (f,) = (tmp_path / TENSORBOARD_SUBDIR).glob("events.out.tfevents.*")
    _corrupt(f)
    rec = record_figures(str(tmp_path), [log])
    assert rec["figures_source"] == "log" and "CRC" in rec["events_damaged"]
    empty = tmp_path / "empty.log"
    empty.write_text("no steps here\n")
    only_events = record_figures(str(tmp_path), [empty])  # no timed step in the log: the events', marked damaged
    assert only_events["figures_source"] == "tensorboard" and only_events["quality"] == DAMAGED
