"""Credentials never go into a config, plan, script, ledger or record (rule ``secret_in_config``).

Jobs get credentials from the submitting environment (README "Secrets"), so a composed config must hold none. This
module refuses, *before anything is built or written*:

* an environment variable (``env_vars.*``, ``cluster.client_env.*``) whose **name** looks like a credential: one of its
  ``_``/``-``/``.``-separated words is in :data:`SECRET_WORDS` (``HF_TOKEN``, ``wandb_api_key``, ``MY_PASSWORD``;
  ``TOKENIZERS_PARALLELISM`` and HybridEP's ``NUM_OF_TOKENS_PER_CHUNK_COMBINE_API`` are not: their words are
  ``TOKENIZERS`` and ``TOKENS``);
* any string **value** anywhere in the config that looks like a credential: a known token prefix with the token's
  shape (:data:`TOKEN_PATTERNS`), a PEM private key or a JSON Web Token.

Pure Python (``re`` only): the check runs on the composed config in milliseconds, before the Megatron import.
Messages never repeat a value, only its key and the kind of token (so the refusal itself leaks nothing).
"""

from __future__ import annotations

import re
from typing import Any, Iterator, Mapping

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
        "PRIVATE",
        "COOKIE",
        "SESSION",
    }
)

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

_WORD_SPLIT = re.compile(r"[_.\-\s]+")
#: where the config holds environment variables (their names are judged too)
ENV_SECTIONS = ("env_vars", "cluster.client_env")
HOW = (
    "pass credentials through the submitting environment (export it in the shell that runs `bridgebench submit`; "
    "README 'Secrets'), never as a config value"
)


def secret_name(name: str) -> bool:
    """True when one word of ``name`` (split on ``_ - .``) is a credential word (:data:`SECRET_WORDS`)."""
    return any(word.upper() in SECRET_WORDS for word in _WORD_SPLIT.split(str(name)) if word)


def token_kind(value: Any) -> str | None:
    """The kind of credential ``value`` looks like (:data:`TOKEN_PATTERNS`), or None."""
    if not isinstance(value, str) or len(value) < 16:
        return None
    for kind, pattern in TOKEN_PATTERNS:
        if pattern.search(value):
            return kind
    return None


def redact(text: str) -> str:
    """``text`` with credential-shaped substrings replaced by ``<redacted>`` (for messages that echo input)."""
    for _, pattern in TOKEN_PATTERNS:
        text = pattern.sub("<redacted>", text)
    return text


def redact_overrides(overrides: list[str]) -> str:
    """Hydra overrides joined for a message, with the value of a credential-like key or value redacted."""
    out = []
    for line in overrides:
        key, eq, value = line.partition("=")
        last = key.lstrip("+~").rsplit(".", 1)[-1]
        out.append(f"{key}=<redacted>" if eq and (secret_name(last) or token_kind(value)) else redact(line))
    return " ".join(out)


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


def secret_violations(plain: Mapping[str, Any]) -> list[Violation]:
    """Violations of ``secret_in_config`` in a config given as plain containers (``OmegaConf.to_container``).

    Every message names the key and the rule, never the value.
    """
    out = []
    for section in ENV_SECTIONS:
        for name in _section(plain, section):
            if secret_name(name):
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
    """Raise :class:`RuleError` (rule ``secret_in_config``) when a composed config holds something credential-like.

    ``cfg`` is a DictConfig or a plain mapping. Interpolations are resolved first (a value may come from ``oc.env``).
    """
    if not isinstance(cfg, Mapping) or hasattr(cfg, "_get_node"):
        from omegaconf import OmegaConf

        plain = OmegaConf.to_container(cfg, resolve=True)
    else:
        plain = cfg
    plain = {k: v for k, v in plain.items() if k != "hydra"}
    found = secret_violations(plain)
    if found:
        raise RuleError(found)
