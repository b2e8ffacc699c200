"""Wall and CPU time of the ``bridgebench`` commands a newcomer runs first, with the load average beside each.

Each command runs in a fresh process (``python -m bridgebench.cli ...``, the console script's code path) with its
outputs under a temporary folder (``BRIDGEBENCH_TABLES``, ``BRIDGEBENCH_PLANS``, ``BRIDGEBENCH_SWEEPS``,
``BRIDGEBENCH_RESULTS``: nothing in the repository is written); CPU time is the child's user + system time
(``resource.getrusage(RUSAGE_CHILDREN)`` deltas), the load average is ``/proc/loadavg``'s 1-minute figure read just
before and just after. The persistent compose cache (``BRIDGEBENCH_CACHE``) is cleared before the first command,
so the first timing of a command that composes is a cold one; ``--repeat 2`` shows the warm figure beside it.

"Each further run in the same process" of ``plan``: ``plan experiment=table1`` plans 4 runs in one process; a child
process runs the plan command's code with a progress hook that stamps wall and CPU time at each run's "[i/4]
checking" message, so each run's own cost (compose, rules, ConfigContainer build, sbatch render) is printed; the first
includes the Megatron-Bridge import.

Targets (issue 18, on a quiet machine): table <= 5 s, check-published <= 5 s, compare <= 5 s, plan of one run <= 15 s
and each further run <= 2 s, diff-config <= 20 s, --help <= 1 s.

    .venv/bin/python benchmarks/bench_cli.py                   # every command once
    .venv/bin/python benchmarks/bench_cli.py --repeat 2        # cold, then warm (the compose cache kept)
    .venv/bin/python benchmarks/bench_cli.py --only table,plan # a subset (names as in COMMANDS)
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: name -> (arguments after ``bridgebench``, target wall seconds or None)
COMMANDS: dict[str, tuple[list[str], float | None]] = {
    "help": (["--help"], 1.0),
    "list": (["list", "releases"], None),
    "flops": (["flops", "recipe=kimi_k2_gb300_mxfp8", "release=26.02.01", "optimizer=muon"], None),
    "table": (["table"], 5.0),
    "check-published": (["check-published"], 5.0),
    "compare": (["compare", "model=qwen3_30b_a3b", "gpu=gb200"], 5.0),
    "plan": (["plan", "recipe=qwen3_30b_a3b_gb300_mxfp8"], 15.0),
    "plan-table1": (["plan", "experiment=table1"], None),
    "diff-config": (
        [
            "diff-config",
            "recipe=qwen3_30b_a3b_gb300_mxfp8 optimizer=adamw",
            "recipe=qwen3_30b_a3b_gb300_mxfp8 optimizer=muon",
        ],
        20.0,
    ),
    "muon-cost": (["muon-cost", "recipe=qwen3_30b_a3b_gb300_mxfp8"], None),
}


def _load1() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def run_one(args: list[str], env: dict[str, str], root: Path = ROOT) -> tuple[float, float, float, float, int]:
    """(wall s, CPU s, load before, load after, exit code) of ``bridgebench ARGS`` in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load0 = _load1()
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "bridgebench.cli", *args], env=env, cwd=root, capture_output=True, text=True
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode:
        sys.stderr.write(f"bridgebench {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-2000:]}\n")
    return wall, cpu, load0, _load1(), proc.returncode


_PER_RUN = r"""
import json, sys, tempfile, time
from pathlib import Path
try:
    from bridgebench import debuglog  # a checkout without it (--root of an older one): its output as it was
    debuglog.configure(verbose=False)
except ImportError:
    pass
from bridgebench.launch.plan import plan
marks = []
def say(msg):
    if "] checking" in msg:
        marks.append((time.perf_counter(), time.process_time()))
t0 = (time.perf_counter(), time.process_time())
plan(sys.argv[1:], Path(tempfile.mkdtemp()) / "p", progress=say)
end = (time.perf_counter(), time.process_time())
edges = marks + [end]
print(json.dumps([[b[0] - a[0], b[1] - a[1]] for a, b in zip(edges[:-1], edges[1:])]))
"""


