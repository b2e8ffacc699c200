"""Property test (hypothesis): every config field that can reach a SLURM script, fed random strings with shell
metacharacters, quotes, newlines and unicode, either is refused naming the rule (``shell_safe_value``) and the field,
or gives a script that -- run by a real bash with ``sbatch``/``srun``/``scontrol``/``python`` replaced by argv printers
(real executables on PATH in a temp dir) -- calls ``srun`` with exactly the intended argv and environment, runs no
other command, creates no file, and keeps every ``#SBATCH`` line whole.

The script is rendered by the code ``plan`` uses (:func:`bridgebench.launch.plan.render_job`: the checks, nemo-run's
dry run and the check of the rendered script). Each field gets its own examples; the issue's injection
(``nvcr.io/x;touch P;#``) and the other reproductions are pinned with ``@example``.
"""

from __future__ import annotations

import copy
import os
import re
import shlex
import subprocess
from pathlib import Path, PurePosixPath

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from bridgebench.config.compose import compose
from bridgebench.launch import shellsafe
from bridgebench.launch.plan import render_job
from tests.launch.ssh_printer import rsync_ssh_words

PRINTER = r"""#!/bin/sh
# argv printer: one file per call, the command name and its arguments NUL-separated; the environment beside it
f="$ARGV_DIR/$$.${0##*/}"
printf '%s\0' "${0##*/}" "$@" > "$f.argv"
/usr/bin/env -0 > "$f.env"
"""
NOT_FOUND = r"""() { printf '%s\0' "$@" > "$ARGV_DIR/unexpected.$$.$RANDOM"; return 127; }"""
PRINTED = ("srun", "sbatch", "scontrol", "python", "argvprint", "hostname")

# The pieces random strings are made of: shell metacharacters, quotes, whitespace, newlines, expansions, nemo-run's
# own macros and folder, unicode (line separators, right-to-left, emoji), control characters.
PIECES = [
    ";", "'", '"', "`", "$(", ")", "(", "\n", "\r", " ", "\t", "#", "&", "&&", "|", "<", ">", "\\", "$", "${", "}",
    "*", "?", "~", "!", ",", ":", "=", "%", "%j", "é", "日本", "\u2028", "\u202e", "🙂", "\x7f", "\x1b[31m",
    "/nemo_run", "$$", "${head_node_ip_var}", "$HOME", "--", "-", "@", "/", "..", "a", "Z", "0", "9", "_", ".", "+",
]  # fmt: skip


def injections(marker: Path) -> list[str]:
    m = shlex.quote(str(marker))
    return [
        f"nvcr.io/x;/usr/bin/touch {m};#",
        f"$(/usr/bin/touch {m})",
        f"`/usr/bin/touch {m}`",
        f"x\n/usr/bin/touch {m}\n",
        f"a' ; /usr/bin/touch {m} ; '",
        f'a" ; /usr/bin/touch {m} ; "',
        f"x || /usr/bin/touch {m}",
        f"x\n#SBATCH --wrap=/usr/bin/touch {m}",
    ]


MARKER = Path("/tmp/bridgebench-shell-property-PWNED")


def strings(valid: str | None = None):
    """Random strings: free text over all of unicode (no surrogates), joins of :data:`PIECES`, the injections, and
    (``valid``: a grammar name) strings of that grammar, so that the accepting path is exercised too."""
    parts = [
        st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=24),
        st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=4)), max_size=8).map("".join),
        st.sampled_from(injections(MARKER)),
    ]
    if valid:
        parts.append(st.from_regex(shellsafe.GRAMMARS[valid].pattern, fullmatch=True).filter(lambda s: len(s) < 200))
    return st.one_of(*parts)


# -------------------------------------------------------------------------------------------------------------------
# Running a rendered script
# -------------------------------------------------------------------------------------------------------------------


