"""Plans: one folder per run with the composed config, the Megatron-Bridge ConfigContainer dump and the SLURM script.

``plan(overrides)`` expands the sweep (an experiment's ``hydra.sweeper.params`` and/or ``a=x,y`` overrides), then for
every run, *before writing anything*: composes the config (schema-checked), refuses credentials
(``config/secrets.py``) and runs the fast validity rules (``config/rules/``, GPU x precision x system included) --
all before the Megatron import --, builds and validates the real Megatron-Bridge ``ConfigContainer``
(``mbridge/build.py``) and renders the sbatch script ``submit`` will send for the run's first repeat on the chosen
cluster (``launch/jobspec.py`` + nemo-run's dry run in ``launch/nemorun.py``). Only when every run passes are the
folders written (into a temporary directory renamed into place; parent folders it made are removed again on
failure), so bad input writes no plan. ``--out`` is only ever handled by Python: any name works.

Each run folder holds ``config.yaml`` (the resolved bridgebench config, what ``submit`` and ``collect`` read on the
submit side), ``node_config.yaml`` (the config the job reads, copied into its job folder as
``configs/config.yaml``: launch/nodepaths.py), ``megatron_bridge.yaml`` (the ConfigContainer dump, built and
validated with the locally installed Megatron-Bridge, with the node's paths), ``submit.sh`` (the sbatch script),
``payload.sh`` (what each task runs) and ``run.json`` (summary: GPUs, nodes, parallelism, config hash, predicted
FLOPs, and the cluster rules the target cluster breaks -- ``submit`` refuses those). ``submit`` adds
``submitted/<run id>-a<attempt>.sbatch.sh``, each script as sent. Nothing the job reads names a path of the submit
side (the checkout, ``--out``, the local job folder) where the job runs in a container or over SSH
(launch/nodepaths.py; tests/launch/test_node_paths.py checks every shipped cluster).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Callable

from omegaconf import DictConfig, OmegaConf

from bridgebench.config import rules
from bridgebench.config.cluster_fit import cluster_violations
from bridgebench.config.compose import compose, expand_sweep, run_facts, variant_provenance
from bridgebench.config.hashing import config_hash
from bridgebench.config.run_flops import ns_policy, parallelism, step_flops
from bridgebench.config.secrets import (
    check_secrets,
    omegaconf_container,
    redact,
    redact_override,
    redact_overrides,
)
from bridgebench.errors import BridgebenchError
from bridgebench.launch import executor as ex
from bridgebench.launch import nemorun, shellsafe
from bridgebench.launch.jobspec import Job, build_job, job_paths, run_id_for
from bridgebench.launch.jobspec import nodes_and_tasks as jobspec_nodes_and_tasks
from bridgebench.model.newton_schulz import ns_load
from bridgebench.model.optimizer import OptimizerKind
from bridgebench.model.parallel import DIM_FIELDS, DimsView, ParallelDims
from bridgebench.paths import load_paths
from bridgebench.sweep.row import SweepRow


class PlanError(BridgebenchError):
    """A run of the plan is invalid; the message names the run and the rule. No plan was written."""


@dataclass(kw_only=True)
class InvalidRun:
    """A run of a sweep that was not planned: its overrides, the rule it broke (a ``bridgebench.config.rules`` id,
    ``megatron_bridge`` for Megatron-Bridge's own validation, ``launch`` or ``job_type``) and the message."""

    label: str
    overrides: list[str]
    rule: str
    reason: str


@dataclass(kw_only=True)
class PlannedRun(DimsView):
    """One planned run: its name, overrides and config hash, the parallel sizes and batch (``dims``, read as
    ``run.tp``, ``run.dp`` ...), the job shape, the FLOPs per step and the provenance. ``run.json`` is
    :meth:`to_json` (the sizes flat, with DP), read back by :meth:`from_json`."""

    name: str
    overrides: list[str]
    config_hash: str
    dims: ParallelDims
    nodes: int
    tasks_per_node: int
    seq_length: int
    optimizer: str
    container_image: str | None  # the image the job starts in on this cluster; None: the payload runs on the host
    model_flops_per_step: float
    newton_schulz_flops_per_step: float
    skipped_checks: list[str]
    dir: str = ""
    cluster: str = ""
    job_type: str = "pretrain"
    cluster_can_run: list[str] = field(default_factory=list)  # rules the cluster breaks (submit refuses then)
    recipe: str | None = None  # recipe_meta.name (None: no recipe)
    release: str = ""
    #: "nvidia" (Megatron-Bridge's own perf recipe of the release), "modified" (that recipe with fields you changed,
    #: listed in variant_note) or "bridgebench" (e.g. Qwen3 30B-A3B Muon)
    variant_of: str = ""
    variant_note: str = ""  # whose configuration this is and where its values come from
    policies: list[str] = field(default_factory=list)  # bridgebench run policies applied (build.apply_policies)
    #: TensorBoard events: <the attempt's out folder, BRIDGEBENCH_OUT_DIR>/<job.tensorboard_subdir> (None: off)
    tensorboard_subdir: str | None = None
    #: ``#SBATCH --segment`` of submit.sh (None: none) and the segment / NVLink-domain block the time model priced
    #: (bridgebench.model.placement: the GPU's segment_policy); they differ only where the cluster cannot ask SLURM
    #: for segments, and the plan then warns
    segment: int | None = None
    segment_priced: int | None = None
    domain_gpus_priced: int | None = None
    #: what the time model predicted for this run when it was planned (:func:`_prediction`): step_time_s,
    #: tflops_per_gpu, band_pct, release, calibration, calibration_sha256, source; None for the optimizer-step payload
    prediction: dict | None = None

    def to_json(self) -> dict:
        """The run as ``run.json`` / ``plan.json`` hold it: every field, the sizes flat (``num_gpus`` ... ``gbs``)
        with the data-parallel size ``dp``."""
        data = asdict(self)
        dims = data.pop("dims")
        head = {k: data.pop(k) for k in ("name", "overrides", "config_hash")}
        flat = {"num_gpus": dims["num_gpus"], "nodes": data.pop("nodes"), "tasks_per_node": data.pop("tasks_per_node")}
        flat |= {k: dims[k] for k in ("tp", "pp", "vp", "cp", "ep", "etp")}
        flat |= {"dp": self.dp, "mbs": dims["mbs"], "gbs": dims["gbs"]}
        return head | flat | data

    @classmethod
    def from_json(cls, data: dict) -> PlannedRun:
        """A run from :meth:`to_json`'s mapping (``dp`` is derived, not read)."""
        data = dict(data)
        data.pop("dp", None)
        sizes = {k: data.pop(k) for k in DIM_FIELDS if k in data}
        return cls(dims=ParallelDims(**sizes), **data)


def _priced_placement(cfg: DictConfig, nodes: int) -> dict[str, int | None]:
    """The segment and NVLink-domain block the time model prices a pretrain run with
    (:func:`bridgebench.model.placement.segment_nodes` / ``domain_gpus`` under the GPU's ``segment_policy``)."""
    from bridgebench.model import placement

    if cfg.job.type != "pretrain" or cfg.gpu.get("nvlink_domain") is None:
        return {"segment_priced": None, "domain_gpus_priced": None}
    gpn, policy = int(cfg.gpu.gpus_per_node), str(cfg.gpu.get("segment_policy") or "node")
    return {
        "segment_priced": placement.segment_nodes(nodes, gpn, policy),
        "domain_gpus_priced": placement.domain_gpus(int(cfg.num_gpus), gpn, int(cfg.gpu.nvlink_domain), policy),
    }


def nodes_and_tasks(cfg: DictConfig) -> tuple[int, int]:
    """(nodes, tasks per node) of a run (:func:`bridgebench.launch.jobspec.nodes_and_tasks`)."""
    return jobspec_nodes_and_tasks(cfg)


def render_job(cfg: DictConfig, run_dir: Path, name: str, config_hash: str) -> tuple[Job, str, str]:
    """(job, sbatch script, payload script) of a planned run's first submission (repeat 0, attempt 0): the script
    ``submit`` sends for it (launch/jobspec.py: one source for both), every value checked (rule
    ``shell_safe_value``) and the rendered script verified against what was meant (launch/shellsafe.py).

    Raises:
        bridgebench.launch.shellsafe.LaunchConfigError: a value or path that cannot reach the script safely.
    """
    shellsafe.check_config(cfg)  # names the config field (the run name is made of model/gpu/precision names)
    ex.check_name("run name", name)
    job = build_job(cfg, run_dir, name, config_hash, run_id_for(config_hash, 0), 0)
    script, payload = nemorun.render(
        job.executor, command=job.command, job=job.paths, intent=job.intent, config_text=job.config_text
    )
    return job, script, payload


def _run_name(cfg: DictConfig, config_hash: str) -> str:
    """The run's name (plan folder, SLURM job name, ledger, records): what runs. A pretrain run trains the model on
    the recipe's GPU and precision (``<model>-<optimizer>-<gpu>-<precision>-<hash>``); the optimizer-step payload
    trains nothing and runs on whatever device the node has (a CPU on the local cluster), so its name carries no GPU
    or precision: ``optstep-<model>-<optimizer>-<hash>``."""
    opt = OptimizerKind(name=str(cfg.optimizer.optimizer)).family
    if cfg.job.type == "optstep":
        return f"optstep-{cfg.model.name}-{opt}-{config_hash[:8]}"
    if cfg.job.type == "replay":  # says what runs: a replayed table, not training
        return f"replay-{cfg.model.name}-{opt}-{cfg.gpu.name}-{cfg.precision.name}-{config_hash[:8]}"
    return f"{cfg.model.name}-{opt}-{cfg.gpu.name}-{cfg.precision.name}-{config_hash[:8]}"


def plan(
    overrides: list[str],
    out_dir: Path | None = None,
    *,
    progress: Callable[[str], None] | None = None,
    on_invalid: Callable[[InvalidRun], None] | None = None,
    composed: DictConfig | None = None,
    prediction: dict | None = None,
    calibration: str = "default",
) -> tuple[Path, list[PlannedRun]]:
    """Validate and write a plan; returns its directory and the runs.

    ``composed``: the config ``overrides`` compose to, when the caller has it already (a sweep's stage 5 composes
    each point once to hash it): the plan is then that one run and nothing is composed again.

    ``prediction``: what the time model predicted for the run (a sweep passes its row's); otherwise each pretrain
    or replay run is predicted here with ``calibration`` (:func:`_prediction`) -- the plan keeps it, so a record can
    say how far the measurement fell from it.

    ``on_invalid``: called with each run that breaks a rule, fails Megatron-Bridge's validation or a launch check,
    and planning carries on with the valid runs (``plan -m``); without it the first invalid run raises.

    Raises:
        PlanError: a run failing a rule, Megatron-Bridge's validation, or a launch safety check -- the first one, or
            with ``on_invalid`` every one when no run is valid (nothing written either way).
        bridgebench.config.ConfigError: bad overrides.
    """
    say = progress or (lambda msg: None)
    sweeps = [list(overrides)] if composed is not None else expand_sweep(list(overrides))
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    final = _plan_folder(overrides, out_dir, stamp)
    rejects = _Rejects(on_invalid)
    staged: list[_StagedRun] = []
    for i, ov in enumerate(sweeps, 1):
        cfg = composed if composed is not None else compose(ov)
        label = redact_overrides(ov) or "(defaults)"  # messages never echo a credential
        say(f"[{i}/{len(sweeps)}] checking {label}")
        run = _stage_run(ov, cfg, label, final, rejects)
        if run is not None:
            staged.append(run)
    if not staged:
        listing = "\n".join(f"  {r.label}: {r.rule}: {r.reason}" for r in rejects.invalid)
        raise PlanError(f"every run of the plan is invalid ({len(rejects.invalid)}); nothing written:\n{listing}")
    created = _make_dirs(final.parent)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=".plan-", dir=final.parent))
    except OSError as err:
        _remove_dirs(created)
        raise PlanError(f"cannot write the plan under {final.parent}: {err}") from err
    runs: list[PlannedRun] = []
    try:
        for st in staged:
            say(f"writing {st.name}")
            st_pred = prediction if prediction is not None else _prediction(st.overrides, st.cfg, calibration)
            runs.append(_write_run(st, tmp / st.name, final / st.name, st_pred))
        (tmp / "plan.json").write_text(
            json.dumps(
                {
                    "overrides": [redact_override(o) for o in overrides],  # a refused run's credential: never written
                    "created": stamp,
                    "runs": [r.to_json() for r in runs],
                    "invalid": [asdict(r) for r in rejects.invalid],
                },
                indent=2,
            )
        )
        if final.exists():
            final.rmdir()
        tmp.rename(final)
    except BaseException as err:
        shutil.rmtree(tmp, ignore_errors=True)
        _remove_dirs(created)
        if isinstance(err, OSError):  # a full disk, a folder that vanished: said plainly, nothing left behind
            why = err.strerror or str(err)
            raise PlanError(f"cannot write the plan under {final.parent}: {why}; nothing was written") from err
        raise
    return final, runs


