"""Peak memory of ``collect`` on one large log (issue 17: a 500 MB log peaked at 1.0 GB; target: under 150 MB).

Builds, in a temporary folder, a ledger with one finished optimizer-step attempt whose job folder holds one log of
``--size-mb`` MB -- ``--shape lines``: Megatron iteration lines among long NCCL/warning noise lines (a verbose
training log); ``--shape one-line``: a single line without a newline or carriage return (the issue's case) -- plus
the plan's ``config.yaml``; then runs, each in a fresh process, ``collect`` (the log parsed, its marker found, the log
copied into the results store) and ``logs parse`` of the same file, and prints each one's peak resident memory
(``ru_maxrss`` of the child) beside the interpreter's own baseline (the same imports, no work).

    .venv/bin/python benchmarks/bench_collect_memory.py                      # 500 MB, both shapes
    .venv/bin/python benchmarks/bench_collect_memory.py --size-mb 100 --shape one-line
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOISE = (
    "0: node001:12345:12399 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read "
    + "x" * 400
    + " UserWarning: an autograd kernel was not registered to the Autograd key(s)\n"
).encode()


def make_log(path: Path, size: int, shape: str) -> None:
    with open(path, "wb") as f:
        if shape == "one-line":
            block = b" [progress " + b"#" * 1000 + b"]"  # no newline, no carriage return: truly one line
            for _ in range(size // len(block)):
                f.write(block)
            return
        it, written = 0, 0
        per_iter = max(1, size // 2000 // len(NOISE))  # ~2,000 iterations whatever the size
        while written < size:
            it += 1
            line = (
                f" [2026-01-16 07:32:24] iteration {it:8d}/    2000 | consumed samples: {it * 512:12d} | "
                f"elapsed time per iteration (ms): {9089.0 + (it % 7):.1f} | throughput per GPU (TFLOP/s/GPU): "
                f"663.5 | learning rate: 3.000000E-05 | global batch size:   512 | lm loss: 8.100000E+00 | "
                f"loss scale: 1.0 | grad norm: 0.042 | number of skipped iterations:   0 | "
                f"number of nan iterations:   0 |\n"
            ).encode()
            chunk = line + NOISE * per_iter
            f.write(chunk)
            written += len(chunk)
        f.write(b'BRIDGEBENCH_OPTSTEP {"model": "qwen3_30b_a3b", "device": "cpu"}\n')


def measure(code: str, env: dict) -> tuple[float, float, str]:
    """Peak RSS of ``code`` alone: run in a fresh grandchild so earlier children do not mask it."""
    wrapper = (
        "import resource, subprocess, sys, time\n"
        f"t0 = time.monotonic(); r = subprocess.run([sys.executable, '-c', {code!r}], capture_output=True, text=True)\n"
        "assert r.returncode == 0, r.stderr[-3000:]\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, time.monotonic() - t0, "
        "(r.stdout.strip().splitlines() or ['-'])[-1].replace(' ', '_'))\n"
    )
    res = subprocess.run([sys.executable, "-c", wrapper], env=env, capture_output=True, text=True)
    if res.returncode:
        raise SystemExit(f"child failed:\n{res.stderr[-3000:]}")
    mb, wall, last = res.stdout.split()
    return float(mb), float(wall), last


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=float, default=500)
    ap.add_argument("--shape", choices=("lines", "one-line", "both"), default="both")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    print(f"load average before: {open('/proc/loadavg').read().split()[:3]} ({os.cpu_count()} CPUs)")
    base_code = "import bridgebench.launch.collect, bridgebench.logs.parser, bridgebench.results.store"
    base, _, _ = measure(base_code, env)
    print(f"baseline (interpreter + the imports, no work): {base:.0f} MB")
    for shape in ("lines", "one-line") if args.shape == "both" else (args.shape,):
        tmp = Path(tempfile.mkdtemp(prefix="bench-collect-"))
        try:
            jobs, plan = tmp / "jobs" / "abc123-r0" / "a0", tmp / "plan" / "run"
            (jobs / "experiments" / "run").mkdir(parents=True)
            (jobs / "out").mkdir()
            plan.mkdir(parents=True)
            log = jobs / "experiments" / "run" / "log-acct-run-r0-a0_7_0.out"
            t0 = time.monotonic()
            make_log(log, int(args.size_mb * 1e6), shape)
            size = log.stat().st_size
            print(f"\n[{shape}] log {size / 1e6:.0f} MB written in {time.monotonic() - t0:.1f} s")
            setup = (
                "import sys, time\n"
                "from omegaconf import OmegaConf\n"
                "from bridgebench.config.compose import compose\n"
                "from bridgebench.launch.ledger import Attempt, Ledger\n"
                f"open({str(plan / 'config.yaml')!r}, 'w').write(OmegaConf.to_yaml(compose(['experiment=optstep_local']), resolve=True))\n"  # noqa: E501
                f"Ledger({str(tmp / 'ledger.sqlite')!r}).add(Attempt(run_id='abc123-r0', attempt=0, name='run', "
                "job_type='optstep', state='COMPLETED', submitted_at=time.time(), updated_at=time.time(), "
                f"slurm_job_id='7', plan_dir={str(plan)!r}, job_dir={str(jobs)!r}, uid='u1', cluster_id='bench'))\n"
            )
            subprocess.run([sys.executable, "-c", setup], env=env, check=True)
            collect_code = (
                "from bridgebench.launch.collect import collect\n"
                "from bridgebench.launch.ledger import Ledger\n"
                "from bridgebench.results.store import ResultStore\n"
                f"n = collect(Ledger({str(tmp / 'ledger.sqlite')!r}), ResultStore({str(tmp / 'runs')!r}))\n"
                "print('added', n)\n"
            )
            mb, wall, last = measure(collect_code, env)
            print(f"  collect:    peak RSS {mb:.0f} MB ({mb - base:+.0f} MB over the baseline), {wall:.1f} s, {last}")
            parse_code = (
                "from bridgebench.logs.parser import parse_log\n"
                f"p = parse_log({str(log)!r}); print('steps', p.step_count)\n"
            )
            mb2, wall2, last2 = measure(parse_code, env)
            over = mb2 - base
            print(f"  logs parse: peak RSS {mb2:.0f} MB ({over:+.0f} MB over the baseline), {wall2:.1f} s, {last2}")
            stored = list((tmp / "runs" / "blobs").rglob("*"))
            blob = max((p.stat().st_size for p in stored if p.is_file()), default=0)
            print(f"  the log's copy in the store: {blob / 1e6:.0f} MB (same size: {blob == size})")
            if mb > 150:
                print(f"  NOTE: collect peaked above the 150 MB target ({mb:.0f} MB)")
        finally:
            if args.keep:
                print(f"  kept {tmp}")
            else:
                shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nload average after: {open('/proc/loadavg').read().split()[:3]}")


if __name__ == "__main__":
    main()
