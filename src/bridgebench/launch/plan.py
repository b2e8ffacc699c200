"""Plans: one folder per run with the composed config, the Megatron-Bridge ConfigContainer dump and the SLURM script.

``plan(overrides)`` expands the sweep (an experiment's ``hydra.sweeper.params`` and/or ``a=x,y`` overrides), then for
every run, *before writing anything*: composes the config (schema-checked), runs the fast validity rules
(``bridgebench/rules.py``), builds and validates the real Megatron-Bridge ``ConfigContainer`` (``recipes/build.py``)
and renders the sbatch script with nemo-run's ``SlurmExecutor`` dry run (``launch/executor.py``). Only when every
run passes are the folders written (into a temporary directory renamed into place), so bad input writes no plan.

Each run folder holds ``config.yaml`` (the resolved bridgebench config), ``megatron_bridge.yaml`` (the
ConfigContainer dump, built and validated with the locally installed Megatron-Bridge), ``submit.sh`` (the sbatch
script), ``payload.sh`` (what each task runs) and ``run.json`` (summary: GPUs, nodes, parallelism, config hash,
predicted FLOPs).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Callable

from omegaconf import DictConfig, OmegaConf

from bridgebench.config import rules
from bridgebench.config.compose import compose, expand_sweep, run_facts, variant_provenance
from bridgebench.config.hashing import config_hash
from bridgebench.config.run_flops import ns_policy, parallelism, step_flops
from bridgebench.errors import BridgebenchError
from bridgebench.launch import executor as ex
from bridgebench.model.newton_schulz import ns_load
from bridgebench.model.optimizer import OptimizerKind
from bridgebench.paths import REPO_ROOT, load_paths


class PlanError(BridgebenchError):
    """A run of the plan is invalid; the message names the run and the rule. No plan was written."""


@dataclass
class PlannedRun:
    name: str
    overrides: list[str]
    config_hash: str
    num_gpus: int
    nodes: int
    tasks_per_node: int
    tp: int
    pp: int
    vp: int | None
    cp: int
    ep: int
    etp: int | None
    dp: int
    mbs: int
    gbs: int
    seq_length: int
    optimizer: str
    container_image: str
    model_flops_per_step: float
    newton_schulz_flops_per_step: float
    skipped_checks: list[str]
    dir: str = ""
    recipe: str | None = None  # recipe_meta.name (None: no recipe)
    release: str = ""
    #: "nvidia" (Megatron-Bridge's own perf recipe of the release) or "bridgebench" (e.g. Qwen3 30B-A3B Muon)
    variant_of: str = ""
    variant_note: str = ""  # whose configuration this is and where its values come from
    policies: list[str] = field(default_factory=list)  # bridgebench run policies applied (build.apply_policies)
    #: TensorBoard events: <the run's nemo-run job directory>/<job.tensorboard_subdir> (None: off)
    tensorboard_subdir: str | None = None


def nodes_and_tasks(cfg: DictConfig) -> tuple[int, int]:
    """(nodes, tasks per node) of a run: whole nodes of ``gpu.gpus_per_node`` GPUs, or one partial node."""
    per_node = int(cfg.gpu.gpus_per_node)
    if cfg.num_gpus < per_node:
        return 1, int(cfg.num_gpus)
    return int(cfg.num_gpus) // per_node, per_node


def _run_name(cfg: DictConfig, config_hash: str) -> str:
    opt = OptimizerKind(str(cfg.optimizer.optimizer)).family
    return f"{cfg.model.name}-{opt}-{cfg.gpu.name}-{cfg.precision.name}-{config_hash[:8]}"


def plan(
    overrides: list[str], out_dir: Path | None = None, *, progress: Callable[[str], None] | None = None
) -> tuple[Path, list[PlannedRun]]:
    """Validate and write a plan; returns its directory and the runs.

    Raises:
        PlanError: any run failing a rule, Megatron-Bridge's validation, or a launch safety check (nothing written).
        bridgebench.config.ConfigError: bad overrides.
    """
    say = progress or (lambda msg: None)
    sweeps = expand_sweep(list(overrides))
    staged = []
    for i, ov in enumerate(sweeps, 1):
        cfg = compose(ov)
        label = " ".join(ov) or "(defaults)"
        say(f"[{i}/{len(sweeps)}] checking {label}")
        try:
            rules.validate(rules.Point.from_config(cfg))
        except rules.RuleError as err:
            raise PlanError(f"run {label!r} is invalid:\n{err}") from err
        if cfg.job.type not in ("pretrain", "optstep"):
            raise PlanError(f"run {label!r}: job.type must be 'pretrain' or 'optstep', got {cfg.job.type!r}")
        result = None
        if cfg.job.type == "pretrain":
            from bridgebench.mbridge.build import BuildError, build  # imports megatron: only for pretrain jobs

            try:
                result = build(cfg)
            except BuildError as err:
                raise PlanError(f"run {label!r}: {err}") from err
        h = config_hash(cfg)
        name = _run_name(cfg, h)
        try:
            ex.check_name("run name", name)
            ex.quoted_env(OmegaConf.to_container(cfg.env_vars, resolve=True))
            [ex.check_mount(m) for m in cfg.cluster.container_mounts]
        except ex.LaunchConfigError as err:
            raise PlanError(f"run {label!r}: {err}") from err
        staged.append((ov, cfg, result, h, name))

    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    experiment = next((o.split("=", 1)[1] for o in overrides if o.startswith("experiment=")), "adhoc")
    plans_dir = load_paths().plans  # configs/paths: plans
    final = Path(out_dir) if out_dir else plans_dir / f"{experiment}-{stamp}"
    if final.exists() and any(final.iterdir()):
        raise PlanError(f"plan directory {final} exists and is not empty")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".plan-", dir=final.parent))
    runs: list[PlannedRun] = []
    try:
        for ov, cfg, result, h, name in staged:
            say(f"writing {name}")
            run_dir = tmp / name
            run_dir.mkdir()
            (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
            if result is not None:
                result.container.to_yaml(str(run_dir / "megatron_bridge.yaml"))
            nodes, per_node = nodes_and_tasks(cfg)
            container = bool(cfg.cluster.container)
            cfg_on_node = (
                f"{ex.CONTAINER_REPO}/{(final / name / 'config.yaml').relative_to(REPO_ROOT)}"
                if container and final.resolve().is_relative_to(REPO_ROOT)
                else str(final.resolve() / name / "config.yaml")
            )
            from bridgebench.mbridge.build import NODE_JOB_DIR

            env = {
                **OmegaConf.to_container(cfg.env_vars, resolve=True),
                "BRIDGEBENCH_CONFIG_HASH": h,
                # the run's job dir on the node: nemo-run mounts it at /nemo_run, or writes its host path there
                "BRIDGEBENCH_JOB_DIR": NODE_JOB_DIR,
            }
            executor = ex.make_executor(
                cfg.cluster,
                nodes=nodes,
                tasks_per_node=per_node,
                gpus_per_node=int(cfg.gpu.gpus_per_node),
                container_image=str(cfg.release.container_image),
                env=env,
                job_dir_path=ex.job_dir(cfg.cluster) / name,
                segment=ex.segment_for(nodes, int(cfg.gpu.gpus_per_node)),
            )
            command = ex.payload_command(str(cfg.job.type), cfg_on_node, "optstep-out", container)
            script, payload = ex.dry_run_script(
                executor,
                command=command,
                name=name.replace(".", "_"),
                experiment=experiment,
                base_dir=run_dir / ".nemo_run",
            )
            shutil.rmtree(run_dir / ".nemo_run", ignore_errors=True)
            (run_dir / "submit.sh").write_text(script)
            (run_dir / "payload.sh").write_text(payload)
            facts = run_facts(cfg)
            provenance = variant_provenance(cfg)
            flops = float(step_flops(facts).total)
            ns = float(ns_load(facts.model, parallelism(facts), ns_policy(facts)).total) if facts.is_muon else 0.0
            m = cfg.model
            run = PlannedRun(
                name=name,
                overrides=list(ov),
                config_hash=h,
                num_gpus=int(cfg.num_gpus),
                nodes=nodes,
                tasks_per_node=per_node,
                tp=m.tensor_model_parallel_size,
                pp=m.pipeline_model_parallel_size,
                vp=m.virtual_pipeline_model_parallel_size,
                cp=m.context_parallel_size,
                ep=m.expert_model_parallel_size,
                etp=m.expert_tensor_parallel_size,
                dp=int(cfg.num_gpus)
                // (m.tensor_model_parallel_size * m.pipeline_model_parallel_size * m.context_parallel_size),
                mbs=cfg.train.micro_batch_size,
                gbs=cfg.train.global_batch_size,
                seq_length=m.seq_length,
                optimizer=str(cfg.optimizer.optimizer),
                container_image=str(cfg.release.container_image),
                model_flops_per_step=flops,
                newton_schulz_flops_per_step=ns,
                skipped_checks=result.skipped_checks if result else [],
                dir=str(final / name),
                recipe=cfg.recipe_meta.name,
                release=str(cfg.release.name),
                variant_of=provenance[0],
                variant_note=provenance[1],
                policies=result.policies if result else [],
                tensorboard_subdir=cfg.job.tensorboard_subdir if cfg.job.type == "pretrain" else None,
            )
            (run_dir / "run.json").write_text(json.dumps(asdict(run), indent=2))
            runs.append(run)
        (tmp / "plan.json").write_text(
            json.dumps({"overrides": list(overrides), "created": stamp, "runs": [asdict(r) for r in runs]}, indent=2)
        )
        if final.exists():
            final.rmdir()
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final, runs
