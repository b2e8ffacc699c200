"""The one place bridgebench drives nemo-run: render (dry run) and submit a job, with nothing reaching a shell
unquoted.

nemo-run 0.11.1 builds several shell commands by formatting paths into strings (upstream problem; see the lead's
note for the report):

* ``core/packaging/git.py`` ``GitArchivePackager.package`` (the ``SlurmExecutor`` default packager):
  ``subprocess.check_call(f"cd {path} && git rev-parse", shell=True)``, ``gzip -c {output_file}.tmp > {output_file}``
  and ``rm {output_file}.tmp`` through ``invoke``; ``core/packaging/pattern.py`` likewise (``tar -cf {file}.tmp``);
* ``core/execution/slurm.py`` ``SlurmExecutor.package``: ``mkdir -p {job_dir}/code`` and ``tar -xvzf {pkg} -C ...``;
* ``run/torchx_backend/schedulers/slurm.py`` ``SlurmTunnelScheduler.schedule``:
  ``tunnel.run(" ".join(["sbatch", "--requeue", "--parsable", dst_path]))``;
* the sbatch script it writes has ``#SBATCH --output=<job dir>/...`` and ``srun --output <job dir>/...`` unquoted.

So a path with a space, a quote, ``;``, ``$()`` or a newline either breaks those commands or runs what follows it.
What this module does about it, in one place:

1. the pass-through ``nemo_run.Packager()`` is always used (the compute node runs the repository itself, mounted or
   checked out) and the packaging step is marked done with its ``code`` folder made in Python, so no packaging
   command runs at all -- no ``git archive``, ``tar``, ``gzip``, ``rm`` or ``mkdir -p``; the one shell command left
   is nemo-run's ``sbatch --requeue --parsable <script>`` (``tunnel.run``), whose path is checked by point 2; over
   SSH nemo-run's ``rsync --rsh='ssh -i <identity> -p <port>'`` shell string (``core/tunnel/rsync.py``) is replaced
   by an argv rsync (:func:`_own_rsync`, :mod:`bridgebench.launch.tunnel`);
2. every path nemo-run will put into a command or the script (the experiment folder, the tunnel's job folder) is
   checked by :func:`check_path` *before* nemo-run is called, and refused with a message naming the value, where it
   came from and how to move it (``BRIDGEBENCH_JOB_DIR``, ``TMPDIR``);
3. a plan's dry run renders in a private temporary folder, never under the user's ``--out``, so ``--out`` is only
   ever handled by Python (any name works);
4. everything bridgebench itself adds is quoted or checked against a strict grammar, in one place
   (:mod:`bridgebench.launch.shellsafe`, rule ``shell_safe_value``): the payload command and its wrapper words,
   env values, names, mounts, the container image, time limit and memory -- nemo-run 0.11.1 writes the ``srun``
   line's words unquoted (its ``noquote`` is an alias of ``str``), so a grammar is the only guard there;
5. the script nemo-run renders is checked against what bridgebench meant (:func:`_verified`:
   :func:`bridgebench.launch.shellsafe.verify_sbatch` runs inside nemo-run's ``SlurmBatchRequest.materialize``,
   i.e. before the script is written or ``sbatch`` sees it), and so is the payload script.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import shutil
import tempfile
from pathlib import Path
from typing import Mapping

from bridgebench.launch import executor as ex
from bridgebench.launch import shellsafe
from bridgebench.launch.nodepaths import CONFIG, JobPaths, experiment_id

SHELL_PATH_HOW = {
    "job folder": "set BRIDGEBENCH_JOB_DIR (configs/paths job_dir) to a folder without them",
    "nemo-run experiment folder": "set BRIDGEBENCH_JOB_DIR (configs/paths job_dir) to a folder without them",
    "temporary folder": "set TMPDIR to a folder without them",
    "cluster job folder": "set cluster.tunnel.job_dir to a folder without them",
}


def check_path(kind: str, path: str | os.PathLike) -> str:
    """``path`` if nemo-run can put it into a shell command safely (letters, digits and ``_ . / @ + -``), else
    :class:`bridgebench.launch.shellsafe.ShellValueError` naming the value, the rule and the fix."""
    text = os.fspath(path)
    why = shellsafe.problem("path", text)
    if why:
        raise shellsafe.ShellValueError(
            [
                shellsafe.Violation(
                    shellsafe.RULE,
                    f"{kind} {text!r} {why}: nemo-run 0.11.1 puts this path into shell commands and #SBATCH lines "
                    f"unquoted (mkdir -p, sbatch, --output), so it cannot work; "
                    f"{SHELL_PATH_HOW.get(kind, 'use a path of letters, digits and _ . / @ + -')}",
                )
            ]
        )
    return text


def _check_job(job: JobPaths) -> None:
    ex.check_name("job name", job.job_name)
    check_path("job folder" if job.local_tunnel else "cluster job folder", job.tunnel_dir)
    if not job.tunnel_dir.startswith("/"):
        raise ex.LaunchConfigError(
            f"cluster job folder {job.tunnel_dir!r} is not an absolute path on the cluster; set cluster.tunnel.job_dir"
        )


_experiment_id = experiment_id  # launch/nodepaths.py: the one definition


def _read(path: Path) -> str:
    """A script as written, byte for byte (``newline=""``: no universal-newline translation, which would turn a
    quoted carriage return into a newline)."""
    with open(path, encoding="utf-8", newline="") as f:
        return f.read()


@contextlib.contextmanager
def _verified(intent: shellsafe.Intent):
    """While nemo-run renders a job: every sbatch script it materializes is checked against ``intent``
    (:func:`bridgebench.launch.shellsafe.verify_sbatch`) and so is the payload script beside it, before nemo-run
    writes the script or runs ``sbatch`` (a :class:`~bridgebench.launch.shellsafe.ShellValueError` propagates out of
    nemo-run's dry run / run)."""
    from nemo_run.core.execution.slurm import SlurmBatchRequest

    original = SlurmBatchRequest.materialize

    def materialize(self) -> str:
        text = original(self)
        shellsafe.verify_sbatch(text, intent)
        for script in Path(self.executor.job_dir).glob("scripts/*.sh"):
            shellsafe.verify_payload(_read(script), intent.command)
        return text

    SlurmBatchRequest.materialize = materialize
    try:
        yield
    finally:
        SlurmBatchRequest.materialize = original


def _own_rsync(tunnel):
    """Over SSH: nemo-run's shell-string ``rsync --rsh='ssh -i <identity> -p <port>'`` (run by a local shell) is
    replaced by bridgebench's argv rsync (:func:`bridgebench.launch.tunnel.own_rsync`: every word checked and quoted,
    ssh in batch mode against the cluster's known_hosts) while the job is submitted."""
    import nemo_run as run

    if not isinstance(tunnel, run.SSHTunnel):
        return contextlib.nullcontext()
    from bridgebench.launch import tunnel as tun

    return tun.own_rsync(tunnel)


def _passthrough(executor, job_name: str) -> None:
    """Point 1: the pass-through packager, and the packaging step marked done for this job, so nemo-run's
    ``SlurmExecutor.package`` runs no shell command at all (it would run ``mkdir -p {job_dir}/code`` through
    invoke); the ``code`` folder is made in Python by :func:`_experiment`."""
    import nemo_run as run
    from nemo_run.core.execution.slurm import get_packaging_job_key
    from nemo_run.core.tunnel.client import PackagingJob

    executor.packager = run.Packager()
    key = get_packaging_job_key(_experiment_id(job_name), job_name)
    executor.tunnel.packaging_jobs[key] = PackagingJob(symlink=False)


def _experiment(title: str, executor, base_dir: str, config_text: str = ""):
    """A nemo-run Experiment with a fixed id whose preparation also makes each job's ``code`` folder (the job's
    ``srun --chdir``) and writes the job's ``configs/config.yaml`` (``config_text``: launch/nodepaths.py
    ``node_config``), in Python -- inside the job folder, so nemo-run copies it with the job (rsync over SSH) and
    the job reads it at ``/nemo_run/configs/config.yaml`` in a container."""
    import nemo_run as run

    exp = run.Experiment(title, executor=executor, id=_experiment_id(title), base_dir=base_dir, log_level="ERROR")
    prepare = exp._prepare

    def prepare_with_code_dirs(exist_ok: bool = False) -> None:
        prepare(exist_ok=exist_ok)
        for job in exp.jobs:
            (Path(job.executor.job_dir) / "code").mkdir(parents=True, exist_ok=True)
            if config_text:
                target = Path(job.executor.job_dir) / CONFIG
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(config_text)

    exp._prepare = prepare_with_code_dirs  # this instance only
    return exp


def render(
    executor, *, command: str, job: JobPaths, intent: shellsafe.Intent, config_text: str = ""
) -> tuple[str, str]:
    """(sbatch script, per-task payload script) that :func:`submit` would send for ``job``: nemo-run's own dry run,
    rendered in a private temporary folder (nothing is written under the job folder or submitted), checked against
    ``intent``.

    Raises:
        LaunchConfigError: a path or name nemo-run cannot handle safely (:class:`~bridgebench.launch.shellsafe.
            ShellValueError`: rule ``shell_safe_value``), or a rendered script other than ``intent``.
    """
    import nemo_run as run

    _check_job(job)
    tmp = tempfile.mkdtemp(prefix="bridgebench-dryrun-")
    try:
        check_path("temporary folder", tmp)
        _passthrough(executor, job.job_name)
        # nemo-run prints its experiment banner and replaces the root logger's handlers
        with contextlib.redirect_stdout(io.StringIO()), _root_logging_kept(), _verified(intent):
            with _experiment(job.job_name, executor, tmp, config_text) as exp:
                exp.add(run.Script(inline=command, entrypoint="bash"), name=job.job_name)
                exp.dryrun(log=False, delete_exp_dir=False)
        script = sorted(Path(tmp).glob(f"**/{job.job_name}_sbatch.sh"))
        payload = sorted(Path(tmp).glob(f"**/scripts/{job.job_name}.sh"))
        if not script or not payload:
            raise ex.LaunchConfigError(f"nemo-run's dry run wrote no sbatch or payload script for {job.job_name}")
        return _read(script[-1]), _read(payload[-1])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _check_login(tunnel, job: JobPaths) -> None:
    """Over SSH: connect once with the tunnel's own settings before nemo-run runs anything, so an unreachable login
    node or a refused key is a :class:`bridgebench.launch.tunnel.TunnelError` naming it (nemo-run would
    ``sys.exit(1)``); and remove the attempt's folder on the cluster when a submission that was never recorded left
    one (as the local folder is: the caller checked the ledger), so no log or ``out/`` of another job is in it."""
    import nemo_run as run

    if not isinstance(tunnel, run.SSHTunnel):
        return
    from bridgebench.launch import tunnel as tun

    probe = tun.same_tunnel(tunnel)
    tun.connect(probe)
    try:
        tun.remove_tree(probe, job.tunnel_dir)
    finally:
        probe.cleanup()


@contextlib.contextmanager
def _root_logging_kept():
    """Keep the root logger's handlers and level as they were: nemo-run 0.11.1's ``Experiment`` calls
    ``logging.basicConfig(handlers=[RichHandler(...)], force=True)`` (core/frontend/console/api.py
    ``configure_logging``) and on exit removes only the first root handler, so without this every later log record
    (bridgebench's debug records with their tracebacks included) would be printed on the terminal by rich instead of
    going to the debug log (debuglog.py)."""
    import logging

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for h in [h for h in root.handlers if h not in handlers]:
            root.removeHandler(h)
        for h in handlers:
            if h not in root.handlers:
                root.addHandler(h)
        root.setLevel(level)


def submit(
    executor,
    *,
    command: str,
    job: JobPaths,
    intent: shellsafe.Intent,
    depends_on: str | None = None,
    client_env: Mapping[str, str] | None = None,
    config_text: str = "",
) -> tuple[str, str, str]:
    """Submit ``command`` as ``job`` (``sbatch`` through nemo-run's tunnel); ``depends_on`` = a SLURM job id this one
    waits for (``--dependency=afterany:<id>``: repeats of a benchmark run one after the other).

    Returns:
        (SLURM job id, the sbatch script exactly as submitted, nemo-run experiment id).

    Raises:
        LaunchConfigError: a path nemo-run cannot handle safely, or a rendered script other than ``intent`` (nothing
            submitted).
        RuntimeError: nemo-run returned no job id; other nemo-run / sbatch exceptions pass through.
    """
    import nemo_run as run

    _check_job(job)
    check_path("nemo-run experiment folder", job.base)
    if depends_on is not None:
        shellsafe.check("job_id", str(depends_on), "dependency", "#SBATCH --dependency")
    _passthrough(executor, job.job_name)
    if depends_on:
        executor.dependencies = [f"slurm_tunnel://nemo_run/{depends_on}"]  # nemo-run parses the id from a handle
        executor.dependency_type = "afterany"
        intent = dataclasses.replace(intent, sbatch=intent.sbatch | {"dependency": f"afterany:{depends_on}"})
    _check_login(executor.tunnel, job)
    if job.base.exists():  # left by a submission that failed before it was recorded (the caller checked the ledger)
        shutil.rmtree(job.base)
    job.base.mkdir(parents=True)
    env_before = dict(os.environ)
    os.environ.update(dict(client_env or {}))
    try:
        with (
            contextlib.redirect_stdout(io.StringIO()),
            _root_logging_kept(),
            _verified(intent),
            _own_rsync(executor.tunnel),
        ):
            with _experiment(job.job_name, executor, str(job.base), config_text) as exp:
                exp.add(run.Script(inline=command, entrypoint="bash"), name=job.job_name)
                exp.run(detach=True)
    except SystemExit as err:  # nemo-run's SSHTunnel exits when authentication fails
        shutil.rmtree(job.base, ignore_errors=True)
        from bridgebench.launch.tunnel import TunnelError

        raise TunnelError(f"SSH to {executor.tunnel.host} failed while submitting (nemo-run exit {err.code})") from None
    except BaseException:
        shutil.rmtree(job.base, ignore_errors=True)  # nothing was submitted: leave nothing behind
        raise
    finally:
        os.environ.clear()
        os.environ.update(env_before)
    handle = exp.jobs[0].handle if exp.jobs else ""
    job_id = str(handle).rstrip("/").split("/")[-1] if handle else ""
    if not job_id.isdigit():
        raise RuntimeError(f"nemo-run returned no SLURM job id for {job.job_name} (handle {handle!r})")
    scripts = sorted(job.base.glob(f"**/{job.job_name}_sbatch.sh"))
    return job_id, _read(scripts[-1]) if scripts else "", exp._id
