"""Credentials never go into a config, plan, script, ledger or record (rule ``secret_in_config``).

Jobs get credentials from the submitting environment (README "Secrets"), so a composed config must hold none. This
module refuses, *before anything is built or written*:

* an environment variable (``env_vars.*``, ``cluster.client_env.*``) whose **name** looks like a credential: one of its
  ``_``/``-``/``.``-separated words is in :data:`SECRET_WORDS` (``HF_TOKEN``, ``wandb_api_key``, ``MY_PASSWORD``;
  ``TOKENIZERS_PARALLELISM`` and HybridEP's ``NUM_OF_TOKENS_PER_CHUNK_COMBINE_API`` are not: their words are
  ``TOKENIZERS`` and ``TOKENS``);
* any string **value** anywhere in the config that looks like a credential: a known token prefix with the token's
  shape (:data:`TOKEN_PATTERNS`), a PEM private key, a JSON Web Token, or a URL whose user-info holds a password
  (``https://user:pass@host``).

Names are judged case-insensitively, per word: words split on ``_ - .``, spaces and camelCase (``hfToken`` -> ``hf``,
``Token``), trailing digits dropped; a word is a credential word (:data:`SECRET_WORDS`), or ends with a credential
fragment (:data:`SECRET_FRAGMENTS`: ``HFTOKEN``, ``WANDBAUTH``, ``DBPASSWD``), or starts with one that no ordinary word
starts with (``SECRETKEY``, ``PASSWORDFILE``).

Values read from the environment or files by a resolver (rule ``env_resolver``): a composed config is resolved before
it is written (``config.yaml``, ``submit.sh``, every record's ``config``), so ``${oc.env:MYDBPASS}`` would copy the
password into each. Instead:

* ``env_vars.NAME: ${oc.env:VAR}`` (the whole value, no default) is **passed by name**: :func:`pass_by_name` (called by
  :func:`bridgebench.config.compose.compose`) turns it into the literal text ``${oc.env:VAR}`` before anything reads
  it, that text is what plans and records hold, and the job's payload command sets ``NAME="${VAR}"`` from its own
  environment on the node (:func:`bridgebench.launch.executor.payload_command`);
* ``oc.env`` of bridgebench's and SLURM's own settings variables (``BRIDGEBENCH_*``, ``SLURM_*``: paths, the SLURM
  config file) is resolved as usual -- unless the variable's name looks like a credential;
* anything else that reads the environment or a file (``oc.env`` elsewhere, ``oc.decode``, any resolver that is not
  one of the config-only ones in :data:`CONFIG_RESOLVERS`) is refused before anything is built or written -- at any
  depth: every value is parsed with OmegaConf's own grammar (:func:`resolver_calls`), so a read nested in a default
  or an argument (``${oc.select:nope,${oc.env:DB_PASSWORD}}``, ``${oc.create:${oc.env:X}}``) is found as surely as
  a top-level one, and a resolver whose name or variable is itself computed is refused.

Pure Python (``re`` and OmegaConf's parser): the check runs on the composed config in milliseconds, before the
Megatron import.
Messages never repeat a value, only its key and the kind of token (so the refusal itself leaks nothing);
:func:`redact` removes credential-shaped text from any message (the CLI's error boundary uses it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from bridgebench.config.containers import plain_dict
from bridgebench.config.rules import RuleError, Violation

#: name words that mark a credential (compared upper-case, per word)
SECRET_WORDS = frozenset(
    {
        "TOKEN",
        "KEY",
        "KEYS",
        "APIKEY",
        "SECRET",
        "SECRETS",
        "PASSWORD",
        "PASSWORDS",
        "PASSWD",
        "PASSPHRASE",
        "CREDENTIAL",
        "CREDENTIALS",
        "CREDS",
        "PAT",
        "PASS",
        "AUTH",
        "PRIVATE",
        "COOKIE",
        "SESSION",
        "BEARER",
        "PWD",
        "PRIVKEY",
        "KEYTAB",
        "TOKENFILE",
        "SSHPASS",
    }
)
#: fragments that make a word a credential word when it ends with one (``HFTOKEN``, ``WANDBAUTH``, ``DBPASSWD``)
SECRET_FRAGMENTS = (
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "APIKEY",
    "ACCESSKEY",
    "PRIVATEKEY",
    "CREDENTIAL",
    "CREDENTIALS",
    "CREDS",
    "AUTH",
    "BEARER",
    "PWD",  # MYSQL_PWD is two words; DBPWD, NVCRPWD one
    "PASS",  # SSHPASS, DBPASS (ordinary words ending with PASS: ORDINARY_PASS_WORDS)
    "PRIVKEY",
    "KEYTAB",
)
#: ... or starts with one (no ordinary word starts with these; TOKEN and AUTH are left out: TOKENIZERS, AUTHOR)
SECRET_PREFIXES = (
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "APIKEY",
    "CREDENTIAL",
    "TOKENFILE",
    "PRIVKEY",
    "KEYTAB",
    "BEARER",
)
#: ordinary English words that end with the fragment PASS (a cache BYPASS is no password)
ORDINARY_PASS_WORDS = frozenset(
    {"BYPASS", "COMPASS", "SURPASS", "ENCOMPASS", "TRESPASS", "OVERPASS", "UNDERPASS", "MULTIPASS", "SINGLEPASS"}
)
#: a name whose LAST word is ACCESS names an access credential (``HF_ACCESS``, ``GITHUB_ACCESS``), unless the word
#: before it says what kind of access it switches (``NCCL_P2P_ACCESS``-like tuning names)
ACCESS_WORD = "ACCESS"
ORDINARY_ACCESS_KINDS = frozenset(
    {"P2P", "PEER", "MEM", "MEMORY", "DIRECT", "DISK", "FILE", "READ", "WRITE", "RANDOM", "IPC", "GPU", "HOST", "NET"}
)
#: environment names the shell itself owns (bash sets or reads them: Bash Reference Manual 5.2, "Shell Variables"
#: and "Bourne Shell Variables"): a config may not set them (rule ``shell_safe_value``,
#: :func:`bridgebench.launch.shellsafe.shell_owned`), and ``PWD`` / ``OLDPWD`` are judged there, not as credentials
SHELL_NAMES = frozenset({"PWD", "OLDPWD"})

#: (kind, pattern) of credential-shaped values. Sources: GitHub "Behind GitHub's new authentication token formats"
#: (2021-04-05) and fine-grained PATs; Hugging Face "User access tokens" (hf_ + 34 letters); OpenAI / Anthropic API
#: keys (sk-, sk-ant-); Slack token types (xoxb-, xoxp-, xoxa-, xoxr-, xoxs-, xoxe-); AWS IAM unique ID prefixes
#: (AKIA long-term, ASIA temporary access key ids); Google API keys (AIza + 35); GitLab PATs (glpat-); NVIDIA API
#: catalog keys (nvapi-); npm (npm_ + 36) and PyPI (pypi-AgE) tokens; RFC 7468 PEM private keys; RFC 7519 JWTs.
TOKEN_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pattern))
    for kind, pattern in (
        ("GitHub token", r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"),
        ("Hugging Face token", r"\bhf_[A-Za-z0-9]{30,}"),
        ("OpenAI/Anthropic API key", r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}"),
        ("Slack token", r"\bxox[abeprs]-[A-Za-z0-9-]{10,}"),
        ("AWS access key id", r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"),
        ("Google API key", r"\bAIza[A-Za-z0-9_-]{35}"),
        ("GitLab token", r"\bglpat-[A-Za-z0-9_-]{20,}"),
        ("NVIDIA API key", r"\bnvapi-[A-Za-z0-9_-]{20,}"),
        ("npm token", r"\bnpm_[A-Za-z0-9]{36}"),
        ("PyPI token", r"\bpypi-AgE[A-Za-z0-9_-]{20,}"),
        ("private key", r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
        ("JSON Web Token", r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
    )
)
#: RFC 3986 user-info with a password: ``scheme://user:password@host`` (the password is group 2)
URL_PASSWORD = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*):([^/\s@]+)@")
#: ``NAME=value``, ``"NAME": "value"`` (JSON, Python reprs) and ``NAME: value`` (YAML; upper-case names only, so
#: that ``secret_in_config: env_vars...`` in a message is not taken for one) where NAME may be a credential's
_FRAGMENT = (
    r"(?i:[A-Za-z0-9_.-]*(?:token|secret|pass|pwd|key|cred|auth|pat|private|cookie|session|bearer|access)"
    r"[A-Za-z0-9_.-]*)"
)
_ASSIGNMENT = re.compile(
    rf"""({_FRAGMENT})(=['"]?|['"]\s*:\s*['"]?)([^\s'",{{}}\[\]]+)"""
    r"""|(?<![\w.])([A-Z0-9_]*(?:TOKEN|SECRET|PASS|PWD|KEY|AUTH|PAT|BEARER|ACCESS)[A-Z0-9_]*)(: +)([^\s{\[]\S*)"""
)

_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|true|false|null|None|True|False")
_PLACEHOLDER_NAMES = frozenset({"key", "keys"})
#: known secret values shorter than this are not replaced wherever they appear (too likely to be ordinary text; the
#: structural patterns still catch them in ``NAME=value`` and URLs)
MIN_KNOWN = 6
_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")
#: where the config holds environment variables (their names are judged too)
ENV_SECTIONS = ("env_vars", "cluster.client_env")
HOW = (
    "pass credentials through the submitting environment (export it in the shell that runs `bridgebench submit`; "
    "README 'Secrets'), never as a config value"
)


def _words(name: str) -> list[str]:
    """Upper-case words of a name: split on non-alphanumerics and camelCase, trailing digits dropped."""
    return [w.upper().rstrip("0123456789") for w in _WORD_SPLIT.split(str(name)) if w]


def secret_name(name: str) -> bool:
    """True when ``name`` looks like a credential's (module docstring: per word, case-insensitive). ``PWD`` and
    ``OLDPWD`` alone are the shell's working directories (:data:`SHELL_NAMES`), not passwords."""
    if str(name).upper() in SHELL_NAMES:
        return False
    words = _words(name)
    for word in words:
        if word in ORDINARY_PASS_WORDS:
            continue
        if word in SECRET_WORDS or word.endswith(SECRET_FRAGMENTS) or word.startswith(SECRET_PREFIXES):
            return True
    parts = [w.upper() for w in re.split(r"[^A-Za-z0-9]+", str(name)) if w]  # P2P stays one part here
    if len(words) >= 2 and words[-1] == ACCESS_WORD and (len(parts) < 2 or parts[-2] not in ORDINARY_ACCESS_KINDS):
        return True
    return False


def token_kind(value: Any) -> str | None:
    """The kind of credential ``value`` looks like (:data:`TOKEN_PATTERNS`, a URL with a password), or None."""
    if not isinstance(value, str):
        return None
    if URL_PASSWORD.search(value):
        return "URL with a password in its user-info"
    if len(value) < 16:
        return None
    for kind, pattern in TOKEN_PATTERNS:
        if pattern.search(value):
            return kind
    return None


def redact(text: str, known: Any = ()) -> str:
    """``text`` with credential-shaped substrings replaced by ``<redacted>``: token-shaped values
    (:data:`TOKEN_PATTERNS`), URL passwords, the value of ``NAME=value`` / ``NAME: value`` where ``NAME`` looks like a
    credential's (:func:`secret_name`), and every string of ``known`` (values known to be secret, e.g. from the
    command line) of :data:`MIN_KNOWN` characters or more."""
    text = str(text)
    for value in sorted({str(v) for v in known if v and len(str(v)) >= MIN_KNOWN}, key=len, reverse=True):
        text = text.replace(value, "<redacted>")
    for _, pattern in TOKEN_PATTERNS:
        text = pattern.sub("<redacted>", text)
    text = URL_PASSWORD.sub(r"\1:<redacted>@", text)

    def assignment(m: re.Match[str]) -> str:
        name, sep, value = m.group(1, 2, 3) if m.group(1) else m.group(4, 5, 6)
        last = name.rsplit(".", 1)[-1]
        if (
            not secret_name(last)
            or ordinary_field(name)  # model.moe_token_dispatcher_type=alltoall: the MoE token dispatcher
            or value == "<redacted>"
            or _NUMBER.fullmatch(value.rstrip(",;)"))  # a figure (model_flops_per_token: 5.1e9) is no secret
            or last.lower() in _PLACEHOLDER_NAMES  # "expected key=value"
        ):
            return str(m.group(0))
        return f"{name}{sep}<redacted>"

    return _ASSIGNMENT.sub(assignment, text)


def redact_override(line: str) -> str:
    """One Hydra override as it may be shown or written: the value of a credential-like key or value redacted."""
    key, eq, value = line.partition("=")
    last = key.lstrip("+~").rsplit(".", 1)[-1]
    return f"{key}=<redacted>" if eq and (secret_name(last) or token_kind(value)) else redact(line)


def redact_overrides(overrides: list[str]) -> str:
    """Hydra overrides joined for a message, with the value of a credential-like key or value redacted."""
    return " ".join(redact_override(line) for line in overrides)


# --------------------------------------------------------------------------------------------------------------------
# Values read from the environment or files by a resolver
# --------------------------------------------------------------------------------------------------------------------

#: resolvers whose value comes from the config itself (safe to resolve and write); ``bb.*`` are bridgebench's own
#: (config/schema.py), ``hydra``/``now`` Hydra's run facts
CONFIG_RESOLVERS = frozenset(
    {"oc.select", "oc.dict.keys", "oc.dict.values", "oc.create", "oc.deprecated", "hydra", "now"}
)
#: environment variables that hold bridgebench's and SLURM's own settings (configs/paths, configs/cluster)
SETTINGS_VARIABLE = re.compile(r"(?:BRIDGEBENCH|SLURM)_[A-Z0-9_]+")
_BY_NAME = re.compile(r"\\?\$\{oc\.env:([A-Z_][A-Z0-9_]*)\}")


def _raw(node: Any) -> Any:
    """The unresolved value of an OmegaConf value node (the interpolation text), or the plain value."""
    get = getattr(node, "_value", None)
    return get() if callable(get) else node


def by_name(cfg: Any, key: str) -> str | None:
    """The variable ``env_vars.<key>`` is passed by (``${oc.env:VAR}``, also as the literal text it becomes after
    :func:`pass_by_name`), or None when it is a plain value."""
    env = cfg.get("env_vars") if hasattr(cfg, "get") else None
    if env is None or key not in env:
        return None
    node = env._get_node(key) if hasattr(env, "_get_node") else env[key]
    m = _BY_NAME.fullmatch(str(_raw(node)))
    return m.group(1) if m else None


def by_name_all(cfg: Any) -> dict[str, str]:
    """``{NAME: VAR}`` of every ``env_vars`` entry passed by name (:func:`by_name`)."""
    env = cfg.get("env_vars") if hasattr(cfg, "get") else None
    return {str(k): var for k in (env or {}) if (var := by_name(cfg, str(k))) is not None}


def pass_by_name(cfg: Any) -> dict[str, str]:
    """Turn every ``env_vars.NAME: ${oc.env:VAR}`` of a composed config into the literal text ``${oc.env:VAR}`` (so
    no resolve ever reads the variable here); returns ``{NAME: VAR}``."""
    names = by_name_all(cfg)
    for key, var in names.items():
        cfg.env_vars[key] = "\\${oc.env:" + var + "}"
    return names


def _raw_strings(cfg: Any) -> Iterator[tuple[str, str]]:
    plain = plain_dict(cfg, resolve=False) if hasattr(cfg, "_get_node") else cfg
    for path, value in _strings({k: v for k, v in plain.items() if k != "hydra"}, ""):
        if "${" in value:
            yield path, value


@dataclass(frozen=True, kw_only=True)
class ResolverCall:
    """One resolver call found anywhere in a value, at any depth: its name (None when the name is itself computed
    by an interpolation), and its first argument when that is plain text (None when computed or absent)."""

    name: str | None
    first: str | None


def resolver_calls(text: str) -> list[ResolverCall]:
    """Every resolver call of ``text`` at every depth (``${oc.select:x,${oc.env:VAR}}`` gives ``oc.select`` and
    ``oc.env``), found with OmegaConf's own grammar (``omegaconf.grammar_parser.parse``, the parser OmegaConf resolves
    with), not with a pattern. Escaped ``\\${...}`` is text, as OmegaConf reads it.

    Raises:
        omegaconf.errors.GrammarParseError: ``text`` is not a value OmegaConf can parse.
    """
    from omegaconf import grammar_parser
    from omegaconf.grammar.gen.OmegaConfGrammarParser import OmegaConfGrammarParser as P

    calls = []
    stack = [grammar_parser.parse(text)]
    while stack:
        node = stack.pop()
        if isinstance(node, P.InterpolationResolverContext):
            ctx: Any = node  # antlr4 contexts are untyped
            rname = ctx.resolverName()
            plain_name = not rname.getTypedRuleContexts(P.InterpolationContext)
            seq = ctx.sequence()
            elements = seq.element() if seq is not None else []
            first: Any = elements[0] if elements else None
            plain_first = first is not None and not _has_interpolation(first, P)
            calls.append(
                ResolverCall(
                    name=rname.getText() if plain_name else None, first=first.getText().strip() if plain_first else None
                )
            )
        stack.extend(node.getChildren() if hasattr(node, "getChildren") else ())
    return calls


def _has_interpolation(node: Any, P: Any) -> bool:
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, P.InterpolationContext):
            return True
        stack.extend(n.getChildren() if hasattr(n, "getChildren") else ())
    return False


