"""Every value that can reach a shell -- ``sbatch``, ``srun``, an ``#SBATCH`` line or a job script on the cluster, and
the ``ssh`` / ``rsync`` command lines on the submitting machine -- checked in ONE place (rule ``shell_safe_value``).

On the submitting machine nemo-run 0.11.1 copies a job folder with ``rsync --rsh='ssh -i <identity> -p <port>' ...``
formatted into one string and run by a local shell (``core/tunnel/rsync.py``, through invoke): a quote in
``cluster.tunnel.identity`` closed the ``--rsh`` word and ran the rest. bridgebench runs its own ``rsync`` instead
(:func:`bridgebench.launch.tunnel.rsync_argv`: an argv list, no shell, the ``--rsh`` words ``shlex``-quoted), and every
tunnel field that reaches it -- host, user, port, identity, known_hosts, job_dir -- is checked here by grammar first
(:data:`SCRIPT_FIELDS`), so ``plan`` refuses it before anything runs. Environment names the shell owns
(:data:`SHELL_OWNED`: ``_``, ``PWD``, ``IFS``, ``BASH_ENV`` ...) are refused by name.

nemo-run 0.11.1 builds the sbatch script from strings (``core/execution/slurm.py`` ``SlurmBatchRequest.materialize``
and the ``slurm.sh.j2`` template):

* the ``srun`` line: its words go through ``arg if isinstance(arg, noquote) else shlex.quote(arg)`` -- but ``noquote``
  is a ``TypeAlias`` of ``str``, so *every* word is written unquoted: ``--container-image <image>``,
  ``--container-mounts <mounts>``, ``--output <job folder>/...``, ``--chdir`` (the issue: an image
  ``nvcr.io/x;touch P;#`` ran ``touch P`` on the compute node);
* ``#SBATCH --key=<value>`` lines (``_as_sbatch_flag``: ``shlex.quote``, which sbatch does not unquote the way bash
  does, and a newline in a value ends the comment line: the rest is a shell command);
* ``export {key.upper()}={value}`` lines, value as given (bridgebench quotes it), after ``string.Template(value)
  .safe_substitute(...)`` of nemo-run's macros (``$$`` becomes ``$``);
* in host mode (no container) every ``/nemo_run`` in the script is replaced by the job folder.

So every such value is either checked against a strict grammar (:data:`GRAMMARS`: names, paths, mounts, container
image, time limit, memory, environment variable names, job ids) or quoted (environment values, the payload command and
its ``job.wrapper`` words), here:

* :func:`check_config` walks every config field that reaches a script (:data:`SCRIPT_FIELDS`) and raises
  :class:`ShellValueError` (rule ``shell_safe_value``) naming each field, its value, the grammar and where it goes --
  before anything is built or written (``plan`` and ``submit`` both call it through
  :func:`bridgebench.launch.jobspec.build_job`);
* :func:`check` / :func:`check_word` are what the executor builder calls on the values it hands to nemo-run;
* :func:`env_value` is the one quoting of an environment value (``shlex.quote``, then ``$`` -> ``$$`` for nemo-run's
  ``Template`` substitution);
* :func:`verify_sbatch` checks the script nemo-run rendered against what bridgebench meant (:class:`Intent`) before it
  is written or submitted (:mod:`bridgebench.launch.nemorun` hooks it into nemo-run's ``materialize``): the
  ``#SBATCH`` block is one comment line per flag with the intended values, each export is the intended quoted
  text, the ``srun`` line is plain words (no quote, no ``$``, ``;``, ``&``, ``|``, ``<``, ``>``, ``(``, backtick or
  newline: bash splits it on spaces exactly) with the intended image and mounts, and the payload script is the
  intended command byte for byte.

Pure Python (``re``, ``shlex``): no nemo-run import.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from bridgebench.config.rules import RuleError, Violation
from bridgebench.errors import BridgebenchError

RULE = "shell_safe_value"


class LaunchConfigError(BridgebenchError):
    """A cluster or run value would be unsafe or invalid in a SLURM script; the message names the value and rule."""


class ShellValueError(RuleError, LaunchConfigError):
    """Values that would reach a shell, ``sbatch`` or ``srun`` unsafely (rule ``shell_safe_value``); ``violations``
    names each field, its value and the grammar it breaks. Nothing was written or submitted."""

    def __str__(self) -> str:
        lines = "\n".join(f"  {v}" for v in self.violations)
        n = len(self.violations)
        return f"{n} value{'s' if n != 1 else ''} cannot reach a SLURM script safely (rule {RULE}):\n{lines}"


@dataclass(frozen=True, kw_only=True)
class Grammar:
    """A strict grammar a value must match in full (``pattern``), in words (``says``)."""

    name: str
    pattern: re.Pattern[str]
    says: str


#: Docker reference grammar (github.com/distribution/reference regexp.go): domain[:port]/path[:tag][@digest], plus
#: enroot/pyxis' ``[user@][registry#]image[:tag]`` and a squashfs file (pyxis ``--container-image`` accepts all).
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*(?::[0-9]{1,5})?"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_IMAGE = (
    rf"(?:[A-Za-z0-9_.-]+@)?(?:{_DOMAIN}[/#])?{_COMPONENT}(?:/{_COMPONENT})*(?::{_TAG})?(?:@{_DIGEST})?"
    r"|/[A-Za-z0-9_./+-]+\.(?:sqsh|squashfs)"
)

#: grammar name -> (regular expression a value must match in full, the same in words)
GRAMMAR_TABLE: dict[str, tuple[str, str]] = {
    "name": (
        r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}",
        "letters, digits and . _ - (1-128 characters, the first a letter or digit)",
    ),
    "path": (r"[A-Za-z0-9_./@+-]{1,4096}", "a path of letters, digits and _ . / @ + -"),
    "abspath": (
        r"/[A-Za-z0-9_./@+-]{0,4095}",
        "an absolute path of letters, digits and _ . / @ + - (on the cluster; a relative one would be the login "
        "node's home folder's)",
    ),
    "mount": (
        r"[A-Za-z0-9_./@+-]+:[A-Za-z0-9_./@+-]+(?::[A-Za-z0-9_.+-]+)?",
        "src:dst[:flags] of plain path characters (letters, digits and _ . / @ + -); no spaces or commas",
    ),
    "image": (
        _IMAGE,
        "a container image reference ([user@][registry[:port]/ or #]name[:tag][@digest], docker/enroot syntax) "
        "or an absolute .sqsh path",
    ),
    "time": (
        r"[0-9]{1,9}(?::[0-9]{1,2}){0,2}|[0-9]{1,9}-[0-9]{1,2}(?::[0-9]{1,2}){0,2}|(?i:unlimited|infinite)",
        "a SLURM time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED",
    ),
    "mem": (r"[0-9]{1,15}[KMGTkmgt]?", "a SLURM memory size: digits with an optional K/M/G/T"),
    "env_name": (
        r"[A-Z_][A-Z0-9_]{0,255}",
        "an upper-case shell identifier (A-Z, 0-9, _; nemo-run 0.11.1 writes `export {name.upper()}=...`, so a "
        "lower-case name would reach the job as another variable)",
    ),
    "job_id": (r"[0-9]{1,20}", "a SLURM job id (digits)"),
    "host": (
        r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,62})(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}))*\.?",
        "a host name or IPv4 address (RFC 1123 labels of letters, digits and -, joined by .)",
    ),
    "port": (
        r"[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]",
        "a TCP port (1-65535)",
    ),
    "keyfile": (
        r"(?:~/)?[A-Za-z0-9_./@+-]{1,4095}",
        "a path of letters, digits and _ . / @ + - (optionally starting with ~/) on the submitting machine",
    ),
}
GRAMMARS: dict[str, Grammar] = {
    name: Grammar(name=name, pattern=re.compile(rx), says=says) for name, (rx, says) in GRAMMAR_TABLE.items()
}

#: Environment names the shell owns: bash sets, reads or overwrites them itself (GNU Bash Reference Manual 5.2,
#: sections 5.1 "Bourne Shell Variables" and 5.2 "Bash Variables"), so ``export NAME=...`` in a job script either
#: does not reach the job as written (``$_`` is the last command's argument, ``PWD`` follows ``cd``, ``SHLVL`` counts
#: up) or changes how the script itself runs (``IFS`` splits words, ``BASH_ENV`` / ``ENV`` source a file in every
#: non-interactive shell, ``CDPATH`` redirects ``cd``, ``GLOBIGNORE`` globbing, ``PS4`` runs in ``set -x`` traces).
SHELL_OWNED = frozenset(
    {
        "_", "PWD", "OLDPWD", "SHLVL", "IFS", "PS1", "PS2", "PS3", "PS4", "PPID", "UID", "EUID", "GROUPS",
        "BASH", "BASHOPTS", "BASHPID", "SHELLOPTS", "RANDOM", "SRANDOM", "SECONDS", "LINENO", "FUNCNAME", "FUNCNEST",
        "HISTCMD", "PIPESTATUS", "DIRSTACK", "EPOCHREALTIME", "EPOCHSECONDS", "OPTIND", "OPTARG", "OPTERR", "REPLY",
        "CDPATH", "GLOBIGNORE", "ENV", "POSIXLY_CORRECT", "PROMPT_COMMAND", "PROMPT_DIRTRIM", "HOSTTYPE", "MACHTYPE",
        "OSTYPE", "INPUTRC", "EXECIGNORE", "TIMEFORMAT", "MAILPATH", "MAILCHECK", "HISTFILE", "HISTSIZE", "SHELL",
    }
)  # fmt: skip
#: ... and every name with these prefixes (``BASH_ENV``, ``BASH_VERSION``, ``BASH_FUNC_name%%`` ..., ``COMP_*``)
SHELL_OWNED_PREFIXES = ("BASH_", "COMP_", "READLINE_")


def shell_owned(name: str) -> bool:
    """True when the shell owns the environment name ``name`` (:data:`SHELL_OWNED`, :data:`SHELL_OWNED_PREFIXES`)."""
    return name in SHELL_OWNED or name.startswith(SHELL_OWNED_PREFIXES)


#: Config fields whose value reaches a SLURM script: field -> (grammar, where it goes). ``[]`` marks list items,
#: ``.*`` map keys and values. Quoted fields (``None`` grammar) only need to be strings a file can hold
#: (:func:`check_word`).
_SSH_RSYNC = "ssh and rsync command lines on the submitting machine"
_RSH = "in the rsync --rsh command line on the submitting machine"
SCRIPT_FIELDS: dict[str, tuple[str | None, str]] = {
    "release.container_image": ("image", "srun --container-image (nemo-run writes the srun line unquoted)"),
    "cluster.container_mounts[]": ("mount", "srun --container-mounts (unquoted, comma-joined)"),
    "cluster.account": ("name", "#SBATCH --account and the SLURM job name"),
    "cluster.partition": ("name", "#SBATCH --partition"),
    "cluster.time_limit": ("time", "#SBATCH --time"),
    "cluster.mem": ("mem", "#SBATCH --mem"),
    "cluster.tunnel.job_dir": (
        "abspath",
        "#SBATCH --output, srun --output/--chdir and the sbatch command (ssh tunnel)",
    ),
    "cluster.tunnel.host": ("host", f"the ssh login host ({_SSH_RSYNC})"),
    "cluster.tunnel.user": ("name", f"the ssh login user ({_SSH_RSYNC})"),
    "cluster.tunnel.port": ("port", f"ssh -p {_RSH}"),
    "cluster.tunnel.identity": ("keyfile", f"ssh -i {_RSH}"),
    "cluster.tunnel.known_hosts": ("keyfile", f"ssh -o UserKnownHostsFile {_RSH}"),
    **dict.fromkeys(
        ("model.name", "gpu.name", "precision.name"),
        ("name", "the run name: job folders, #SBATCH --job-name/--output, srun --output"),
    ),
    "env_vars.*": ("env_name", "`export NAME=value` in the sbatch script (the value is quoted)"),
    "job.wrapper[]": (None, "the payload command (each word quoted)"),
}

#: fields that may be unset (None): they are then left out of the script or command line
OPTIONAL_FIELDS = frozenset(
    {"cluster.mem", "cluster.tunnel.port", "cluster.tunnel.identity", "cluster.tunnel.known_hosts"}
)

#: nemo-run replaces every ``/nemo_run`` of a host-mode script by the job folder (``materialize``), so a value holding
#: it would reach the job changed.
NEMO_RUN_DIR = "/nemo_run"
#: Linux MAX_ARG_STRLEN: the longest single string (argument or ``NAME=value``) exec accepts.
MAX_WORD_BYTES = 131072


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 100 else text[:97] + "..."


def problem(grammar: str, value: Any) -> str | None:
    """Why ``value`` does not match :data:`GRAMMARS` ``[grammar]`` in full (None when it does)."""
    g = GRAMMARS[grammar]
    if grammar == "port" and isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        return f"is a {type(value).__name__}, not a string; it must be {g.says}"
    if g.pattern.fullmatch(value):
        if grammar == "env_name" and shell_owned(value):
            return (
                "is a variable the shell owns (bash sets or reads it itself: exported from a job script it would "
                "not reach the job as written, or would change how the script runs); use another name"
            )
        return None
    bad = sorted({c for c in value if not re.fullmatch(r"[A-Za-z0-9_./@+:#-]", c)})
    which = f" (it contains {''.join(bad)!r})" if bad else ""
    return f"must be {g.says}{which}"


def word_problem(value: Any, host_mode: bool = True) -> str | None:
    """Why ``value`` cannot be one quoted word of a script (None when it can): not a string, a NUL byte, not valid
    Unicode, longer than :data:`MAX_WORD_BYTES`, or -- in a host-mode script (``host_mode``: no container) --
    holding ``/nemo_run`` (nemo-run rewrites it there; in a container it is the job folder's mount point, which
    bridgebench's own node-side paths use: :mod:`bridgebench.launch.nodepaths`)."""
    if not isinstance(value, str):
        return f"is a {type(value).__name__} ({value!r}), not a string: write it as a quoted string"
    if "\x00" in value:
        return "contains a NUL byte (no shell word or environment value can hold one)"
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return "is not valid Unicode (a lone surrogate cannot be written to a script)"
    if size > MAX_WORD_BYTES:
        return f"is {size} bytes long; the kernel passes at most {MAX_WORD_BYTES} per argument (MAX_ARG_STRLEN)"
    if host_mode and NEMO_RUN_DIR in value:
        return f"contains {NEMO_RUN_DIR!r}, which nemo-run 0.11.1 replaces by the job folder in host-mode scripts"
    return None


def _violation(fld: str, value: Any, why: str, where: str) -> Violation:
    return Violation(RULE, f"{fld} {_shown(value)} {why} -- it goes into {where}")


def check(kind: str, value: Any, fld: str, where: str = "a SLURM script") -> str:
    """``value`` when it matches grammar ``kind``; else :class:`ShellValueError` naming ``fld``."""
    why = problem(kind, value)
    if why:
        raise ShellValueError([_violation(fld, value, why, where)])
    return value


def check_word(value: Any, fld: str, where: str = "a SLURM script (quoted)", host_mode: bool = True) -> str:
    """``value`` when it can be one quoted word (:func:`word_problem`); else :class:`ShellValueError`."""
    why = word_problem(value, host_mode)
    if why:
        raise ShellValueError([_violation(fld, value, why, where)])
    return value


#: a reference to a variable of the job's shell in an env value, ``${NAME}`` with an upper-case name (``SLURM_JOB_ID``,
#: ``SLURM_PROCID``, ``HOME`` ...): the one part of an env value the job's shell expands (:func:`shell_word`)
SHELL_REF = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)\}")


