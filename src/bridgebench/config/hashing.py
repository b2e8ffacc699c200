"""The stable config hash (no megatron import, so light commands can use it)."""

from __future__ import annotations

import hashlib

from omegaconf import DictConfig, OmegaConf


def config_hash(cfg: DictConfig) -> str:
    """Stable 12-hex hash of a composed config: sha256 of its resolved YAML with sorted keys.

    Dropped: the ``hydra`` node, and ``paths`` (where bridgebench writes files is not part of what runs, and the
    same run must hash the same for every user whatever their ``BRIDGEBENCH_*`` path overrides). Hashed is the config
    as written (:func:`bridgebench.config.secrets.disk_container`): a variable passed by name hashes as its name.
    """
    from bridgebench.config.secrets import omegaconf_container

    plain = omegaconf_container(cfg)
    plain.pop("paths", None)
    text = OmegaConf.to_yaml(OmegaConf.create(plain), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]
