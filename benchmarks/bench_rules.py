"""Throughput of bridgebench.config.rules.check, the validity checker sweeps run on every point before building
anything.

Generates ``--n`` random points (seeded; parallel sizes, batch sizes, layer / head / expert counts, Muon and precision
flags, and a pipeline layout string on ``--layout-share`` of them, drawn from a pool of ``--layout-pool`` distinct
strings), pins the process to one CPU core, and prints configs/s (best and median of ``--repeat`` passes) for:

* ``check``: ``check(point)`` on ready-made points;
* ``Point + check``: building the point from keyword arguments, then ``check`` (what a sweep over numbers does);
* ``from_config + check``: ``Point.from_config(cfg)`` on already composed Hydra configs, then ``check``;
* ``Hydra compose``: ``bridgebench.config.compose`` itself, for comparison (``--compose`` configs).

    .venv/bin/python benchmarks/bench_rules.py
    .venv/bin/python benchmarks/bench_rules.py --n 200000 --repeat 5 --compose 40
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bridgebench.config.rules import Point, check  # noqa: E402


def random_layout(rng: random.Random) -> tuple[str, int, int]:
    """(layout, pp, num_layers): a Megatron-Bridge-style layout string, sometimes off by one layer."""
    pp = rng.choice([2, 4, 8])
    vp = rng.choice([1, 2, 4])
    per = rng.choice([1, 2, 3, 4])
    stages = pp * vp
    num_layers = stages * per - 1 + rng.choice([0, 0, 0, 1])
    layout = f"Et*{per - 1}|" + f"(t*{per}|)*{stages - 2}" + f"t*{per}L"
    return layout, pp, num_layers


def random_points(n: int, seed: int, layout_share: float, layout_pool: int) -> list[dict]:
    rng = random.Random(seed)
    pool = [random_layout(rng) for _ in range(layout_pool)]
    out = []
    for _ in range(n):
        tp = rng.choice([1, 2, 4, 8])
        pp = rng.choice([1, 2, 4, 8])
        cp = rng.choice([1, 1, 2])
        moe = rng.random() < 0.7
        ep = rng.choice([1, 2, 4, 8, 16, 32, 64]) if moe else 1
        num_gpus = rng.choice([8, 16, 32, 64, 96, 128, 256, 512, 1024, 12, 24])
        layout = None
        num_layers = rng.choice([32, 48, 61, 64, 80, 94, 126])
        vp = rng.choice([None, None, 2, 4]) if pp > 1 else None
        if rng.random() < layout_share:
            layout, pp, num_layers = rng.choice(pool)
            vp = None
        muon = rng.random() < 0.5
        precision = rng.choice(["bf16", "fp8_cs", "mxfp8", "nvfp4"])
        out.append(
            dict(
                num_gpus=num_gpus,
                gpus_per_node=rng.choice([4, 8]),
                tp=tp,
                pp=pp,
                vp=vp,
                cp=cp,
                ep=ep,
                etp=rng.choice([None, 1]),
                mbs=rng.choice([1, 2, 4]),
                gbs=rng.choice([256, 512, 1024, 4096, 8192]),
                seq_length=rng.choice([4096, 8192]),
                num_layers=num_layers,
                mtp_num_layers=rng.choice([0, 0, 1]),
                num_attention_heads=rng.choice([32, 64, 128]),
                num_query_groups=rng.choice([None, 4, 8, 64]),
                num_moe_experts=rng.choice([128, 256, 384]) if moe else None,
                pipeline_model_parallel_layout=layout,
                sequence_parallel=tp > 1,
                optimizer="dist_muon" if muon else "adam",
                use_distributed_optimizer=not muon or rng.random() < 0.1,
                ddp_use_distributed_optimizer=not muon or rng.random() < 0.1,
                overlap_param_gather=not muon or rng.random() < 0.1,
                fp8_param_gather=precision in ("fp8_cs", "mxfp8") and not muon,
                reuse_grad_buf_for_mxfp8_param_ag=precision == "mxfp8" and not muon,
                precision=precision,
            )
        )
    return out


def rate(fn, count: int, repeat: int) -> tuple[float, float]:
    """(best, median) items/s of ``fn()`` processing ``count`` items."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return count / min(times), count / statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000, help="random points")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layout-share", type=float, default=0.2, help="share of points with a layout string")
    ap.add_argument("--layout-pool", type=int, default=50, help="distinct layout strings")
    ap.add_argument("--compose", type=int, default=20, help="Hydra composes to time")
    ap.add_argument("--from-config", type=int, default=20_000, help="from_config + check calls to time")
    args = ap.parse_args()

    if hasattr(os, "sched_setaffinity"):
        core = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {core})
        print(f"pinned to CPU core {core}")
    print(f"python {sys.version.split()[0]}")

    kwargs = random_points(args.n, args.seed, args.layout_share, args.layout_pool)
    points = [Point.from_flat(**kw) for kw in kwargs]
    valid = sum(not check(p) for p in points)
    print(
        f"{args.n} random points, {valid / args.n:.1%} valid, {args.layout_share:.0%} with a layout "
        f"({args.layout_pool} distinct strings)"
    )

    def run_check():
        for p in points:
            check(p)

    def run_build_check():
        for kw in kwargs:
            check(Point.from_flat(**kw))

    best, med = rate(run_check, args.n, args.repeat)
    print(f"check                  : {best:12,.0f} configs/s best, {med:12,.0f} median  ({1e6 / best:.2f} us/config)")
    best, med = rate(run_build_check, args.n, args.repeat)
    print(f"Point(...) + check: {best:12,.0f} configs/s best, {med:12,.0f} median  ({1e6 / best:.2f} us/config)")

    from bridgebench.config.compose import compose, group_options, recipe_releases

    overrides = [
        [f"recipe={p}", f"release={recipe_releases(p)[-1]}", f"optimizer={o}"]
        for p in group_options("recipe")
        for o in ("adamw", "muon")
    ]
    compose(overrides[0])  # warm Hydra up
    todo = [overrides[i % len(overrides)] for i in range(args.compose)]
    t0 = time.perf_counter()
    cfgs = [compose(o) for o in todo]
    compose_rate = len(todo) / (time.perf_counter() - t0)

    m = args.from_config

    def run_from_config():
        for i in range(m):
            check(Point.from_config(cfgs[i % len(cfgs)]))

    best, med = rate(run_from_config, m, max(1, args.repeat // 2))
    print(
        f"from_config + check    : {best:12,.0f} configs/s best, {med:12,.0f} median  "
        f"({1e6 / best:.1f} us/config; {len(cfgs)} composed configs)"
    )
    print(
        f"Hydra compose          : {compose_rate:12,.1f} configs/s       ({1e3 / compose_rate:.1f} ms/config, "
        f"{len(todo)} composes)"
    )


if __name__ == "__main__":
    main()