def shell_word(value: str) -> str:
    """``value`` as one bash word: literal text single-quoted (``shlex.quote``), each ``${NAME}`` of
    :data:`SHELL_REF` double-quoted (``"${NAME}"``) so the job's shell expands it there and then -- as a performance
    engineer writing ``env_vars.TAG=run-${SLURM_JOB_ID}`` means -- and nothing else is expanded, split or run
    (``'run-'"${SLURM_JOB_ID}"``)."""
    parts, pos = [], 0
    for m in SHELL_REF.finditer(value):
        if m.start() > pos:
            parts.append(shlex.quote(value[pos : m.start()]))
        parts.append(f'"${{{m.group(1)}}}"')
        pos = m.end()
    if pos < len(value) or not parts:
        parts.append(shlex.quote(value[pos:]))
    return "".join(parts)


def env_value(value: str) -> str:
    """An environment value as nemo-run must be given it for ``export NAME=<this>`` to set ``value`` (its
    ``${NAME}`` references expanded by the job's shell: :func:`shell_word`), then every ``$`` doubled (nemo-run runs
    ``string.Template.safe_substitute`` over env values, which turns ``$$`` back into ``$``)."""
    return shell_word(value).replace("$", "$$")


def _items(cfg: Any, dotted: str) -> Iterable[tuple[str, Any]]:
    """(field path, value) of a :data:`SCRIPT_FIELDS` entry in a composed config (absent fields: nothing)."""
    from omegaconf import OmegaConf

    base = dotted.removesuffix("[]").removesuffix(".*")
    node = OmegaConf.select(cfg, base, default=None, throw_on_missing=False)
    if node is None:
        return
    if dotted.endswith("[]"):
        items = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
        if not isinstance(items, list):
            yield base, items
            return
        for i, v in enumerate(items):
            yield f"{base}[{i}]", v
    elif dotted.endswith(".*"):
        for key in node:
            yield f"{base}.{key}", key
    else:
        yield base, node