def _env_read_allowed(call: ResolverCall) -> bool:
    """``oc.env`` of a settings variable named in plain text (``BRIDGEBENCH_*``, ``SLURM_*``, not credential-like)."""
    var = call.first
    return var is not None and bool(SETTINGS_VARIABLE.fullmatch(var)) and not secret_name(var)


def resolver_violations(cfg: Any) -> list[Violation]:
    """Violations of ``env_resolver``: values that read the environment or a file through a resolver -- at any depth
    of nested interpolations (:func:`resolver_calls`) -- and would be written (module docstring). Messages name the
    field and the resolver, never a value (nor the variable, which may itself be telling)."""
    from omegaconf.errors import GrammarParseError

    out = []
    for path, text in _raw_strings(cfg):
        if path.startswith("env_vars.") and _BY_NAME.fullmatch(text):
            continue  # passed by name
        try:
            calls = resolver_calls(text)
        except GrammarParseError:
            out.append(
                Violation(
                    "env_resolver",
                    f"{path}: the value is not an interpolation OmegaConf can parse, so what it would read cannot be "
                    "checked; escape a literal ${ as \\${",
                )
            )
            continue
        for call in calls:
            resolver = call.name
            if resolver is not None and (resolver in CONFIG_RESOLVERS or resolver.startswith("bb.")):
                continue
            if resolver == "oc.env" and _env_read_allowed(call):
                continue
            if resolver is None:
                what = "${<computed>:...}, a resolver whose name is computed,"
                how = "name the resolver in plain text"
            elif resolver == "oc.env":
                var = call.first or "VAR"
                what = "${oc.env:...}"
                how = (
                    f"pass it by name as the whole value of an env var (env_vars.NAME='${{oc.env:{var}}}': the job "
                    f"reads ${var} on the node), or export it in the shell that runs `bridgebench submit`"
                )
            else:
                what = f"${{{resolver}:...}}"
                how = "write the value itself (a config holds values, not reads of files or the environment)"
            out.append(
                Violation(
                    "env_resolver",
                    f"{path}: {what} reads the environment or a file at plan time (nested interpolations "
                    f"included) and its value would be written into config.yaml, submit.sh and every record; {how}",
                )
            )
    return out


