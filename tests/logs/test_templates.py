"""Line templates and chunk-wide reading (bridgebench.logs.templates) give exactly what the line-by-line path gives.

The reference is the parser with templates switched off (every line through ``_record_fast`` / ``_step_time_fast`` /
the general handler); the logs are multi-rank Megatron-Bridge logs with the perturbations the templates must not
hide: changing number widths, NaN / inf fields, non-zero skip counters, CR line ends, missing throughput, a
duplicated rank, restarts, tracebacks, dropped or doubled Step Time lines, a foreign rank prefix.
"""

from __future__ import annotations

import dataclasses
import math
import random

import numpy as np
import pytest

import bridgebench.logs.parser as P
from bridgebench.logs import reader, routing
from bridgebench.logs import templates as T
from bridgebench.logs.state import ParseState
from bridgebench.logs.step import fast_step


def _record(it: int, total: int, ms: float, loss: float) -> str:
    return (
        f" [2025-12-22 15:18:33] iteration {it:8d}/{total:8d} | consumed samples: {it * 512:12d} | "
        f"elapsed time per iteration (ms): {ms:.1f} | throughput per GPU (TFLOP/s/GPU): {6.6e6 / ms:.1f} | "
        f"learning rate: 3.000000E-05 | global batch size:   512 | lm loss: {loss:.6E} | loss scale: 1.0 | "
        f"grad norm: 0.042 | number of skipped iterations:   0 | number of nan iterations:   0 |"
    )


def _log(dense: bool, mutate: bool, n: int = 1500, seed: int = 0) -> bytes:
    rng = random.Random(seed)
    out = ["0: Setting rerun_state_machine.current_iteration to 0..."]
    it = 0
    while it < n:
        it += 1
        if mutate and rng.random() < 0.01:  # a restart a few iterations back
            it = max(1, it - rng.randrange(2, 6))
        for _ in range(rng.randrange(0, 4)):
            out.append(f"{rng.randrange(8)}: NCCL INFO Channel 0{rng.randrange(8)}/0 : 0[0] -> 1[1] via P2P")
        ms = 9089.0 + rng.uniform(-40, 40) * (100 if it % 97 == 0 else 1)  # now and then a wider number
        st = f"0: Step Time : {ms / 1000:.2f}s GPU utilization: {6.6e6 / ms:.1f}MODEL_TFLOP/s/GPU"
        rec = _record(it, n, ms, 8.1 + 1.0 / it)
        lines = [st] + ([f"{r}: {rec}" for r in range(8)] if dense else [f"7: {rec}"])
        if mutate:
            r = rng.random()
            k = rng.randrange(len(lines))
            if r < 0.02:
                lines[k] = lines[k].replace("lm loss: ", "lm loss: nan", 1)
            elif r < 0.04:
                lines[k] = lines[k].replace("skipped iterations:   0", "skipped iterations:   2")
            elif r < 0.06:
                lines[k] += "\r"
            elif r < 0.08:
                lines[k] = lines[k].replace(" throughput per GPU (TFLOP/s/GPU): ", " tput: ", 1)
            elif r < 0.10:
                lines[k] = lines[k].replace("7: ", "6: ", 1)
            elif r < 0.12:
                lines.insert(k, lines[k])
            elif r < 0.13:
                lines[k] = lines[k][: len(lines[k]) // 2]
            elif r < 0.14:
                lines[k] = lines[k].replace("grad norm: 0.042", "grad norm: inf")
            elif r < 0.15:
                lines[k:k] = ["0: Traceback (most recent call last):", "0: RuntimeError: boom"]
            elif r < 0.17:
                del lines[0]
            elif r < 0.18:
                lines[0] = lines[0].replace("s GPU", " s GPU")
        out += lines
        if it in (1, 2):
            out += [
                f"{r}: [Rank {r}] (after {it} iterations) memory (GB) | mem-max-allocated-gigabytes: 15{r}.0"
                for r in range(8)
            ]
    out.append("0: [after training is done] datetime: 2025-12-22 20:00:00")
    return ("\n".join(out) + "\n").encode()


def _fingerprint(data: bytes) -> str:
    parsed = P.parse_log(data.decode())
    steps = []
    for s in parsed.steps:
        d = {f.name: getattr(s, f.name) for f in dataclasses.fields(s) if f.name != "_tail"}
        steps.append({k: (repr(v) if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()})
    return repr((P.to_json(parsed), steps, parsed.memory, parsed.starts, parsed.recovered_detail))


@pytest.mark.parametrize("dense", [False, True])
@pytest.mark.parametrize("mutate", [False, True])
def test_templates_and_batches_equal_line_by_line(monkeypatch, dense, mutate):
    data = _log(dense, mutate)
    with monkeypatch.context() as m:  # reference: no templates, so no batches either
        m.setattr(ParseState, "_learn", staticmethod(lambda *a: None))
        want = _fingerprint(data)
    assert _fingerprint(data) == want
    monkeypatch.setattr(routing, "BATCH_MIN_HITS", 1)  # every chunk read in batches, at several chunk sizes
    for chunk in (4096, 65536):
        monkeypatch.setattr(reader, "CHUNK_BYTES", chunk)
        assert _fingerprint(data) == want, chunk


def test_batch_reads_the_chunk_with_templates():
    """The batch path is the one taken on a long clean log: records come from (Step Time, record) pair runs."""
    data = _log(dense=False, mutate=False, n=3000)
    calls = []
    orig = ParseState._pairs

    def spy(self, *a):
        calls.append(a[-1] - a[-2])
        return orig(self, *a)

    ParseState._pairs = spy
    try:
        parsed = P.parse_log(data.decode())
    finally:
        del ParseState._pairs  # back to the inherited method
    assert parsed.step_count == 3000
    assert sum(calls) // 2 > 2500  # most steps made by pair runs


def test_number_reading_matches_python_conversions():
    """The vectorised reading of a slice shape equals int() / float() on it, or declines (ok False)."""
    rng = np.random.default_rng(0)
    for shape, conv in (
        (b" 0000.0 ", float),
        (b" 0.000000E+00 ", float),
        (b" 0.000000E-00 ", float),
        (b"       0", int),
        (b" 00000000000000000.0 ", float),
    ):
        num = T._Number.of("x", shape, 0, len(shape), conv is int)
        assert num.vector
        rows = []
        for _ in range(500):
            b = bytes(ch if ch != ord("0") else int(rng.integers(48, 58)) for ch in shape)
            rows.append(np.frombuffer(b, np.uint8))
        vals, ok = num.read(np.stack(rows))
        for row, v, good in zip(rows, vals, ok):
            if good:
                assert v == conv(row.tobytes())
            else:
                assert conv is float  # only a float can be declined (mantissa > 2**53 or |exponent| > 22)


def test_fast_step_sets_every_field_as_the_constructor():
    """``_fast_step`` bypasses the dataclass ``__init__``: it must set every field, to the constructor's defaults."""
    fast = fast_step(5, 1.5, 600.0, 2.25, 10, "7", 99, b" tail |")
    ref = P.Step(5, 1.5, 600.0, 2.25, total_iters=10, rank="7", offset=99, _tail=b" tail |")
    for f in dataclasses.fields(P.Step):
        assert getattr(fast, f.name) == getattr(ref, f.name), f.name
    assert fast.extra is not fast_step(1, 1.0, None, None, 2, None, 0, None).extra  # a dict per step
