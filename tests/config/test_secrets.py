"""Secrets by pattern (rule ``secret_in_config``): credential-like env names or values anywhere in a config are refused
before anything is built or written, and no message repeats them."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from bridgebench.config.compose import compose
from bridgebench.config.rules import RULES, RuleError
from bridgebench.config.secrets import check_secrets, redact_overrides, secret_name, token_kind

# Token-shaped strings made up for the tests (right prefix and length, random letters).
TOKENS = {
    "GitHub token": "ghp_" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb7c",
    "GitHub fine-grained": "github_pat_" + "11ABCDEFG0abcdefghijklmnopqrstuvwxyz0123456789",
    "Hugging Face token": "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh",
    "OpenAI key": "sk-" + "proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8t",
    "Slack token": "xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOp",
    "AWS key id": "AKIA" + "IOSFODNN7EXAMPLE",
    "NVIDIA key": "nvapi-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z",
    "PEM key": "-----BEGIN OPENSSH " + "PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA",
}


@pytest.mark.parametrize(
    "name",
    [
        "HF_TOKEN",
        "GITHUB_TOKEN",
        "wandb_api_key",
        "MY_PASSWORD",
        "db-secret",
        "AWS_SECRET_ACCESS_KEY",
        "NGC_API_KEY",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "svc.apikey",
        # issue 17: word fragments and camelCase, case-insensitive
        "HFTOKEN",
        "hfToken",
        "WANDB_AUTH",
        "GITHUB_PAT",
        "MY_PAT",
        "PASSWD",
        "DB_PASS",
        "dbPassword",
        "SecretKey",
        "NGCAPIKEY",
        "token2",
    ],
)
def test_credential_names(name):
    assert secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "TOKENIZERS_PARALLELISM",
        "NVLINK_DOMAIN_SIZE",
        "CUDA_DEVICE_MAX_CONNECTIONS",
        "PATH",
        "MONKEY_PATCH",
        "HF_HUB_OFFLINE",
        "NUM_OF_TOKENS_PER_CHUNK_COMBINE_API",
        "AUTHOR",
        "PATTERN",
        "TOKENIZER_NAME",
        "PWD",
    ],
)
def test_ordinary_names(name):
    assert not secret_name(name)


@pytest.mark.parametrize("kind,value", list(TOKENS.items()))
def test_token_values(kind, value):
    assert token_kind(value) is not None
    assert token_kind(f"prefix {value} suffix") is not None


@pytest.mark.parametrize(
    "value",
    [
        "hf_configs/Qwen__Qwen3-30B-A3B",
        "nvcr.io/nvidia/nemo:26.02",
        "sk-short",
        "False",
        "expandable_segments:True",
        "Et*4|(t*4|)*14tL",
        "a" * 64,
    ],
)
def test_ordinary_values(value):
    assert token_kind(value) is None


def test_every_shipped_recipe_and_cluster_passes():
    """Every recipe at every release that has it (each release has its own env vars), and every cluster."""
    from bridgebench.config.compose import group_options, recipe_releases

    for recipe in group_options("recipe"):
        for release in recipe_releases(recipe):
            check_secrets(compose([f"recipe={recipe}", f"release={release}"]))
    for cluster in group_options("cluster"):
        check_secrets(compose(["recipe=kimi_k2_gb300_mxfp8", "release=26.08", f"cluster={cluster}"]))


@pytest.mark.parametrize(
    "override",
    [
        f"+env_vars.RUN_NOTE={TOKENS['GitHub token']}",  # value under an innocent name
        f"+env_vars.X={TOKENS['Hugging Face token']}",
        "+env_vars.GITHUB_TOKEN=abc",  # name alone
        "+env_vars.wandb_api_key=0123",
        f"cluster.client_env.SLURM_CONF={TOKENS['AWS key id']}",
        "+logger.comet_api_key=0123abcd",  # a Megatron-Bridge field named like a credential, holding a string
    ],
)
def test_config_with_a_secret_is_refused_naming_the_rule(override):
    with pytest.raises(RuleError) as err:
        check_secrets(compose(["recipe=qwen3_30b_a3b_gb300_mxfp8", override]))
    assert "secret_in_config" in str(err.value) and "secret_in_config" in RULES
    value = override.split("=", 1)[1]
    if len(value) > 8:
        assert value not in str(err.value)  # the refusal itself leaks nothing


def test_redacted_labels():
    label = redact_overrides(["recipe=x", f"+env_vars.NOTE={TOKENS['Slack token']}", "+env_vars.HF_TOKEN=abc"])
    assert TOKENS["Slack token"] not in label and "HF_TOKEN=<redacted>" in label and "recipe=x" in label


def test_plan_refuses_before_the_megatron_import_and_writes_nothing(tmp_path):
    """The check runs before the ~16-s Megatron-Bridge build: megatron is never imported, nothing is written, and
    stderr does not repeat the token."""
    token = TOKENS["Hugging Face token"]
    code = (
        "import sys\n"
        "from bridgebench.launch.plan import plan, PlanError\n"
        f"try:\n    plan(['recipe=qwen3_30b_a3b_gb300_mxfp8', '+env_vars.ANY_NAME={token}'], sys.argv[1])\n"
        "except PlanError as err:\n"
        "    print('refused', 'secret_in_config' in str(err), any(m.startswith('megatron') for m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "plan")], capture_output=True, text=True)
    assert out.stdout.split() == ["refused", "True", "False"], out.stdout + out.stderr[-2000:]
    assert not (tmp_path / "plan").exists() and list(tmp_path.iterdir()) == []
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "bridgebench.cli",
            "plan",
            "recipe=qwen3_30b_a3b_gb300_mxfp8",
            f"+env_vars.NOTE={token}",
            "--out",
            str(tmp_path / "p"),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "BRIDGEBENCH_JOB_DIR": str(tmp_path / "jobs")},
    )
    assert cli.returncode == 2 and "secret_in_config" in cli.stderr and "Traceback" not in cli.stderr
    assert token not in cli.stderr + cli.stdout
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------------------------------------------------
# issue 24: names the list missed, and reads nested anywhere in an interpolation
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["BEARER", "API_BEARER", "bearerToken", "MYSQL_PWD", "NVCR_PWD", "DBPWD", "SSHPASS", "DB_PASS", "SSH_PRIVKEY",
     "KRB5_KEYTAB", "CLIENT_KEYTAB", "TOKENFILE", "GITHUB_TOKENFILE", "HF_ACCESS", "GITHUB_ACCESS"],
)  # fmt: skip
def test_names_the_issue_found_missing(name):
    assert secret_name(name)


@pytest.mark.parametrize("name", ["PWD", "OLDPWD", "BYPASS_CACHE", "COMPASS_HEADING", "NCCL_P2P_ACCESS", "ACCESS"])
def test_ordinary_names_near_the_new_fragments(name):
    assert not secret_name(name)  # PWD / OLDPWD: the shell's own names, refused by shell_safe_value instead


@pytest.mark.parametrize(
    "text,expected",
    [
        ("${oc.select:nope,${oc.env:DB_PASSWORD}}", [("oc.select", "nope"), ("oc.env", "DB_PASSWORD")]),
        ("${oc.create:${oc.env:X}}", [("oc.create", None), ("oc.env", "X")]),
        ("a ${x.y} b ${oc.env:BRIDGEBENCH_ROOT,${bb.repo:}/z}", [("oc.env", "BRIDGEBENCH_ROOT"), ("bb.repo", None)]),
        ("${oc.env:${name}}", [("oc.env", None)]),  # a computed variable name
        ("${${r}:x}", [(None, "x")]),  # a computed resolver name
        ("\\${oc.env:X}", []),  # escaped: text, as OmegaConf reads it
        ("plain", []),
    ],
)
def test_resolver_calls_are_found_at_every_depth_by_omegaconfs_grammar(text, expected):
    from bridgebench.config.secrets import resolver_calls

    assert sorted((c.name or "", c.first or "") for c in resolver_calls(text)) == sorted(
        (n or "", f or "") for n, f in expected
    )


NESTED = [
    "${oc.select:nope,${oc.env:DB_PASSWORD}}",  # the issue's: the old pattern stopped at the first }
    "${oc.create:${oc.env:DB_PASSWORD}}",  # the issue's: the value was printed in an error
    "x-${oc.select:a,${oc.select:b,${oc.decode:${oc.env:DB_PASSWORD}}}}",
    "${oc.env:BRIDGEBENCH_X,${oc.env:DB_PASSWORD}}",  # a settings variable whose default reads a secret
    "${oc.env:${oc.select:a,DB_PASSWORD}}",  # a computed variable name
    "x${oc.env:BRIDGEBENCH_DB_PASSWORD}",  # a settings prefix does not make a credential's name a setting
]


@pytest.mark.parametrize("value", NESTED)
def test_env_reads_nested_anywhere_are_refused_without_reading_them(value, monkeypatch):
    monkeypatch.setenv("DB_PASSWORD", "hunter2-issue24-secret")
    monkeypatch.setenv("BRIDGEBENCH_DB_PASSWORD", "hunter2-issue24-secret")
    cfg = compose(["experiment=optstep_local", f"+env_vars.NOTE='{value}'"])
    with pytest.raises(RuleError) as err:
        check_secrets(cfg)
    assert "env_resolver" in str(err.value) and "env_vars.NOTE" in str(err.value)
    assert "hunter2" not in str(err.value)


@pytest.mark.parametrize("value", NESTED[:2])
def test_plan_refuses_nested_reads_printing_and_writing_nothing_of_the_value(tmp_path, value):
    env = {
        **os.environ,
        "DB_PASSWORD": "hunter2-issue24-secret",
        "BRIDGEBENCH_JOB_DIR": str(tmp_path / "jobs"),
        "BRIDGEBENCH_PLANS": str(tmp_path / "plans"),
    }
    out = tmp_path / "plan"
    res = subprocess.run(
        [sys.executable, "-m", "bridgebench.cli", "plan", "experiment=optstep_local", f"+env_vars.NOTE='{value}'",
         "--out", str(out)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert res.returncode == 2 and "env_resolver" in res.stderr, res.stderr[-2000:]
    assert "hunter2" not in res.stdout + res.stderr
    written = [p for p in tmp_path.rglob("*") if p.is_file() and b"hunter2" in p.read_bytes()]
    assert not written and not out.exists()


@pytest.mark.parametrize("name", ["MYSQL_PWD", "SSHPASS", "API_BEARER", "HF_ACCESS", "KRB5_KEYTAB", "SSH_PRIVKEY"])
def test_messages_redact_the_values_of_the_new_names(name):
    from bridgebench.config.secrets import redact

    for text in (f"{name}=hunter2-issue24", f'"{name}": "hunter2-issue24"', f"{name}: hunter2-issue24"):
        assert "hunter2" not in redact(text) and name in redact(text), text
    assert redact("NCCL_P2P_ACCESS=1 PWD=/work") == "NCCL_P2P_ACCESS=1 PWD=/work"


def test_text_with_an_interpolation_start_is_written_so_omegaconf_reads_it_back_as_itself(tmp_path):
    """A resolved config holds values only: a ``${`` left in one is text (a wrapper word, an env value, a shell
    reference), escaped by config/secrets.py::omegaconf_container for every YAML writer (config.yaml, node config,
    config hash); an env var passed by name stays ``${oc.env:VAR}``. Unescaped, ``${)`` in a wrapper word and ``${0``
    in an env value broke plan with a GrammarParseError (found by hypothesis)."""
    from omegaconf import OmegaConf

    from bridgebench.config.secrets import omegaconf_container

    words = ["${)", "${x}", "a\\${x}", "\\\\${y", "$${a}", "plain", "a\\", "}${"]
    env = {"A": "${0", "B": "${x} ${NAME}", "C": "${"}

    def literal(text: str) -> str:  # as a user types it in a config: each ${ and the backslashes before it escaped
        return re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", text)

    cfg = OmegaConf.create({
        "job": {"wrapper": [literal(w) for w in words], "n": 1},
        "env_vars": {"HOME_DIR": "${oc.env:HOME}", **{k: literal(v) for k, v in env.items()}},
    })  # fmt: skip
    assert OmegaConf.to_container(cfg.job, resolve=True)["wrapper"] == words
    path = tmp_path / "config.yaml"
    path.write_text(OmegaConf.to_yaml(OmegaConf.create(omegaconf_container(cfg))))
    back = OmegaConf.load(path)
    assert OmegaConf.to_container(back.job, resolve=True) == {"wrapper": words, "n": 1}
    assert {k: back.env_vars[k] for k in env} == env
    assert back.env_vars._get_node("HOME_DIR")._is_interpolation()  # still read on the node, by name


def test_fields_named_with_token_in_the_models_sense_pass_and_are_shown():
    """``model.moe_token_dispatcher_type`` holds the MoE dispatcher, not a token: plans take it and messages show it;
    ``logger.comet_api_key`` is refused and scrubbed."""
    from bridgebench.cli.redaction import known_secrets
    from bridgebench.config.secrets import ORDINARY_FIELDS, redact

    check_secrets(compose(["recipe=qwen3_30b_a3b_gb300_mxfp8", "+model.moe_token_dispatcher_type=alltoall"]))
    text = "model.moe_token_dispatcher_type=alltoal: not one of alltoall, flex"
    assert redact(text) == text
    assert "<redacted>" in redact("logger.comet_api_key=0123abcd")
    assert known_secrets(["+logger.comet_api_key=0123abcd", "model.moe_token_dispatcher_type=alltoall"], {}) == {
        "0123abcd"
    }
    assert all(secret_name(f.rsplit(".", 1)[-1]) for f in ORDINARY_FIELDS)  # each exemption is needed
    # a number-typed field named with TOKEN: its value is not scrubbed from every line printed
    assert known_secrets(["tokenizer.tiktoken_num_special_tokens=100000"], {}) == set()