def disk_container(cfg: Any) -> dict[str, Any]:
    """The config as bridgebench writes it (``config.yaml``, records, the config hash): resolved, except the
    ``env_vars`` passed by name, which stay the text ``${oc.env:VAR}``; without the ``hydra`` node."""

    plain, _ = _resolved(cfg)
    env = plain.get("env_vars")
    if isinstance(env, dict):  # ${NAME} for the job's shell (config/env_refs.py shell_references) stays escaped
        for key, value in env.items():
            if isinstance(value, str) and "${" in value:
                env[key] = _SHELL_REF_OUT.sub(lambda m: "\\${" + m.group(1) + "}", value)
    return plain


def _resolved(cfg: Any) -> tuple[dict[str, Any], set[str]]:
    """(the resolved config without ``hydra``, with each env var passed by name as the text ``${oc.env:VAR}``; the
    names of those env vars)."""
    names = by_name_all(cfg)
    if names:
        cfg = cfg.copy()
        for key, var in names.items():
            cfg.env_vars[key] = "\\${oc.env:" + var + "}"
    plain = plain_dict(cfg, resolve=True)
    plain.pop("hydra", None)
    return plain, set(names)


#: an unescaped ``${NAME}`` (upper-case) in a resolved env value: a reference for the job's shell
_SHELL_REF_OUT = re.compile(r"(?<!\\)\$\{([A-Z_][A-Z0-9_]*)\}")
#: ``${`` and the backslashes right before it, in a resolved string
_INTERPOLATION_START = re.compile(r"(\\*)\$\{")