def _plan_folder(overrides: list[str], out_dir: Path | None, stamp: str) -> Path:
    """The plan's folder (absolute): ``out_dir``, else ``paths.plans/<experiment>-<stamp>``.

    Raises:
        PlanError: it exists and is not an empty folder; the job folder cannot be quoted by nemo-run.
    """
    experiment = next((o.split("=", 1)[1] for o in overrides if o.startswith("experiment=")), "adhoc")
    final = Path(out_dir) if out_dir else load_paths().plans / f"{experiment}-{stamp}"  # configs/paths: plans
    final = final.absolute()
    if final.exists() and (not final.is_dir() or any(final.iterdir())):
        raise PlanError(
            f"out_is_folder: plan directory {final} exists and is not an empty folder (a file, or a folder with "
            "files); nothing was written: give a new or empty folder with --out"
        )
    try:
        nemorun.check_path("job folder", load_paths().job_dir)  # before the build: nemo-run cannot quote it
    except ex.LaunchConfigError as err:
        raise PlanError(str(err)) from err
    return final


class _Rejects:
    """The runs a plan refuses: without ``on_invalid`` the first one raises :class:`PlanError`; with it each is
    recorded (overrides and reason redacted) and reported, and planning goes on."""

    def __init__(self, on_invalid: Callable[[InvalidRun], None] | None) -> None:
        self.on_invalid = on_invalid
        self.invalid: list[InvalidRun] = []

    def __call__(self, label: str, ov: list[str], rule: str, message: str, err: BaseException | None = None) -> None:
        if self.on_invalid is None:
            raise PlanError(f"run {label!r}{message}") from err
        reason = "; ".join(map(str, err.violations)) if isinstance(err, rules.RuleError) else message[1:].strip()
        self.invalid.append(
            InvalidRun(label=label, overrides=[redact_override(o) for o in ov], rule=rule, reason=redact(reason))
        )
        self.on_invalid(self.invalid[-1])