def config_violations(cfg: Any) -> list[Violation]:
    """Every ``shell_safe_value`` violation of a composed config (:data:`SCRIPT_FIELDS`; ``env_vars`` values and
    ``job.wrapper`` words are quoted, so they only need to be strings a script can hold). The ssh fields count only on
    an ssh cluster; ``cluster.mem`` only when set."""
    out: list[Violation] = []
    ssh = str(cfg.cluster.tunnel.type) == "ssh"
    for dotted, (kind, where) in SCRIPT_FIELDS.items():
        if dotted.startswith("cluster.tunnel.") and not ssh:
            continue
        for fld, value in _items(cfg, dotted):
            if value is None and dotted in OPTIONAL_FIELDS:
                continue  # unset: SLURM's / ssh's defaults (no --mem; port 22, no -i, ~/.ssh/known_hosts)
            if dotted == "job.wrapper[]" and not fld.endswith("]"):
                out.append(
                    _violation(fld, value, "must be a list of strings (the words run before the payload)", where)
                )
                continue
            why = word_problem(value) if kind is None else problem(kind, value)
            if why:
                out.append(_violation(fld, value, why, where))
    env = cfg.get("env_vars") or {}
    for key in env:
        from bridgebench.config.secrets import by_name

        if by_name(cfg, str(key)) is not None:
            continue  # passed by name: the value is never read here (config/secrets.py)
        value = env[key]
        why = word_problem(value if not isinstance(value, (int, float, bool)) else str(value))
        if why:
            out.append(_violation(f"env_vars.{key}", value, why, "`export NAME=value` in the sbatch script"))
    return out