def run_script(tmp: Path, script: str, payload: str) -> dict:
    """Run the sbatch script (and then the payload script, as srun would) with printers on PATH; returns the calls
    (name -> list of (argv, env)), the unexpected commands, and the #SBATCH flags as sbatch reads them."""
    bin_dir, calls_dir, work = tmp / "bin", tmp / "calls", tmp / "work"
    for d in (bin_dir, calls_dir, work):
        d.mkdir(parents=True, exist_ok=True)
    for f in calls_dir.iterdir():
        f.unlink()
    for name in PRINTED:
        exe = bin_dir / name
        if not exe.exists():
            exe.write_text(PRINTER)
            exe.chmod(0o755)
    env = {
        "PATH": str(bin_dir),
        "ARGV_DIR": str(calls_dir),
        "SLURM_JOB_NODELIST": "node1",
        "BASH_FUNC_command_not_found_handle%%": NOT_FOUND,
        "BASH_FUNC_cd%%": "() { builtin cd / ; }",  # the payload's `cd <repo>` (the container's path) succeeds
    }
    (tmp / "sbatch.sh").write_text(script)
    (tmp / "payload.sh").write_text(payload)
    for name in ("sbatch.sh", "payload.sh"):
        res = subprocess.run(["/bin/bash", str(tmp / name)], env=env, cwd=work, capture_output=True, timeout=60)
        assert res.returncode in (0, 127), res.stderr[-2000:]
    calls: dict[str, list] = {}
    unexpected = []
    for f in sorted(calls_dir.iterdir()):
        if f.name.startswith("unexpected."):
            unexpected.append(f.read_bytes().split(b"\0"))
        elif f.suffix == ".argv":
            argv = [a.decode("utf-8", "surrogateescape") for a in f.read_bytes().split(b"\0")[:-1]]
            envs = dict(
                kv.decode("utf-8", "surrogateescape").split("=", 1)
                for kv in f.with_suffix(".env").read_bytes().split(b"\0")
                if b"=" in kv
            )
            calls.setdefault(argv[0], []).append((argv, envs))
    return {"calls": calls, "unexpected": unexpected, "sbatch": sbatch_flags(script), "files": list(work.iterdir())}


def sbatch_flags(script: str) -> dict[str, str | None]:
    """The #SBATCH options as sbatch reads them: the comment lines before the first command; asserts that no line of
    that block is anything but a comment (a split #SBATCH line would be a shell command)."""
    lines = script.split("\n")
    end = next(i for i, line in enumerate(lines) if line and not line.startswith("#"))
    assert lines[end] == "set -evx", lines[: end + 1]
    flags = {}
    for line in lines[:end]:
        if line.startswith("#SBATCH"):
            opt = line.removeprefix("#SBATCH ").strip()
            assert opt.startswith("--") and " " not in opt, line
            key, _, value = opt[2:].partition("=")
            flags[key] = value if _ else None
    return flags


# -------------------------------------------------------------------------------------------------------------------
# Fields
# -------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """The optimizer-step experiment on the local cluster with pyxis (container mode: the image, the mounts and
    the payload's `python` reach the scripts) and on the example NVL72 cluster (ssh tunnel: its job folder)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BRIDGEBENCH_JOB_DIR", str(tmp_path_factory.mktemp("jobs")))
        yield {
            "local": compose(
                ["experiment=optstep_local", "cluster.pyxis=true", f"cluster.container_mounts=['/a:/b','{REPO_MOUNT}']"]
            ),
            "ssh": compose(["experiment=optstep_local", "cluster=example_nvl72"]),
        }


#: a container cluster mounts the cluster's checkout where the job runs bridgebench (launch/nodepaths.py)
REPO_MOUNT = "/srv/bridgebench:/opt/bridgebench"


def literal(value: str) -> str:
    """``value`` as an OmegaConf string that resolves to itself: each ``${`` escaped, and the backslashes right
    before it doubled (OmegaConf reads ``\\`` there as one backslash, so ``\\${`` would start an interpolation;
    hypothesis found the word ``\\${``)."""
    return re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", value)