def omegaconf_container(cfg: Any) -> dict[str, Any]:
    """:func:`disk_container` as YAML that OmegaConf reads back as itself (``config.yaml``, the job's node config,
    the config hash): every string written so, each ``${`` escaped as ``\\${`` and the backslashes before it
    doubled (OmegaConf 2.3's escaping of interpolation strings), except the env vars passed by name, which stay the
    interpolation ``${oc.env:VAR}`` the job resolves. A resolved config holds values only, so any other ``${`` is
    text a user wrote (a wrapper word ``${)``, an env value ``${x}``, a shell reference ``${NAME}`` for the job's
    shell); unescaped, OmegaConf would read it as an interpolation when the YAML is created or loaded (a
    ``GrammarParseError`` for ``${)``, another value for ``${x}``)."""
    plain, names = _resolved(cfg)

    def walk(node: Any, path: tuple[str, ...]) -> Any:
        if isinstance(node, dict):
            return {k: walk(v, (*path, str(k))) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v, path) for v in node]
        if (
            isinstance(node, str)
            and "${" in node
            and not (len(path) == 2 and path[0] == "env_vars" and path[1] in names)
        ):
            return _INTERPOLATION_START.sub(lambda m: m.group(1) * 2 + "\\${", node)
        return node

    out: dict[str, Any] = walk(plain, ())
    return out