def check_config(cfg: Any) -> None:
    """Raise :class:`ShellValueError` listing every config value that cannot reach a SLURM script safely."""
    found = config_violations(cfg)
    if found:
        raise ShellValueError(found)


# --------------------------------------------------------------------------------------------------------------------
# The rendered script: what nemo-run wrote against what bridgebench meant
# --------------------------------------------------------------------------------------------------------------------

_SBATCH_LINE = re.compile(r"#SBATCH --([a-z][a-z-]*)(?:=([A-Za-z0-9_./@+:,=%-]+))?")
_PLAIN_WORD = re.compile(r"[A-Za-z0-9_./@+:,=%-][A-Za-z0-9_./@+:,=%#-]*")
#: the one expansion nemo-run itself puts into the srun line (``--output .../log-<job>_%j_${SLURM_RESTART_COUNT:-0}``)
_RESTART = "${SLURM_RESTART_COUNT:-0}"


@dataclass(kw_only=True)
class Intent:
    """What bridgebench means a job's sbatch script to do: the ``#SBATCH`` flags it sets (``None``: a bare flag), the
    environment the job must see, the container image and mounts of the ``srun`` line (None: host mode) and the
    payload command (the per-task script's body)."""

    sbatch: dict[str, str | None] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    image: str | None = None
    mounts: list[str] = field(default_factory=list)
    command: str = ""


