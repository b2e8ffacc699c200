"""Compose bridgebench's Hydra config tree (``configs/``) and turn it into typed run facts.

Hydra does the composing and the override grammar (``model=kimi_k2 model.seq_length=8192``, ``a=x,y`` sweeps);
this module only locates the tree, turns Hydra's errors into :class:`ConfigError` with the rule that was broken,
and reads the composed config into :class:`bridgebench.model.spec.ModelSpec` and friends. It imports no torch or
megatron.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from dataclasses import dataclass
from typing import Any, Sequence

from omegaconf import DictConfig, OmegaConf

from bridgebench.errors import BridgebenchError
from bridgebench.model.optimizer import OptimizerKind
from bridgebench.model.spec import ModelSpec, ModelSpecError
from bridgebench.paths import CONFIG_DIR, RECIPES_DIR, REPO_ROOT  # noqa: F401  (re-exported for callers)

#: Keys under ``model`` that are parallel sizes (Megatron-Core ``ModelParallelConfig``), not architecture.
PARALLEL_KEYS = (
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "virtual_pipeline_model_parallel_size",
    "context_parallel_size",
    "expert_model_parallel_size",
    "expert_tensor_parallel_size",
    "sequence_parallel",
)


class ConfigError(BridgebenchError):
    """A composed config or an override breaks a rule; the message says which."""


def group_options(group: str) -> list[str]:
    """Option names of a config group (``configs/<group>/*.yaml``), sorted."""
    return sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml"))


_NUMERIC = re.compile(r"^[0-9][0-9.]*$")


def normalize_overrides(overrides: Sequence[str]) -> list[str]:
    """Quote numeric-looking group options (``release=26.04`` -> ``release='26.04'``) and reject unknown options.

    Hydra's grammar reads ``26.04`` as a float (and ``26.10`` would become ``26.1``); release names are strings.
    An unknown option of a known group is rejected with the list of known ones (Hydra's own message buries them in
    a search-path dump).

    Raises:
        ConfigError: unknown group option, or an override Hydra cannot parse.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    out: list[str] = []
    for line in overrides:
        try:
            ov = parser.parse_override(line)
        except HydraException as err:
            raise ConfigError(f"cannot parse override {line!r}: {str(err).splitlines()[0]}") from err
        key = ov.key_or_group.lstrip("/")
        if ov.package or ov.is_delete() or not (CONFIG_DIR / key).is_dir():
            out.append(line)
            continue
        head, raw = line.split("=", 1)
        items = [v.strip() for v in raw.split(",")]
        if all(_NUMERIC.match(v) for v in items):
            line = head + "=" + ",".join(f"'{v}'" for v in items)
            ov = parser.parse_override(line)
        for value in (v.strip("'\"") for v in items):
            if value not in ("null", "None") and value not in group_options(key):
                raise ConfigError(f"unknown {key} {value!r}; known {key} options: {group_options(key)}")
        out.append(line)
    return out


def compose(overrides: Sequence[str] = (), *, return_hydra_config: bool = False) -> DictConfig:
    """Compose ``configs/config.yaml`` with Hydra overrides.

    Args:
        overrides: Hydra override strings, e.g. ``["model=kimi_k2", "model.seq_length=4096"]``.
        return_hydra_config: keep the ``hydra`` node (sweeper params of an experiment).

    Returns:
        The composed config (struct mode: a key that does not exist cannot be set without ``+``).

    Raises:
        ConfigError: unknown group option (listing the known ones), unknown key, or a bad override.
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from bridgebench.config.schema import RootSchema, SectionError, check_sections, register

    register()
    overrides = normalize_overrides(overrides)
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            cfg = hydra_compose("config", overrides=list(overrides), return_hydra_config=return_hydra_config)
        if return_hydra_config:
            return cfg
        # `+key=value` appends bypass Hydra's struct flag, and Megatron-Bridge sections are open maps in the Hydra
        # schema: check the result once more (declared fields typed, other keys against Megatron-Bridge's fields).
        plain = OmegaConf.to_container(cfg, resolve=False)
        plain.pop("hydra", None)
        check_sections(plain)
        checked = OmegaConf.merge(OmegaConf.structured(RootSchema), plain)
    except SectionError as err:
        raise ConfigError(str(err)) from err
    except (HydraException, OmegaConfBaseException, ValueError) as err:
        raise ConfigError(f"bad override or config: {_explain(err)}") from err
    check_recipe_release(checked)
    from bridgebench.config.secrets import pass_by_name

    pass_by_name(checked)  # env_vars.NAME=${oc.env:VAR}: never read here, the job reads $VAR (config/secrets.py)
    return checked


def recipe_releases(recipe: str) -> list[str]:
    """Releases that have values for ``recipe`` (``recipes/<recipe>/<release>.yaml``), oldest first."""
    folder = RECIPES_DIR / recipe
    names = [p.stem for p in folder.glob("*.yaml")] if folder.is_dir() else []
    return sorted(names, key=lambda r: tuple(int(x) for x in r.split(".")))


def check_recipe_release(cfg: DictConfig) -> None:
    """A chosen recipe must have values for the chosen release: never silently another release's.

    Raises:
        ConfigError: naming the release and listing the releases that have the recipe.
    """
    choices = OmegaConf.select(cfg, "recipe_meta.name"), OmegaConf.select(cfg, "recipe_meta.release")
    entry = OmegaConf.select(cfg, "recipe_meta.entry")
    if entry is None:
        return
    if choices[0] is None or str(choices[1]) != str(cfg.release.name):
        have = recipe_releases(str(entry))
        raise ConfigError(
            f"recipe {entry} has no values for release {cfg.release.name}: upstream Megatron-Bridge has no perf recipe "
            f"for it there (or none was generated); releases with this recipe: {', '.join(have) or 'none'}"
        )


def variant_provenance(cfg: DictConfig) -> tuple[str, str]:
    """Whose configuration a run is: ``("nvidia", why)`` when its recipe and optimizer are Megatron-Bridge's own perf
    recipe of the release, ``("bridgebench", why)`` otherwise (a Muon variant no release ships, or no recipe).

    The optimizer family is :class:`bridgebench.model.optimizer.OptimizerKind`'s; a recipe's upstream families are
    ``recipe_meta.upstream_optimizers`` (written by ``bridgebench recipes generate``).
    """
    family = OptimizerKind(str(cfg.optimizer.optimizer)).family
    meta = cfg.recipe_meta
    if not meta.get("name"):
        return (
            "bridgebench",
            f"no recipe: {family} settings from configs/optimizer (bridgebench's, not a NVIDIA recipe)",
        )
    where = f"{meta.name} at {meta.release}"
    if family in list(meta.upstream_optimizers):
        return "nvidia", f"NVIDIA's: {where} with {family} is Megatron-Bridge's own perf recipe ({meta.source})"
    switch = cfg.get("optimizer_variant", {}).get("source") or "configs/optimizer"
    return "bridgebench", (
        f"bridgebench's, not NVIDIA's: no Megatron-Bridge release ships {meta.name} with {family}; this is its "
        f"{'/'.join(meta.upstream_optimizers)} recipe at {meta.release} with Kimi K2's {family} changes ({switch})"
    )


def _explain(err: BaseException) -> str:
    """One line from an exception and its causes (Hydra wraps OmegaConf's precise message as __cause__)."""
    parts = []
    while err is not None:
        text = " ".join(
            line.strip()
            for line in str(err).splitlines()
            if line.strip() and not line.strip().startswith(("full_key:", "object_type=", "reference_type="))
        )
        if text and text not in parts and "$VALUE" not in text:
            parts.append(text)
        err = err.__cause__ or err.__context__
    return " -- ".join(parts)


def expand_sweep(cfg_overrides: Sequence[str]) -> list[list[str]]:
    """Expand an experiment's sweep into one override list per run.

    The sweep is the experiment's ``hydra.sweeper.params`` plus any sweep (``a=x,y``) on the command line,
    parsed with Hydra's own override grammar. Returns the cartesian product in a stable order; a config without a
    sweep gives ``[list(cfg_overrides)]``.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    cfg_overrides = normalize_overrides(cfg_overrides)
    parser = OverridesParser.create()
    fixed: list[str] = []
    axes: list[list[str]] = []
    swept_keys = set()
    for ov in parser.parse_overrides(list(cfg_overrides)):
        if ov.is_sweep_override():
            swept_keys.add(ov.key_or_group)
            axes.append([f"{ov.key_or_group}={_quote(v)}" for v in ov.sweep_string_iterator()])
        else:
            fixed.append(ov.input_line)
    cfg = compose(fixed, return_hydra_config=True)
    params = cfg.hydra.sweeper.get("params")
    params = OmegaConf.to_container(params, resolve=False) if params else {}
    given = swept_keys | {o.split("=", 1)[0].lstrip("+~") for o in fixed}
    for key, value in params.items():
        if key in given:
            continue  # the command line wins
        ov = parser.parse_override(f"{key}={value}")
        if ov.is_sweep_override():
            axes.append([f"{key}={_quote(v)}" for v in ov.sweep_string_iterator()])
        else:
            fixed.append(f"{key}={value}")
    return [fixed + list(combo) for combo in itertools.product(*axes)] if axes else [fixed]


def has_sweep(overrides: Sequence[str]) -> bool:
    """True if any override sweeps values (Hydra's ``a=x,y`` / ``range()`` / ``choice()`` grammar)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return any(
        ov.is_sweep_override() for ov in OverridesParser.create().parse_overrides(normalize_overrides(overrides))
    )


def _quote(value: str) -> str:
    return f"'{value}'" if _NUMERIC.match(value) else value


@dataclass(frozen=True)
class RunFacts:
    """The facts of one composed run that the analysis needs (no Megatron objects)."""

    model: ModelSpec
    num_gpus: int
    parallel: dict[str, Any]
    global_batch_size: int
    micro_batch_size: int
    optimizer: dict[str, Any]
    precision: dict[str, Any]
    gpu: dict[str, Any]
    release: dict[str, Any]
    accounting: dict[str, Any]

    @property
    def optimizer_kind(self) -> OptimizerKind:
        """What the optimizer name means (Muon or not, layer-wise or not): :mod:`bridgebench.model.optimizer`."""
        return OptimizerKind(str(self.optimizer["optimizer"]))

    @property
    def is_muon(self) -> bool:
        return self.optimizer_kind.is_muon


def model_spec(cfg: DictConfig) -> ModelSpec:
    """Architecture part of ``cfg.model`` as a validated :class:`ModelSpec`.

    Raises:
        ConfigError: an unknown model field or a value that breaks a rule (from :class:`ModelSpecError`).
    """
    arch = {f.name for f in dataclasses.fields(ModelSpec)} - {"extra"}
    data = {k: v for k, v in OmegaConf.to_container(cfg.model, resolve=True).items() if k in arch}
    try:
        return ModelSpec.from_mapping(data)
    except (ModelSpecError, TypeError) as err:
        raise ConfigError(str(err)) from err


def run_facts(cfg: DictConfig) -> RunFacts:
    """Read a composed config into :class:`RunFacts`.

    Raises:
        ConfigError: bad model fields or non-positive sizes (``num_gpus``, batch sizes, parallel sizes).
    """
    model = model_spec(cfg)
    parallel = {k: cfg.model.get(k) for k in PARALLEL_KEYS}
    parallel["pipeline_model_parallel_layout"] = cfg.model.get("pipeline_model_parallel_layout")
    for key in PARALLEL_KEYS[:-1]:
        value = parallel[key]
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
            raise ConfigError(f"model.{key} must be a positive integer, got {value!r}")
    for key, value in (
        ("num_gpus", cfg.num_gpus),
        ("train.global_batch_size", cfg.train.global_batch_size),
        ("train.micro_batch_size", cfg.train.micro_batch_size),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ConfigError(f"{key} must be a positive integer, got {value!r}")
    as_dict = lambda node: OmegaConf.to_container(node, resolve=True)  # noqa: E731
    return RunFacts(
        model=model,
        num_gpus=cfg.num_gpus,
        parallel=parallel,
        global_batch_size=cfg.train.global_batch_size,
        micro_batch_size=cfg.train.micro_batch_size,
        optimizer=as_dict(cfg.optimizer),
        precision=as_dict(cfg.precision),
        gpu=as_dict(cfg.gpu),
        release=as_dict(cfg.release),
        accounting=as_dict(cfg.accounting),
    )