@dataclass(kw_only=True)
class _StagedRun:
    """A run that passed every check, ready to write: its overrides, config, Megatron-Bridge build (pretrain jobs),
    config hash, name, job and rendered scripts."""

    overrides: list[str]
    cfg: DictConfig
    result: Any
    config_hash: str
    name: str
    job: Job
    script: str
    payload: str


def _stage_run(ov: list[str], cfg: DictConfig, label: str, final: Path, reject: _Rejects) -> _StagedRun | None:
    """Check one run before anything is written: credentials, shell-safe values, the validity rules, the job type,
    the replay table's row, the node-side paths, Megatron-Bridge's own validation (pretrain jobs) and the rendered
    sbatch script. A run that fails goes to ``reject`` (which raises without ``on_invalid``) and gives None."""
    try:
        check_secrets(cfg)  # before anything is built or written (rules secret_in_config, env_resolver)
        shellsafe.check_config(cfg)  # every value that reaches the script (rule shell_safe_value)
        rules.validate(rules.Point.from_config(cfg))
    except rules.RuleError as err:
        reject(label, ov, err.violations[0].rule, f" is invalid:\n{err}", err)
        return None
    if cfg.job.type not in ("pretrain", "optstep", "replay"):
        reject(label, ov, "job_type", f": job.type must be 'pretrain', 'optstep' or 'replay', got {cfg.job.type!r}")
        return None
    result = None
    h = config_hash(cfg)
    if cfg.job.type == "replay":  # the table's row travels in the job's config (after the hash: it follows it)
        try:
            cfg = _with_replay_row(cfg)
        except BridgebenchError as err:
            reject(label, ov, "replay_table", f": {err}", err)
            return None
    name = _run_name(cfg, h)
    try:
        # the first attempt's paths as its node sees them (launch/nodepaths.py): out dir, config, code
        first = job_paths(cfg, name, run_id_for(h, 0), 0)
    except ex.LaunchConfigError as err:
        reject(label, ov, "launch", f": {err}", err)
        return None
    if cfg.job.type == "pretrain":
        from bridgebench.mbridge.build import BuildError, build  # imports megatron: only for pretrain jobs

        try:
            # TensorBoard events under the node-side out folder the first attempt gets (build_job exports it)
            result = build(cfg, out_dir=first.out_dir)
        except BuildError as err:
            reject(label, ov, "megatron_bridge", f": {err}", err)
            return None
    try:
        job, script, payload = render_job(cfg, final / name, name, h)
    except ex.LaunchConfigError as err:
        rule = err.violations[0].rule if isinstance(err, rules.RuleError) else "launch"
        reject(label, ov, rule, f": {err}", err)
        return None
    return _StagedRun(
        overrides=ov, cfg=cfg, result=result, config_hash=h, name=name, job=job, script=script, payload=payload
    )


