"""The replay payload: a job that prints a Megatron-Bridge training log whose step times are a real measurement of
its configuration, so a sweep's whole loop (plan -> submit -> logs -> records -> refit) runs on a cluster without
GPUs.

``python -m bridgebench.payloads.replay --config <job config> [--out DIR]`` reads only its job config: the table row
was looked up when the run was planned (``job.replay.row``, :func:`bridgebench.results.replay_table.lookup`), so the
node reads nothing of the submitting machine. It prints, in the formats of Megatron-Bridge v0.6.0
``src/megatron/bridge/training/utils/train_utils.py`` (the ``Step Time : <s>s GPU utilization: <x>MODEL_TFLOP/s/GPU``
line, lines 1135-1141, and the iteration record, lines 1176-1222) and ``train.py`` (``[after training is done]``):

* a row that ran: ``job.replay.steps`` iterations; iteration 1 is a warm-up at 3x the row's step time (Megatron's first
  iteration builds kernels and buffers, as in tests/data/logs/mbridge_llama_7b_cp2_8rank_20iter_out1.log), the others
  the row's step time x ``exp(N(0, s^2))`` with ``s = job.replay.noise_pct / 100`` -- log-normal noise from numpy's
  PCG64 seeded with ``(job.replay.seed, the run id's digits)``, stated in the log's first lines and in the
  ``BRIDGEBENCH_REPLAY`` marker; exit 0;
* a row the table says did not fit: iteration 1, then ``torch.OutOfMemoryError: CUDA out of memory`` (the
  message of torch's caching allocator); exit 1;
* no row: ``ValueError: replay: table <set> has no row for <configuration>``; exit 1.

``job.replay.sleep_s`` sleeps that long per iteration (0 by default: the log says how long the real step took, the
job need not take it), so tests can interrupt a sweep while jobs run.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import typer

from bridgebench.payloads.markers import announce_start

REPLAY = "BRIDGEBENCH_REPLAY "
app = typer.Typer(add_completion=False)


def _seed(seed: int, run_id: str) -> list[int]:
    digits = "".join(ch for ch in run_id if ch.isdigit())[:18]
    return [int(seed), int(digits or 0)]


def step_times(step_s: float, steps: int, noise_pct: float, seed: int, run_id: str) -> list[float]:
    """Per-iteration step times (s): a 3x warm-up, then ``step_s`` x log-normal noise (see the module docstring)."""
    import numpy as np

    rng = np.random.default_rng(_seed(seed, run_id))
    s = max(float(noise_pct), 0.0) / 100.0
    noise = rng.normal(0.0, s, size=max(steps - 1, 0)) if s > 0 else np.zeros(max(steps - 1, 0))
    return [3.0 * step_s] + [float(step_s * math.exp(x)) for x in noise]


def _record(it: int, steps: int, gbs: int, t_s: float, when: datetime) -> str:
    lr = 3.0e-4 * min(1.0, it / 10)
    loss = 11.5 - 0.1 * it
    return (
        f" [{when:%Y-%m-%d %H:%M:%S}] iteration {it:8d}/{steps:8d} | consumed samples: {it * gbs:12d} | "
        f"elapsed time per iteration (ms): {1e3 * t_s:.1f} | learning rate: {lr:.6E} | global batch size: "
        f"{gbs:5d} | lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: 1.000 | number of skipped iterations:   0 | "
        "number of nan iterations:   0 |"
    )


def run(config_path: Path, out: Path | None = None) -> int:
    """Print the replayed log on stdout; returns the exit code (0 ran, 1 out of memory or no row)."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(config_path)
    rp = cfg.job.replay
    row = OmegaConf.to_container(rp.row, resolve=True) if rp.row is not None else None
    run_id = os.environ.get("BRIDGEBENCH_RUN_ID") or ""
    gbs, n = int(cfg.train.global_batch_size), int(cfg.num_gpus)
    steps = max(int(rp.steps), 2)
    say = sys.stdout.write
    info = {"table": rp.table, "row": row.get("row") if row else None, "status": row.get("status") if row else None,
            "noise_pct": float(rp.noise_pct), "seed": int(rp.seed), "run_id": run_id, "steps": steps}  # fmt: skip
    say(
        f"bridgebench replay payload: no training runs; step times replay {rp.table} row {info['row']} "
        f"({'status ' + str(info['status']) if row else 'no row'}) with log-normal noise of {float(rp.noise_pct)} % "
        f"(numpy PCG64, seed {_seed(int(rp.seed), run_id)})\n"
    )
    say(f"> model {cfg.model.name}, {n} x {cfg.gpu.name} (replayed), {cfg.precision.name}, GBS {gbs}\n")
    say("Setting rerun_state_machine.current_iteration to 0...\nTraining ...\n")
    sys.stdout.flush()
    when = datetime(2026, 1, 1, tzinfo=UTC)
    if row is None:
        say(REPLAY + json.dumps(info, separators=(",", ":")) + "\n")
        say(
            'Traceback (most recent call last):\n  File "bridgebench/payloads/replay.py", in run\n'
            f"ValueError: replay: table {rp.table} has no row for this configuration (TP "
            f"{cfg.model.tensor_model_parallel_size} PP {cfg.model.pipeline_model_parallel_size} VP "
            f"{cfg.model.virtual_pipeline_model_parallel_size} CP {cfg.model.context_parallel_size} EP "
            f"{cfg.model.expert_model_parallel_size} MBS {cfg.train.micro_batch_size} GBS {gbs}, {n} GPUs)\n"
        )
        sys.stdout.flush()
        return 1
    flops = float(row.get("flops_per_step") or 0.0)
    if row.get("status") == "oom":
        say(REPLAY + json.dumps(info, separators=(",", ":")) + "\n")
        say(
            "[rank0]: Traceback (most recent call last):\n[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried "
            "to allocate 2.00 GiB. (replayed: the table says this configuration did not fit)\n"
        )
        sys.stdout.flush()
        return 1
    times = step_times(float(row["step_time_s"]), steps, float(rp.noise_pct), int(rp.seed), run_id)
    info["step_times_s"] = times
    say(REPLAY + json.dumps(info, separators=(",", ":")) + "\n")
    for it, t in enumerate(times, 1):
        when += timedelta(seconds=t)
        tflops = flops / t / n / 1e12 if flops else 0.0
        say(f"Step Time : {t:.2f}s GPU utilization: {tflops:.1f}MODEL_TFLOP/s/GPU\n")
        say(_record(it, steps, gbs, t, when) + "\n")
        sys.stdout.flush()
        if float(rp.get("sleep_s", 0.0) or 0.0) > 0:
            time.sleep(float(rp.sleep_s))
    say(f"[after training is done] datetime: {when:%Y-%m-%d %H:%M:%S} \n")
    sys.stdout.flush()
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "replay.json").write_text(json.dumps(info))
    return 0


@app.command()
def main(
    config: Path = typer.Option(..., help="the job's config (configs/config.yaml in the job folder)"),
    out: Path | None = typer.Option(None, help="the job's out folder (replay.json)"),
) -> None:
    announce_start("replay")
    raise typer.Exit(run(config, out))


if __name__ == "__main__":
    app()