def _strings(node: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(node, Mapping):
        for key, value in node.items():
            yield from _strings(value, f"{path}.{key}" if path else str(key))
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            yield from _strings(value, f"{path}[{i}]")
    elif isinstance(node, str):
        yield path, node


def _section(plain: Mapping[str, Any], dotted: str) -> Mapping[str, Any]:
    node: Any = plain
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node if isinstance(node, Mapping) else {}


#: config fields whose name holds a credential word in its ordinary sense: the MoE token dispatcher, the token drop
#: policy, a tokenizer's regex (Megatron-Bridge 0.6.2 ``TransformerConfig`` / ``TokenizerConfig`` fields typed ``str``
#: or ``Any``: their values are enum words or a pattern, never a credential). Every other credential-named field
#: holding a string -- ``logger.comet_api_key`` -- is refused (:func:`secret_violations`).
ORDINARY_FIELDS = frozenset(
    {
        "model.moe_token_dispatcher_type",
        "model.inference_moe_token_dispatcher_type",
        "model.moe_token_drop_policy",
        "tokenizer.tiktoken_pattern",
    }
)


def ordinary_field(key: str) -> bool:
    """``key`` (``section.field``, a leading ``+``/``~`` ignored) is one of :data:`ORDINARY_FIELDS`, or a
    Megatron-Bridge field typed ``bool`` / ``int`` / ``float`` (``tokenizer.tiktoken_num_special_tokens``,
    ``model.linear_key_head_dim``: no credential fits; their values are not scrubbed from every line printed)."""
    from bridgebench.config.schema import mbridge_fields

    key = key.lstrip("+~")
    section, _, name = key.partition(".")
    info = mbridge_fields()["sections"].get(section, {}).get(name) if name and "." not in name else None
    return key in ORDINARY_FIELDS or (info is not None and info["type"] in ("bool", "int", "float"))


def _secret_fields(node: Any, path: str) -> Iterator[str]:
    """Dotted paths outside the environment sections whose last name looks like a credential's and whose value is a
    non-empty string (not one of :data:`ORDINARY_FIELDS`)."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            here = f"{path}.{key}" if path else str(key)
            if here in ENV_SECTIONS:
                continue
            if isinstance(value, str) and value and secret_name(str(key)) and not ordinary_field(here):
                yield here
            yield from _secret_fields(value, here)


def secret_violations(plain: Mapping[str, Any], by_name_keys: Any = ()) -> list[Violation]:
    """Violations of ``secret_in_config`` in a config given as plain containers (as written: :func:`disk_container`).
    ``by_name_keys``: ``env_vars`` entries passed by name, whose value is never written (their name may look like a
    credential's: ``HF_TOKEN: ${oc.env:HF_TOKEN}`` is how a job gets one). Outside the environment sections a field
    whose name looks like a credential's and that holds a string is refused too (``logger.comet_api_key``: Comet
    reads ``COMET_API_KEY`` from the job's environment), but for :data:`ORDINARY_FIELDS`.

    Every message names the key and the rule, never the value.
    """
    out = [
        Violation("secret_in_config", f"{path}: the name looks like a credential's and it holds a string; {HOW}")
        for path in _secret_fields(plain, "")
    ]
    for section in ENV_SECTIONS:
        for name in _section(plain, section):
            if secret_name(name) and not (section == "env_vars" and name in by_name_keys):
                out.append(
                    Violation(
                        "secret_in_config",
                        f"{section}.{name}: the name looks like a credential; {HOW}",
                    )
                )
    for path, value in _strings(plain, ""):
        kind = token_kind(value)
        if kind:
            out.append(Violation("secret_in_config", f"{path}: the value looks like a {kind}; {HOW}"))
    return out


def check_secrets(cfg: Any) -> None:
    """Raise :class:`RuleError` (rules ``secret_in_config``, ``env_resolver``) when a composed config holds something
    credential-like, or reads the environment or a file into a value that would be written.

    ``cfg`` is a DictConfig or a plain mapping. What is judged is the config as written (:func:`disk_container`).
    """
    if not isinstance(cfg, Mapping) or hasattr(cfg, "_get_node"):
        found = resolver_violations(cfg)
        if found:  # before anything is resolved: resolving would read the variable (and an error could echo it)
            raise RuleError(found)
        names = by_name_all(cfg)
        plain = disk_container(cfg)
    else:
        found, names = [], {}
        plain = {k: v for k, v in cfg.items() if k != "hydra"}
    found += secret_violations(plain, names)
    if found:
        raise RuleError(found)