def _write_run(st: _StagedRun, run_dir: Path, final_dir: Path, prediction: dict | None) -> PlannedRun:
    """Write one run's folder (config.yaml, node_config.yaml, megatron_bridge.yaml, submit.sh, payload.sh,
    run.json) into ``run_dir`` (inside the temporary plan folder; ``final_dir`` is where it will be) and return
    its :class:`PlannedRun`: parallel sizes, nodes, FLOPs and NS FLOPs per step, provenance, placement, prediction."""
    cfg, job, result = st.cfg, st.job, st.result
    run_dir.mkdir()
    # as written: variables passed by name stay ${oc.env:VAR} (config/secrets.py)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(omegaconf_container(cfg)))
    (run_dir / "node_config.yaml").write_text(job.config_text)  # the job's configs/config.yaml
    if result is not None:
        result.container.to_yaml(str(run_dir / "megatron_bridge.yaml"))
    nodes, per_node = job.spec.nodes, job.spec.tasks_per_node
    (run_dir / "submit.sh").write_text(st.script, encoding="utf-8", newline="")
    (run_dir / "payload.sh").write_text(st.payload, encoding="utf-8", newline="")
    facts = run_facts(cfg)
    provenance = variant_provenance(cfg)
    flops = float(step_flops(facts).total)
    ns = float(ns_load(facts.model, parallelism(facts), ns_policy(facts)).total) if facts.is_muon else 0.0
    m = cfg.model
    run = PlannedRun(
        name=st.name,
        overrides=list(st.overrides),
        config_hash=st.config_hash,
        dims=rules.config_dims(cfg),
        nodes=nodes,
        tasks_per_node=per_node,
        seq_length=m.seq_length,
        optimizer=str(cfg.optimizer.optimizer),
        container_image=job.spec.container_image,
        model_flops_per_step=flops,
        newton_schulz_flops_per_step=ns,
        skipped_checks=result.skipped_checks if result else [],
        dir=str(final_dir),
        cluster=str(cfg.cluster.name),
        job_type=str(cfg.job.type),
        cluster_can_run=[str(v) for v in cluster_violations(cfg.cluster, job.spec.needs(cfg))],
        recipe=cfg.recipe_meta.name,
        release=str(cfg.release.name),
        variant_of=provenance[0],
        variant_note=provenance[1],
        policies=result.policies if result else [],
        tensorboard_subdir=cfg.job.tensorboard_subdir if cfg.job.type == "pretrain" else None,
        segment=job.spec.segment,
        **_priced_placement(cfg, nodes),
        prediction=prediction,
    )
    (run_dir / "run.json").write_text(json.dumps(run.to_json(), indent=2))
    return run