def render(cfg, tmp: Path, run_dir: Path | None = None):
    name = f"{cfg.model.name}-muon-{cfg.gpu.name}-{cfg.precision.name}-abcdef12"
    return render_job(cfg, run_dir or tmp / "plan" / "run", name, "abcdef123456")


def outcome(cfg, tmp: Path, fld: str, run_dir: Path | None = None):
    """None when the value was refused naming the rule and ``fld``; else the run of the rendered scripts."""
    try:
        job, script, payload = render(cfg, tmp, run_dir)
    except shellsafe.ShellValueError as err:
        text = str(err)
        assert "shell_safe_value" in text and fld in text, text
        return None
    ran = run_script(tmp, script, payload)
    assert not ran["unexpected"], ran["unexpected"]
    assert not MARKER.exists() and not ran["files"], "an injected command ran"
    assert set(ran["calls"]) <= {"scontrol", "srun", "python", "argvprint"}, ran["calls"].keys()
    main = [argv for argv, _ in ran["calls"]["srun"] if "--output" in argv]
    assert len(main) == 1 and main[0][-2] == "bash" and main[0][-1].endswith(f"/scripts/{job.paths.job_name}.sh")
    return job, ran, main[0], dict(next(e for a, e in ran["calls"]["srun"] if "--output" in a))


