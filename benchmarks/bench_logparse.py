"""Throughput benchmark for bridgebench.logs.parser.parse_log (+ to_json) on a large synthetic multi-rank log.

Generates (in a temporary directory) a Megatron-Bridge-style SLURM log with 8 ranks interleaved under
``srun --label`` prefixes (``0: `` .. ``7: ``): per iteration a ``Step Time`` line from rank 0, the iteration line
from the last rank, and noise from every rank (warnings, NCCL INFO lines, timer blocks, checkpoint messages),
memory reports from all ranks after iterations 1 and 2, and an end-of-training marker.  ``--mode dense`` makes
every rank print the iteration line too (the de-duplication worst case).  Prints MB/s (MB = 1e6 bytes) over
``--repeat`` parses (wall-clock best and median, and best by process CPU time, which is less sensitive to other
load on the machine) and checks the parse result.  Beside it: ``grep -c iteration`` on the same file (the floor a
line filter reaches), and with ``--memory`` the peak resident memory of a parse in a fresh process (bounded: the
chunk plus the steps kept, not the file).

    .venv/bin/python benchmarks/bench_logparse.py                 # ~200 MB, realistic mix
    .venv/bin/python benchmarks/bench_logparse.py --mode both --size-mb 200 --repeat 3
    .venv/bin/python benchmarks/bench_logparse.py --size-mb 2000 --repeat 1 --memory
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from bridgebench.logs.parser import parse_log, to_json  # noqa: E402

RANKS = 8

_NOISE = [
    "{r}: /usr/local/lib/python3.12/dist-packages/torch/autograd/graph.py:829: UserWarning: c10d::broadcast_: an "
    "autograd kernel was not registered to the Autograd key(s) but we are trying to backprop through it.",
    "{r}:   return Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass",
    "{r}: node{n:03d}:{pid}:{pid2} [{r}] NCCL INFO Channel 0{c}/0 : {r}[{r}] -> {r2}[{r2}] via P2P/CUMEM/read",
    "{r}: node{n:03d}:{pid}:{pid2} [{r}] NCCL INFO Connected all rings, use ring PXN 0 GDR 1",
    "{r}: [WARNING  | megatron.core.rerun_state_machine]: Implicit initialization of Rerun State Machine!",
    "{r}: INFO:megatron.core.optimizer:Setting up optimizer with config OptimizerConfig(optimizer='adam', lr=0.0003)",
]
_TIMERS = [
    "0: (min, max) time across ranks (ms):",
    "0:     forward-backward ...............................: (8912.44, 8913.02)",
    "0:     optimizer ......................................: (160.12, 160.54)",
]


def _iteration_line(it: int, total: int, rng: random.Random) -> tuple[str, float]:
    ms = 9089.0 + rng.uniform(-40.0, 40.0)
    tf = 663.5 * 9089.0 / ms
    return (
        f" [2025-12-22 15:18:33] iteration {it:8d}/{total:8d} | consumed samples: {it * 512:12d} | "
        f"elapsed time per iteration (ms): {ms:.1f} | throughput per GPU (TFLOP/s/GPU): {tf:.1f} | "
        f"learning rate: 3.000000E-05 | global batch size:   512 | lm loss: {8.1 + 1.0 / it:.6E} | "
        f"load_balancing_loss: 1.000000E+00 | loss scale: 1.0 | grad norm: 0.042 | "
        f"number of skipped iterations:   0 | number of nan iterations:   0 |"
    ), ms


def generate(path: Path, size_mb: float, mode: str, seed: int = 0) -> int:
    """Write the synthetic log; returns the number of iterations written."""
    rng = random.Random(seed)
    target = int(size_mb * 1e6)
    per_iter = 1500 if mode == "realistic" else 4270  # rough bytes per iteration, to size `total`
    total = max(10, target // per_iter)
    written = 0
    with open(path, "w", encoding="utf-8") as f:
        for r in range(RANKS):
            f.write(f"{r}: NCCL version 2.27.3+cuda12.9\n")
        f.write("0: Setting rerun_state_machine.current_iteration to 0...\n")
        for it in range(1, total + 1):
            buf = []
            for _ in range(9):
                r = rng.randrange(RANKS)
                tmpl = _NOISE[rng.randrange(len(_NOISE))]
                buf.append(tmpl.format(r=r, r2=(r + 1) % RANKS, n=r // 4, pid=1000 + r, pid2=2000 + r, c=it % 8))
            line, ms = _iteration_line(it, total, rng)
            buf.append(f"0: Step Time : {ms / 1000.0:.2f}s GPU utilization: {663.5 * 9089.0 / ms:.1f}MODEL_TFLOP/s/GPU")
            if mode == "dense":
                for r in range(RANKS):
                    buf.append(f"{r}: {line}")
            else:
                buf.append(f"{RANKS - 1}: {line}")
            if it % 10 == 0:
                buf.extend(_TIMERS)
            if it in (1, 2):
                for r in range(RANKS):
                    buf.append(
                        f"{r}: [Rank {r}] (after {it} iterations) memory (GB) | mem-allocated-gigabytes: 63.4 | "
                        f"mem-max-allocated-gigabytes: {150 + r:.2f} | mem-max-reserved-gigabytes: 182.2"
                    )
            chunk = "\n".join(buf) + "\n"
            f.write(chunk)
            written += len(chunk)
        f.write("0: [after training is done] datetime: 2025-12-22 20:00:00\n")
    return total


def _grep(path: Path) -> str:
    """``grep -c iteration FILE``: best wall time of 3 (the same file, the same machine)."""
    grep = shutil.which("grep")
    if grep is None:
        return "grep not found"
    best, out = float("inf"), ""
    for _ in range(3):
        t0 = time.perf_counter()
        out = subprocess.run([grep, "-c", "iteration", str(path)], capture_output=True, text=True).stdout.strip()
        best = min(best, time.perf_counter() - t0)
    return f"grep -c iteration: {out} lines in {best:.2f} s = {os.path.getsize(path) / 1e6 / best:.0f} MB/s"


def _peak_rss(path: Path) -> str:
    """Peak RSS of parse_log + to_json in a fresh interpreter, and of the imports alone: ``VmHWM`` of
    /proc/self/status (the high-water mark of the interpreter's own address space; ``ru_maxrss`` is not used where
    /proc exists because Linux carries it over fork+exec, so a child started by this process would report this
    process's size); KiB."""
    src = str(Path(__file__).resolve().parents[1] / "src")
    head = (
        "import resource, sys; sys.path.insert(0, sys.argv[2]); from bridgebench.logs.parser import parse_log, to_json"
    )
    rss = (
        "next((int(x.split()[1]) for x in open('/proc/self/status') if x.startswith('VmHWM')), None) "
        "if sys.platform.startswith('linux') else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss"
    )

    def run(body: str) -> list[str]:
        cmd = [sys.executable, "-c", f"{head}; {body}", str(path), src]
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.split()

    steps, kib = run(f"j = to_json(parse_log(sys.argv[1])); print(j['steps'], {rss})")
    base = run(f"print(0, {rss})")[1]
    return (
        f"peak RSS {int(kib) / 1024:.0f} MiB for a {os.path.getsize(path) / 1e6:.0f} MB log with {int(steps):,} "
        f"steps (interpreter + imports alone: {int(base) / 1024:.0f} MiB)"
    )


def bench(mode: str, size_mb: float, repeat: int, keep: Path | None, memory: bool = False) -> None:
    with tempfile.TemporaryDirectory(prefix="bench_logparse_") as tmp:
        path = (keep or Path(tmp)) / f"synthetic_{mode}_{RANKS}rank.log"
        t0 = time.perf_counter()
        total = generate(path, size_mb, mode)
        gen_s = time.perf_counter() - t0
        size = os.path.getsize(path)
        times: list[float] = []
        cpu: list[float] = []
        j = parsed = None
        for _ in range(repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            parsed = parse_log(path)
            j = to_json(parsed)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        assert parsed is not None and j is not None
        ok = (
            j["steps"] == total
            and j["outcome"] == "completed"
            and j["format"] == "megatron_bridge"
            and j["quality"] == "steady"
            and parsed.memory.get("ranks_reported") == list(range(RANKS))
            and (mode != "dense" or parsed.duplicates_dropped == 0)
        )
        mb = size / 1e6
        print(
            f"mode={mode:9s} size={mb:8.1f} MB iterations={total:,} (generated in {gen_s:.1f} s)\n"
            f"  parse+to_json: best {min(times):.2f} s = {mb / min(times):.1f} MB/s, median "
            f"{statistics.median(times):.2f} s = {mb / statistics.median(times):.1f} MB/s over {repeat} run(s); "
            f"CPU time best {min(cpu):.2f} s = {mb / min(cpu):.1f} MB/s (load avg {os.getloadavg()[0]:.1f}, "
            f"{os.cpu_count()} CPUs)\n"
            f"  {_grep(path)}\n"
            f"  result: steps={j['steps']} outcome={j['outcome']} format={j['format']} quality={j['quality']} "
            f"step_time_s={j['step_time_s']:.4f} tflops_per_gpu={j['tflops_per_gpu']:.1f} "
            f"iteration_ranks={len(parsed.iteration_ranks)} check={'OK' if ok else 'MISMATCH'}"
        )
        if memory:
            print(f"  {_peak_rss(path)}")
        if not ok:
            raise SystemExit(f"unexpected parse result: { {k: v for k, v in j.items() if k != 'series'} }")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=float, default=200.0)
    ap.add_argument("--mode", choices=["realistic", "dense", "both"], default="realistic")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", type=Path, default=None, help="write the log here instead of a temp dir")
    ap.add_argument("--memory", action="store_true", help="also measure peak RSS of a parse in a fresh process")
    args = ap.parse_args(argv)
    modes = ["realistic", "dense"] if args.mode == "both" else [args.mode]
    for mode in modes:
        bench(mode, args.size_mb, args.repeat, args.keep, args.memory)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