def _make_dirs(path: Path) -> list[Path]:
    """``mkdir -p path`` that returns the folders it created (deepest last), so a failed plan can remove them."""
    missing = []
    p = path
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        _remove_dirs(list(reversed(missing)))
        raise PlanError(f"cannot create the plan folder {path}: {err}") from err
    return list(reversed(missing))


def _remove_dirs(created: list[Path]) -> None:
    for d in reversed(created):
        try:
            d.rmdir()
        except OSError:
            break


def _with_replay_row(cfg: DictConfig) -> DictConfig:
    """A copy of a replay run's config with ``job.replay.row`` set to its table's row (None: the table has none;
    the job then ends with an error, as a real one would): :func:`bridgebench.results.replay_table.lookup`.

    Raises:
        bridgebench.results.replay_table.ReplayTableError: no table set, or the table is missing.
    """
    import copy

    from bridgebench.results.replay_table import lookup

    out = copy.deepcopy(cfg)  # composed configs are cached: never change the caller's
    out.job.replay.row = lookup(out, load_paths().ablations)
    return out


def _prediction(overrides: list[str], cfg: DictConfig, calibration: str) -> dict | None:
    """The time model's prediction for a pretrain or replay run, through the sweep pipeline's one-point path
    (:func:`bridgebench.sweep.predict`): ``step_time_s``, ``tflops_per_gpu``, ``band_pct`` (as the
    prediction returns it), ``release``, ``calibration`` and ``calibration_sha256`` (the file's), ``source``
    (``plan``). None for the optimizer-step payload; ``{"error": ...}`` when the models cannot price the point."""
    if cfg.job.type not in ("pretrain", "replay"):
        return None
    from bridgebench.config import calibration as calib_mod
    from bridgebench.sweep import predict

    try:
        calib = calib_mod.load(calibration)
        row = predict(list(overrides), calib)
    except BridgebenchError as err:
        return {"error": str(err), "calibration": calibration, "source": "plan"}
    return prediction_of(row, calibration, source="plan")