def per_run(args: list[str], env: dict[str, str], root: Path = ROOT) -> list[tuple[float, float]]:
    """(wall s, CPU s) of each run of one ``plan`` process, in order (see the module docstring)."""
    import json

    proc = subprocess.run([sys.executable, "-c", _PER_RUN, *args], env=env, cwd=root, capture_output=True, text=True)
    if proc.returncode:
        sys.stderr.write(proc.stderr[-2000:])
        return []
    return [tuple(x) for x in json.loads(proc.stdout.strip().splitlines()[-1])]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=1, help="runs per command (the first one cold)")
    ap.add_argument("--only", default="", help="comma list of command names (default: all)")
    ap.add_argument("--keep-cache", action="store_true", help="do not clear the compose cache first")
    ap.add_argument("--root", type=Path, default=ROOT, help="the checkout to time (default: this one), e.g. main")
    ns = ap.parse_args()
    root = ns.root.resolve()
    names = [n for n in ns.only.split(",") if n] or list(COMMANDS)
    unknown = set(names) - set(COMMANDS)
    if unknown:
        ap.error(f"unknown command names {sorted(unknown)}; known: {', '.join(COMMANDS)}")

    tmp = Path(tempfile.mkdtemp(prefix="bench_cli_"))
    env = dict(os.environ)
    env["PYTHONPATH"] = str(root / "src") + os.pathsep + env.get("PYTHONPATH", "")
    for var, sub in (
        ("BRIDGEBENCH_TABLES", "tables"),
        ("BRIDGEBENCH_PLANS", "plans"),
        ("BRIDGEBENCH_SWEEPS", "sweeps"),
        ("BRIDGEBENCH_RESULTS", "runs"),
        ("BRIDGEBENCH_LEDGER", "ledger.sqlite"),
    ):
        env[var] = str(tmp / sub)
    env.setdefault("COLUMNS", "200")
    if not ns.keep_cache:
        env["BRIDGEBENCH_CACHE"] = str(tmp / "cache")
    print(f"bridgebench CLI timings of {root} ({os.cpu_count()} CPUs; load = 1-min load average before -> after)")
    print(f"{'command':<16}{'run':>4}{'wall s':>9}{'CPU s':>8}{'target':>8}  {'load':<13} ok")
    walls: dict[str, list[float]] = {}
    cpus: dict[str, list[float]] = {}
    failed = 0
    try:
        for name in names:
            args, target = COMMANDS[name]
            for i in range(ns.repeat):
                wall, cpu, l0, l1, rc = run_one(args, env, root)
                walls.setdefault(name, []).append(wall)
                cpus.setdefault(name, []).append(cpu)
                ok = "FAIL" if rc else ("yes" if target is None or wall <= target else "SLOW")
                failed += bool(rc)
                print(
                    f"{name:<16}{i + 1:>4}{wall:>9.2f}{cpu:>8.2f}{(f'{target:g}' if target else '-'):>8}  "
                    f"{l0:.2f} -> {l1:.2f}  {ok}",
                    flush=True,
                )
        if "plan-table1" in names:
            l0 = _load1()
            runs = per_run(COMMANDS["plan-table1"][0][1:], env, root)
            for i, (w, c) in enumerate(runs, 1):
                target = None if i == 1 else 2.0
                ok = "-" if target is None else ("yes" if w <= target else "SLOW")
                note = "(includes the Megatron-Bridge import)" if i == 1 else "(a further run, same process)"
                print(f"{'plan run ' + str(i) + '/4':<16}{1:>4}{w:>9.2f}{c:>8.2f}{(target or '-'):>8}  "
                      f"{l0:.2f} -> {_load1():.2f}  {ok} {note}")  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"load average now: {Path('/proc/loadavg').read_text().strip()}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
