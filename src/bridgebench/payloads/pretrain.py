"""Compute-node entrypoint: run on every rank inside the NeMo container (``srun`` with pyxis).

``python -m bridgebench.payloads.pretrain --config /nemo_run/configs/config.yaml`` loads the resolved bridgebench
config ``bridgebench plan`` wrote into the job folder (launch/nodepaths.py), builds the Megatron-Bridge
``ConfigContainer`` for the container's own Megatron-Bridge version (field names translated by
``recipes/compat.py``), logs versions and the config hash, and calls Megatron-Bridge's
``pretrain()`` with the GPT forward step on mock data (the recipes' default when no data path is given) for
``train.train_iters`` steps.

Verified off-GPU (tests/test_entrypoint.py): everything up to the ``pretrain()`` call -- loading, building,
validation, version and hash logging, resolving the GPT forward step. Not verified here: importing
``megatron.bridge.training.pretrain`` (it needs nvidia-resiliency-ext, whose wheels need glibc 2.39) and the call
itself, i.e. training (GPUs, NCCL, Transformer Engine). Neither has run in this repository's CI.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import typer
from omegaconf import OmegaConf

log = logging.getLogger("bridgebench.entrypoint")
app = typer.Typer(add_completion=False)


PRETRAIN = ("megatron.bridge.training.pretrain", "pretrain")
FORWARD_STEP = ("megatron.bridge.training.gpt_step", "forward_step")


@dataclass(kw_only=True)
class Prepared:
    """Everything the rank needs to start training. ``pretrain`` is imported on first use: its module imports
    nvidia-resiliency-ext, which the NeMo container has and CPU-only machines (glibc < 2.39) cannot install."""

    container: Any
    forward_step: Callable
    info: dict[str, Any]

    @property
    def pretrain(self) -> Callable:
        import importlib

        return getattr(importlib.import_module(PRETRAIN[0]), PRETRAIN[1])


def prepare(config_path: Path) -> Prepared:
    """Load ``config_path``, build and validate the ConfigContainer, and resolve ``pretrain`` / ``forward_step``.

    Raises:
        FileNotFoundError: no config at ``config_path``.
        bridgebench.mbridge.build.BuildError: Megatron-Bridge rejects the configuration.
    """
    config_path = Path(config_path)
    if not config_path.exists():
        raise FileNotFoundError(f"no resolved config at {config_path}")
    cfg = OmegaConf.load(config_path)
    from bridgebench.mbridge import setup
    from bridgebench.mbridge.build import build, config_hash

    setup()  # offline HF cache (and the TE stand-in only where TE is missing) before megatron is imported

    import megatron.bridge
    import megatron.core
    import torch

    from bridgebench.mbridge.build import DEFAULT_OUT_DIR, OUT_DIR_ENV

    # the attempt's output folder (launch/jobspec.py build_job exports it): TensorBoard events go under it
    result = build(cfg, out_dir=os.environ.get(OUT_DIR_ENV, DEFAULT_OUT_DIR))
    import importlib

    forward_step = getattr(importlib.import_module(FORWARD_STEP[0]), FORWARD_STEP[1])

    info = {
        "config": str(config_path),
        # the plan's hash (exported by the sbatch script); the job's config.yaml lacks the submit side's sections
        # (launch/nodepaths.py), so its own hash differs from the plan's for every run
        "config_hash": os.environ.get("BRIDGEBENCH_CONFIG_HASH") or config_hash(cfg),
        "megatron_bridge": megatron.bridge.__version__,
        "megatron_core": megatron.core.__version__,
        "torch": torch.__version__,
        "planned_container_image": str(cfg.release.container_image),
        "nvidia_pytorch_version": os.environ.get("NVIDIA_PYTORCH_VERSION"),
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",  # what ran (records)
        "api": result.api,
        "skipped_checks": result.skipped_checks,
        "policies": result.policies,
        "rank": int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0"))),
        "world_size": int(os.environ.get("WORLD_SIZE", os.environ.get("SLURM_NTASKS", "1"))),
    }
    return Prepared(container=result.container, forward_step=forward_step, info=info)


@app.command()
def main(
    config: Path = typer.Option(..., "--config", help="resolved config.yaml written by `bridgebench plan`"),
    dry_run: bool = typer.Option(False, "--dry-run", help="build and validate, print versions, do not train"),
):
    """Build the run's ConfigContainer and call Megatron-Bridge pretrain() (mock data)."""
    from bridgebench.payloads.markers import RUN, announce_start

    if int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0"))) == 0:
        announce_start("pretrain")  # collect tells a payload that never started (payloads/markers.py)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    prepared = prepare(config)
    if prepared.info["rank"] == 0:
        print(RUN + json.dumps(prepared.info), flush=True)
    if dry_run:
        return
    prepared.pretrain(prepared.container, prepared.forward_step)


if __name__ == "__main__":
    app()