def _fail(message: str) -> None:
    raise ShellValueError(
        [Violation(RULE, f"the script nemo-run rendered {message}; nothing was written or submitted")]
    )


def verify_sbatch(script: str, intent: Intent) -> None:
    """Check nemo-run's rendered sbatch ``script`` against ``intent`` (module docstring); :class:`ShellValueError`
    naming what differs."""
    lines = script.split("\n")
    body = next((i for i, line in enumerate(lines) if line and not line.startswith("#")), len(lines))
    if lines[:1] != ["#!/bin/bash"] or body >= len(lines) or lines[body] != "set -evx":
        _fail("does not start with nemo-run's header (#!/bin/bash ... #SBATCH ... set -evx): a value split a line")
    flags: dict[str, str | None] = {}
    for line in lines[:body]:
        if line.startswith("#SBATCH"):
            m = _SBATCH_LINE.fullmatch(line)
            if not m:
                _fail(f"has an #SBATCH line that is not one plain --flag[=value]: {_shown(line)}")
            if m.group(1) in flags:
                _fail(f"sets #SBATCH --{m.group(1)} twice")
            flags[m.group(1)] = m.group(2)
    for key, value in intent.sbatch.items():
        if key not in flags or flags[key] != value:
            _fail(f"has #SBATCH --{key}={flags.get(key)!r}, meant {value!r}")
    block = "\n".join(f"export {k}={shell_word(v)}" for k, v in intent.env.items())
    if intent.env and f"\n{block}\n" not in script:
        _fail("does not export the environment as meant (a name or value was changed on the way)")
    at = script.find("\n# Command 1\n")
    after = script[at:].split("\n")[2:] if at >= 0 else []
    srun = next((line for line in after if line), "")  # the first line after the command's heading
    words = srun.replace(_RESTART, "0").split(" ")
    if not srun.startswith("srun "):
        _fail(f"has no srun line after '# Command 1' (found {_shown(srun)})")
    bad = [w for w in words if not _PLAIN_WORD.fullmatch(w)]
    if bad:
        shown = ", ".join(map(_shown, bad[:3]))
        _fail(f"has an srun line that is not plain words: {shown} would be split or run by bash")
    got_image = words[words.index("--container-image") + 1] if "--container-image" in words else None
    if got_image != intent.image:
        _fail(f"starts the container {got_image!r}, meant {intent.image!r}")
    if intent.image is not None:
        mounts = words[words.index("--container-mounts") + 1].split(",") if "--container-mounts" in words else []
        if mounts[: len(intent.mounts)] != list(intent.mounts):
            _fail(f"mounts {mounts!r}, meant {intent.mounts!r} (+ nemo-run's job folder)")


def verify_payload(text: str, command: str) -> None:
    """The per-task script nemo-run wrote must be ``#!/usr/bin/bash`` + bridgebench's ``command``, unchanged."""
    if text.rstrip("\n") != f"#!/usr/bin/bash\n{command}":
        _fail("wrote a payload script other than the payload command (nemo-run rewrote it)")


def env_intent(env: Mapping[str, Any], host_mode: bool = True) -> dict[str, str]:
    """The environment a job must see: names checked (:data:`GRAMMARS` ``env_name``), values as strings (checked by
    :func:`check_word`; ``host_mode``: the job runs without a container)."""
    out = {}
    for key, value in env.items():
        check("env_name", str(key), f"env_vars.{key} (name)", "`export NAME=value` in the sbatch script")
        text = value if isinstance(value, str) else str(value)
        out[str(key)] = check_word(text, f"env_vars.{key}", "`export NAME=value` in the sbatch script", host_mode)
    return out