SETTINGS = settings(
    max_examples=int(os.environ.get("BRIDGEBENCH_PROPERTY_EXAMPLES", "30")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@SETTINGS
@given(value=strings("image"))
@example(value="nvcr.io/x;touch P;#")
@example(value="nvcr.io/nvidia/nemo:26.02")
@example(value="nvcr.io#nvidia/nemo:25.09")
def test_container_image(base, tmp_path_factory, value):
    cfg = copy.deepcopy(base["local"])
    cfg.release.container_image = literal(value)
    assume(cfg.release.container_image == value)
    got = outcome(cfg, tmp_path_factory.mktemp("img"), "release.container_image")
    if got:
        _, _, argv, _ = got
        assert argv[argv.index("--container-image") + 1] == value


@SETTINGS
@given(value=strings("mount"))
@example(value="/a;touch P:/b")
@example(value="/lustre/fsw/x:/opt/x:ro")
def test_container_mount(base, tmp_path_factory, value):
    cfg = copy.deepcopy(base["local"])
    cfg.cluster.container_mounts = [literal(value), REPO_MOUNT]
    assume(cfg.cluster.container_mounts[0] == value)
    got = outcome(cfg, tmp_path_factory.mktemp("mnt"), "cluster.container_mounts[0]")
    if got:
        _, _, argv, _ = got
        assert argv[argv.index("--container-mounts") + 1].split(",")[0] == value


@SETTINGS
@given(fld=st.sampled_from(["account", "partition", "time_limit", "mem"]), data=st.data())
@example(fld="partition", data=None)
def test_sbatch_values(base, tmp_path_factory, fld, data):
    grammar = {"account": "name", "partition": "name", "time_limit": "time", "mem": "mem"}[fld]
    value = "p\n#SBATCH --wrap=x" if data is None else data.draw(strings(grammar))
    cfg = copy.deepcopy(base["local"])
    cfg.cluster[fld] = literal(value)
    assume(cfg.cluster[fld] == value)
    got = outcome(cfg, tmp_path_factory.mktemp("sb"), f"cluster.{fld}")
    if got:
        _, ran, _, _ = got
        key = {"time_limit": "time"}.get(fld, fld)
        assert ran["sbatch"][key] == value


@SETTINGS
@given(name=strings("env_name"), value=strings())
@example(name="NOTE", value="x;/usr/bin/touch /tmp/bridgebench-shell-property-PWNED;#")
@example(name="NOTE", value="a$$b ${head_node_ip_var} /nemo_run")
@example(name="lower", value="x")
@example(name="_", value="x")  # bash sets $_ to the last command's argument: refused by name (the shell owns it)
@example(name="BASH_ENV", value="/tmp/x")
@example(name="A", value="${0")  # text OmegaConf would read as an interpolation (found by hypothesis)
def test_env_names_and_values(base, tmp_path_factory, name, value):
    cfg = copy.deepcopy(base["local"])
    assume("." not in name and "[" not in name and "${" not in name and name)  # Hydra/OmegaConf key syntax
    from bridgebench.config.secrets import secret_name, token_kind

    assume(not secret_name(name) and not token_kind(value))  # credentials: rule secret_in_config (test_secrets.py)
    assume(not re.fullmatch(r"\$\{oc\.env:[A-Z_][A-Z0-9_]*\}", value))  # the text ${oc.env:VAR}: passed by name
    cfg.env_vars[name] = literal(value)
    assume(cfg.env_vars[name] == value)
    got = outcome(cfg, tmp_path_factory.mktemp("env"), f"env_vars.{name}")
    if got:
        _, _, _, env = got
        assert env[name] == value


@SETTINGS
@given(words=st.lists(st.one_of(strings(), st.integers(), st.booleans(), st.floats()), max_size=4))
@example(words=[True])
@example(words=["--cpunodebind=0", "a b", "$(x)", "it's"])
@example(words=["${)", "${x}"])  # text OmegaConf would read as interpolations (hypothesis found "${)")
@example(words=["\\${", "a\\\\${x}"])  # a backslash before "${" (hypothesis found "\\${")
def test_wrapper_words(base, tmp_path_factory, words):
    cfg = copy.deepcopy(base["local"])
    cfg.job.wrapper = ["argvprint", *[literal(w) if isinstance(w, str) else w for w in words]]
    assume(list(cfg.job.wrapper)[1:] == words)
    got = outcome(cfg, tmp_path_factory.mktemp("wrap"), "job.wrapper[")
    if got:
        ((argv, _),) = got[1]["calls"]["argvprint"]
        assert argv[1 : 1 + len(words)] == words and argv[1 + len(words)] == "python"


@SETTINGS
@given(value=strings("name"))
@example(value="x;touch P")
def test_model_name_in_the_run_name(base, tmp_path_factory, value):
    cfg = copy.deepcopy(base["local"])
    cfg.model.name = literal(value)
    assume(cfg.model.name == value)
    got = outcome(cfg, tmp_path_factory.mktemp("name"), "model.name")
    if got:
        job, ran, _, _ = got
        assert ran["sbatch"]["job-name"].endswith("." + job.paths.job_name) and value in job.paths.job_name


@SETTINGS
@given(value=strings())
@example(value="plans/a b;touch P/$(x)\n")
def test_plan_folder_in_the_payload(base, tmp_path_factory, value):
    """``--out`` can be any name (only Python handles it): the job reads its config from the job folder
    (launch/nodepaths.py), so the plan folder never reaches the scripts, whatever its name."""
    tmp = tmp_path_factory.mktemp("out")
    assume("/" not in value or not value.startswith("/"))
    run_dir = tmp / "p" / value.replace("/", "_") / "run"
    got = outcome(base["local"], tmp, "config path", run_dir)
    if got:
        job, ran, _, _ = got
        ((argv, _),) = ran["calls"]["python"]
        assert argv[argv.index("--config") + 1] == job.paths.config
        assert str(run_dir) not in job.command


@SETTINGS
@given(value=strings("abspath"))
@example(value="/lustre/a b;touch P")
def test_ssh_job_folder(base, tmp_path_factory, value):
    # '???' is OmegaConf's "must be set" marker, not a folder name: reading it is rule config_value_missing
    # (tests/test_quiet.py), so it cannot be set as a literal here (a hypothesis draw found it)
    assume(value != "???")
    cfg = copy.deepcopy(base["ssh"])
    cfg.cluster.tunnel.job_dir = literal(value)
    assume(cfg.cluster.tunnel.job_dir == value)
    got = outcome(cfg, tmp_path_factory.mktemp("ssh"), "cluster.tunnel.job_dir")
    if got:
        _, ran, argv, _ = got
        folder = str(PurePosixPath(value)).rstrip("/") + "/"  # the folder (pathlib drops "//" and "/./")
        assert ran["sbatch"]["output"].startswith(folder)
        assert argv[argv.index("--output") + 1].startswith(folder)


def test_the_issue_reproduction_is_refused_naming_the_rule(base, tmp_path):
    """`plan ... release.container_image='nvcr.io/x;touch P;#'` on the NVL72 cluster: refused before anything is
    written, naming the rule and the field."""
    cfg = copy.deepcopy(base["ssh"])
    cfg.release.container_image = "nvcr.io/x;touch P;#"
    with pytest.raises(shellsafe.ShellValueError) as err:
        render(cfg, tmp_path)
    assert "shell_safe_value" in str(err.value) and "release.container_image" in str(err.value)
    assert not (tmp_path / "P").exists()


# -------------------------------------------------------------------------------------------------------------------
# The ssh tunnel's fields: they reach the submitting machine's ssh / rsync command lines (issue 24)
# -------------------------------------------------------------------------------------------------------------------

TUNNEL_GRAMMAR = {"host": "host", "user": "name", "identity": "keyfile", "known_hosts": "keyfile"}


@SETTINGS
@given(fld=st.sampled_from([*TUNNEL_GRAMMAR, "port"]), data=st.data())
@example(fld="identity", data=None)  # the issue's: a quote closed nemo-run's --rsh='ssh -i <identity> ...'
def test_tunnel_fields(base, tmp_path_factory, fld, data):
    """Each ssh tunnel field, random: refused by ``plan`` naming the rule and field, or -- accepted -- the job folder's
    copy (real rsync, ``ssh`` replaced by an argv printer) gives ``ssh`` exactly the intended words and runs nothing
    else."""
    from bridgebench.launch.tunnel import identity_path, known_hosts_path, rsync_argv, ssh_tunnel

    tmp = tmp_path_factory.mktemp("tun")
    if data is None:
        value = f"/tmp/k' ; /usr/bin/touch {MARKER} ; '"
    elif fld == "port":
        value = data.draw(st.one_of(st.integers(-5, 70000), st.sampled_from([0, 1, 22, 65535, 65536])))
    else:
        value = data.draw(strings(TUNNEL_GRAMMAR[fld]))
    cfg = copy.deepcopy(base["ssh"])
    cfg.cluster.tunnel[fld] = value if fld == "port" else literal(value)
    assume(cfg.cluster.tunnel[fld] == value)
    got = outcome(cfg, tmp, f"cluster.tunnel.{fld}")
    if got is None:
        return
    try:
        tunnel = ssh_tunnel(cfg.cluster, "/lustre/jobs/r/a1")  # resolved paths are checked again (repo, ~)
    except shellsafe.ShellValueError as err:
        assert "shell_safe_value" in str(err) and f"cluster.tunnel.{fld}" in str(err)
        return
    src = tmp / "exp"
    src.mkdir()
    words = rsync_ssh_words(tmp, rsync_argv(tunnel, str(src), "/lustre/jobs/r"))
    assert not MARKER.exists() and not any(p.name.startswith("PWNED") for p in tmp.rglob("*"))
    t = cfg.cluster.tunnel
    expected = ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                "-o", f"UserKnownHostsFile={known_hosts_path(cfg.cluster)}", "-o", "GlobalKnownHostsFile=/dev/null",
                "-o", "ConnectTimeout=10"]  # fmt: skip
    if t.identity:
        expected += ["-o", "IdentitiesOnly=yes", "-i", identity_path(cfg.cluster)]
    if t.port:
        expected += ["-p", str(t.port)]
    assert words[: len(expected)] == expected
    assert words[len(expected) : len(expected) + 3] == ["-l", str(t.user), str(t.host)]
    assert words[-1] == "/lustre/jobs/r"
