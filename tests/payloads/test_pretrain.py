"""The compute-node entrypoint, verified up to the pretrain() call (training itself needs GPUs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from bridgebench.config.compose import compose
from bridgebench.config.hashing import config_hash

pytestmark = pytest.mark.megatron


def _write(tmp_path, overrides):
    path = tmp_path / "config.yaml"
    path.write_text(OmegaConf.to_yaml(compose(overrides), resolve=True))
    return path


def test_prepare_builds_the_container_and_resolves_pretrain(tmp_path):
    from bridgebench.mbridge import setup

    setup()  # the offline HF cache and the TE stand-in before megatron.bridge is imported
    from megatron.bridge.training.gpt_step import forward_step

    from bridgebench.payloads import pretrain as entrypoint
    from bridgebench.payloads.pretrain import prepare

    overrides = ["recipe=qwen3_30b_a3b_gb300_mxfp8", "optimizer=muon"]
    prepared = prepare(_write(tmp_path, overrides))
    assert prepared.forward_step is forward_step
    # pretrain() is resolved from Megatron-Bridge's real module (importing it needs nvidia-resiliency-ext: GPU image)
    import importlib.util

    assert importlib.util.find_spec(entrypoint.PRETRAIN[0]) is not None
    assert prepared.container.optimizer.optimizer == "dist_muon"
    assert prepared.container.train.global_batch_size == 512
    assert prepared.info["config_hash"] == config_hash(compose(overrides))
    assert prepared.info["megatron_bridge"].startswith("0.6.2") and prepared.info["api"] == "0.6"


def test_dry_run_command_prints_versions_and_hash(tmp_path):
    path = _write(tmp_path, ["recipe=kimi_k2_gb300_mxfp8", "release=26.02.01", "optimizer=muon"])
    out_dir = tmp_path / "jobs" / "run-r0" / "a0" / "out"  # what launch/jobspec.py build_job exports
    res = subprocess.run(
        [sys.executable, "-m", "bridgebench.payloads.pretrain", "--config", str(path), "--dry-run"],
        capture_output=True,
        text=True,
        env={**os.environ, "BRIDGEBENCH_OUT_DIR": str(out_dir)},
    )
    assert res.returncode == 0, res.stderr[-2000:]
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("BRIDGEBENCH_RUN "))
    info = json.loads(line.split(" ", 1)[1])
    # Kimi K2's first recipe is 26.02.01's (Megatron-Bridge v0.3.1), so its container image too
    assert info["megatron_core"] and info["planned_container_image"] == "nvcr.io/nvidia/nemo:26.02.01"
    # TensorBoard events in the attempt's out folder, where collect reads them (launch/run_metrics.py)
    assert any(p.startswith(f"logger.tensorboard_dir = {out_dir}/tensorboard ") for p in info["policies"])


def test_missing_config_is_a_clear_error(tmp_path):
    from bridgebench.payloads.pretrain import prepare

    with pytest.raises(FileNotFoundError, match="no resolved config"):
        prepare(tmp_path / "nope.yaml")
