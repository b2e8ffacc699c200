"""``${NAME}`` in an env value: a variable of the job's shell, kept for it (issue 24; docs/rules.md)."""

from __future__ import annotations

import re

from omegaconf import DictConfig, OmegaConf

from bridgebench.errors import BridgebenchError


class EnvRefError(BridgebenchError):
    """An env value refers to a credential-named shell variable (rule ``secret_in_config``)."""


#: ``${NAME}`` with an upper-case name in an env value: a variable of the job's shell (``SLURM_JOB_ID``), not an
#: OmegaConf interpolation (config keys are lower-case); not when escaped (``\${NAME}``: already literal)
_SHELL_REF = re.compile(r"(?<!\\)\$\{([A-Z_][A-Z0-9_]*)\}")


def shell_references(cfg: DictConfig) -> None:
    """Keep ``${NAME}`` (upper-case ``NAME``) in ``env_vars`` values for the job's shell: stored escaped, so no
    OmegaConf resolve looks it up as a config key (it used to end in InterpolationKeyError), and exported by the sbatch
    script so the job's shell expands it (``launch/shellsafe.py`` ``shell_word``): ``+env_vars.TAG=run-${SLURM_JOB_ID}``
    sets ``TAG=run-12345`` in job 12345. A reference to a credential-named variable is refused (rule
    ``secret_in_config``): the script runs with ``set -x`` and would print its value into the job log.

    Raises:
        EnvRefError: a ``${NAME}`` whose name looks like a credential's.
    """
    env = cfg.get("env_vars") if isinstance(cfg, DictConfig) else None
    if env is None:
        return
    from bridgebench.config.secrets import secret_name

    raw = OmegaConf.to_container(env, resolve=False)
    for key, value in raw.items() if isinstance(raw, dict) else ():
        key = str(key)
        if not isinstance(value, str) or not _SHELL_REF.search(value):
            continue
        secret = sorted({m.group(1) for m in _SHELL_REF.finditer(value) if secret_name(m.group(1))})
        if secret:
            raise EnvRefError(
                f"secret_in_config: env_vars.{key} refers to the shell variable(s) {', '.join(secret)}, named like "
                "a credential; the job script runs with `set -x` and would print the value into the job log. Pass "
                f"it by name as the whole value (env_vars.{key}='${{oc.env:{secret[0]}}}': the payload reads it on "
                "the node, unprinted)"
            )
        cfg.env_vars[key] = _SHELL_REF.sub(lambda m: "\\${" + m.group(1) + "}", value)