def prediction_of(row: SweepRow | dict, calibration: str, *, source: str) -> dict:
    """A plan's ``prediction`` from a sweep-pipeline row, typed (:class:`bridgebench.sweep.row.SweepRow`, as
    :func:`bridgebench.sweep.predict` returns it) or a record of a sweep (see :class:`PlannedRun`).

    Raises:
        bridgebench.sweep.row.SweepRowError: a record that does not fit the row schema.
    """
    from bridgebench.config import calibration as calib_mod

    r = row if isinstance(row, SweepRow) else SweepRow.from_record(row)
    return {
        "step_time_s": r.step_time_s,
        "tflops_per_gpu": r.tflops_per_gpu,
        "band_pct": r.band_pct,
        "release": r.time_release,
        "calibration": calibration,
        "calibration_sha256": calib_mod.sha256(calibration),
        "source": source,
        # what a refit from this run needs (bridgebench.model.refit.Candidate): the terms and FLOPs behind the figure
        "terms_s": {k: float(v) for k, v in r.terms_s.items() if v is not None and v == v},
        "flops_per_step": (
            float(r.tflops_per_gpu) * float(r.step_time_s) * int(r.dims.num_gpus) * 1e12
            if r.tflops_per_gpu and r.step_time_s
            else None
        ),
        "num_gpus": r.dims.num_gpus,
        "group": f"{r.gpu}/{r.precision}",
        "model": r.model,
        "ep_scale_out": bool(r.ep_scale_out),
    }
