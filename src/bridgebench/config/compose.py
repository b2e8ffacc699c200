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
from pathlib import Path
from typing import Any, Sequence

from omegaconf import DictConfig, OmegaConf

from bridgebench.config.containers import plain_dict
from bridgebench.errors import BridgebenchError
from bridgebench.model.optimizer import OptimizerKind
from bridgebench.model.spec import ModelSpec, ModelSpecError
from bridgebench.paths import (  # noqa: F401  (CONFIG_DIR, RECIPES_DIR, REPO_ROOT re-exported for callers)
    CONFIG_DIR,
    RECIPES_DIR,
    REPO_ROOT,
    USER_CONFIG_ENV,
    USER_GROUPS,
    config_dirs,
    config_files,
)

#: ``${bb.repo:}`` in a config: this checkout's absolute path, for defaults of paths on the submit side or, for the
#: emulated remote cluster on this machine (configs/cluster/local_remote.yaml), on its stand-in cluster filesystem.
if not OmegaConf.has_resolver("bb.repo"):
    OmegaConf.register_new_resolver("bb.repo", lambda: str(REPO_ROOT))

#: The local SLURM cluster's state folder (launch/cluster/common.sh ``STATE``): ``$BRIDGEBENCH_SLURM_STATE`` (made
#: absolute from the current folder, as the scripts do), else ``<repo>/.state/slurm``.
SLURM_STATE_ENV = "BRIDGEBENCH_SLURM_STATE"


def slurm_state_dir() -> Path:
    """The local SLURM cluster's state folder, as ``launch/cluster/common.sh`` computes it (absolute path)."""
    import os

    value = os.environ.get(SLURM_STATE_ENV, "").strip()
    return Path(value).expanduser().absolute() if value else REPO_ROOT / ".state" / "slurm"


def local_slurm_conf() -> str:
    """The ``slurm.conf`` of the local cluster for SLURM's client commands (``configs/cluster/local.yaml``
    ``client_env.SLURM_CONF``): ``<state>/etc/slurm.conf`` when ``$BRIDGEBENCH_SLURM_STATE`` names the state (so
    every command -- ``submit``, ``status``, ``cancel``, ``collect`` -- follows it without an exported ``SLURM_CONF``;
    launch/cluster/up.sh writes it there), else an exported ``SLURM_CONF``, else the default state's."""
    import os

    if os.environ.get(SLURM_STATE_ENV, "").strip() or not os.environ.get("SLURM_CONF", "").strip():
        return str(slurm_state_dir() / "etc" / "slurm.conf")
    return os.environ["SLURM_CONF"]


if not OmegaConf.has_resolver("bb.slurm_state"):
    OmegaConf.register_new_resolver("bb.slurm_state", lambda: str(slurm_state_dir()))
if not OmegaConf.has_resolver("bb.slurm_conf"):
    OmegaConf.register_new_resolver("bb.slurm_conf", local_slurm_conf)

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
    """Option names of a config group (``configs/<group>/*.yaml`` and ``$BRIDGEBENCH_CONFIG_DIR/<group>/*.yaml``),
    sorted."""
    return sorted(config_files(group))


def is_group(key: str) -> bool:
    """Whether an override key names a config group (a folder of the config search path), not a field."""
    key = key.lstrip("+~/")
    return "." not in key and any((folder / key).is_dir() for folder in config_dirs())


def check_user_config_dir() -> Path | None:
    """The ``$BRIDGEBENCH_CONFIG_DIR`` folder, checked: it exists, holds only the groups a user may add to
    (:data:`bridgebench.paths.USER_GROUPS`), and none of its options has the name of a shipped one (it would shadow
    it). ``None`` when the variable is unset.

    Raises:
        ConfigError: naming the rule (``user_config_dir``) and the file.
    """
    dirs = config_dirs()
    if len(dirs) == 1:
        return None
    user = dirs[1]
    if not user.is_dir():
        raise ConfigError(f"user_config_dir: {USER_CONFIG_ENV}={user} is not a folder")
    # calibration/: a cluster's own calibrations (bridgebench calibrate --from-runs), not a Hydra group
    extra = sorted(p.name for p in user.iterdir() if p.is_dir() and p.name not in (*USER_GROUPS, "calibration"))
    if extra:
        raise ConfigError(
            f"user_config_dir: {user} has folder(s) {extra} that are not config groups a user may add to; "
            f"allowed: {list(USER_GROUPS)}"
        )
    from bridgebench.config.bounds import BoundsError, check_confined, check_yaml_file

    for group in USER_GROUPS:
        for path in sorted((user / group).glob("*.yaml")) if (user / group).is_dir() else []:
            try:  # a link out of the folder, a huge file or nested aliases: refused before Hydra reads any of it
                check_confined(path, user)
                check_yaml_file(path)
            except BoundsError as err:
                raise ConfigError(str(err)) from None
            shipped = CONFIG_DIR / group / path.name
            if shipped.exists():
                raise ConfigError(
                    f"user_config_dir: {path} has the name of the shipped {shipped.relative_to(REPO_ROOT)}; "
                    f"give it another name (a user option adds to the shipped ones, it cannot replace one)"
                )
    return user


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
        if ov.is_delete() or not is_group(key):
            out.append(line)
            continue
        head, raw = line.split("=", 1)
        if ov.package:  # +model@pkg=<option>: still an option of the group, by name (rule config_name_confined)
            for value in (v.strip().strip("'\"") for v in raw.split(",")):
                _check_option(key, value, check_name=True)
            out.append(line)
            continue
        items = [v.strip() for v in raw.split(",")]
        if all(_NUMERIC.match(v) for v in items):
            line = head + "=" + ",".join(f"'{v}'" for v in items)
            ov = parser.parse_override(line)
        for value in (v.strip("'\"") for v in items):
            _check_option(key, value, check_name=False)
        out.append(line)
    return out


def _check_option(key: str, value: str, *, check_name: bool) -> None:
    """One option ``value`` of group ``key`` given on the command line: its name is checked (rule
    ``config_name_confined``) when ``check_name`` or when it is unknown and looks like a path; then it must be a known
    option of the group (``null`` / ``None`` unset the group).

    Raises:
        ConfigError: a name that breaks ``config_name_confined``, or an unknown option (the message lists the known
        ones).
    """
    unknown = value not in ("null", "None") and value not in group_options(key)
    if check_name or (unknown and ("/" in value or ".." in value)):
        from bridgebench.config.bounds import BoundsError, check_option_name

        try:
            check_option_name(key, value)
        except BoundsError as err:
            raise ConfigError(str(err)) from None
    if unknown:
        raise ConfigError(f"unknown {key} {value!r}; known {key} options: {group_options(key)}")


def compose(overrides: Sequence[str] = (), *, return_hydra_config: bool = False) -> DictConfig:
    """Compose ``configs/config.yaml`` with Hydra overrides.

    Args:
        overrides: Hydra override strings, e.g. ``["model=kimi_k2", "model.seq_length=4096"]``.
        return_hydra_config: keep the ``hydra`` node (sweeper params of an experiment).

    Returns:
        The composed config (struct mode: a key that does not exist cannot be set without ``+``).

    Each distinct config is composed once: later calls (in this process, or in another one while no config file and
    no composing code changed) get a fresh copy from :mod:`bridgebench.config.compose_cache`.

    Raises:
        ConfigError: unknown group option (listing the known ones), unknown key, or a bad override.
    """
    from bridgebench.config import compose_cache
    from bridgebench.config.schema import register

    register()
    overrides = normalize_overrides(overrides)
    cfg: DictConfig = compose_cache.cached(
        tuple(overrides), return_hydra_config, lambda: _compose(overrides, return_hydra_config)
    )
    return cfg


def _compose(overrides: list[str], return_hydra_config: bool) -> DictConfig:
    """One Hydra compose and bridgebench's checks (:func:`compose` without the cache)."""
    import logging
    import warnings

    import yaml
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from bridgebench.config.schema import RootSchema, SectionError, check_sections

    user = check_user_config_dir()
    search = [f"hydra.searchpath=[file://{user}]"] if user else []
    try:
        # multistorageclient's Hydra plugin logs a traceback and warns when Hydra checks the search path it adds
        msc = logging.getLogger("multistorageclient.contrib.hydra")
        level, msc.disabled = msc.disabled, True
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="provider=msc-universal")
                with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
                    cfg = hydra_compose(
                        "config", overrides=search + list(overrides), return_hydra_config=return_hydra_config
                    )
        finally:
            msc.disabled = level
        if return_hydra_config:
            return cfg
        # `+key=value` appends bypass Hydra's struct flag, and Megatron-Bridge sections are open maps in the Hydra
        # schema: check the result once more (declared fields typed, other keys against Megatron-Bridge's fields).
        plain = plain_dict(cfg, resolve=False)
        plain.pop("hydra", None)
        check_sections(plain)
        checked = OmegaConf.merge(OmegaConf.structured(RootSchema), plain)
        assert isinstance(checked, DictConfig)  # a structured mapping merged with a mapping
    except SectionError as err:
        raise ConfigError(str(err)) from err
    except yaml.YAMLError as err:
        raise ConfigError(f"bad_yaml: a config file is not valid YAML: {_explain(err)}") from err
    except (HydraException, OmegaConfBaseException, ValueError) as err:
        missing = _MISSING_KEY.match(str(err))
        if missing:
            raise ConfigError(unknown_key_message(overrides, missing.group(1))) from err
        raise ConfigError(f"bad override or config: {_explain(err)}") from err
    from bridgebench.config.env_refs import EnvRefError, shell_references

    try:
        shell_references(checked)  # ${SLURM_JOB_ID} in an env value: for the job's shell (config/env_refs.py)
    except EnvRefError as err:
        raise ConfigError(str(err)) from None
    check_recipe_release(checked)
    from bridgebench.config.bounds import BoundsError, check_config

    try:
        check_config(checked)  # sizes, peaks, bandwidths in range before anything is built (rule config_range)
    except BoundsError as err:
        raise ConfigError(str(err)) from None
    from bridgebench.config.secrets import pass_by_name

    pass_by_name(checked)  # env_vars.NAME=${oc.env:VAR}: never read here, the job reads $VAR (config/secrets.py)
    return checked


#: Hydra's message for an override of a key the composed config does not have (Hydra 1.3 ``config_loader_impl``).
_MISSING_KEY = re.compile(r"Could not override '([^']+)'")


#: Config maps whose keys are the user's to choose (a new key is added with a leading ``+``).
OPEN_MAPS = frozenset({"env_vars"})


def unknown_key_message(overrides: Sequence[str], key: str) -> str:
    """The error for an override of a key the composed config does not have: the closest existing names ("did you
    mean"), or the keys that exist there; for a Megatron-Bridge field no config sets yet, how to set it (``+``).
    Never Hydra's advice to append the misspelled key.

    ``overrides``: the whole override list (the others are composed to find what exists); ``key``: the dotted key.
    """
    import difflib

    from bridgebench.config.schema import MB_SECTIONS, mbridge_fields

    value = next((o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0].lstrip("~") == key), "...")
    others = [o for o in overrides if o.split("=", 1)[0].lstrip("~") != key]
    try:
        base = OmegaConf.to_container(compose(others), resolve=False)
    except ConfigError:
        base = None
    parts = key.split(".")
    node, depth = base, 0
    while isinstance(node, dict) and depth < len(parts) - 1 and isinstance(node.get(parts[depth]), dict):
        node, depth = node[parts[depth]], depth + 1
    parent = ".".join(parts[:depth])
    known = sorted(node) if isinstance(node, dict) else []
    section = parts[0] if depth == 1 and parts[0] in MB_SECTIONS else None
    fields = sorted(mbridge_fields()["sections"].get(section, {})) if section else []
    if depth == 0 and base is not None:
        known = sorted(set(known) | set(group_names()))
    word = parts[depth]
    rest = ".".join(parts[depth + 1 :])
    msg = f"{key}={value}: " + (f"{parent} has no key {word!r}" if parent else f"the config has no key {word!r}")

    def spelled(name: str) -> str:
        full = ".".join(p for p in (parent, name, rest) if p)
        return f"+{full}={value}" if name not in known else f"{full}={value}"

    if section and word in fields and not rest:
        from bridgebench.config.rules.upstream import override_enum_errors

        bad = override_enum_errors(key, value)
        if bad:  # never advise setting a value upstream refuses: the enum rule's did-you-mean first
            return f"{bad[0]} (the field is unset in this config: set it with {spelled(word).split('=')[0]}=<value>)"
        return msg + (
            f" yet; it is a field of Megatron-Bridge's {section} section that no config sets: "
            f"set it with {spelled(word)}"
        )
    close = difflib.get_close_matches(word, list(dict.fromkeys([*known, *fields])), n=3, cutoff=0.6)
    if close:
        text = msg + f"; did you mean {close[0]} ({spelled(close[0])})?"
        if close[1:]:
            text += " Other close names: " + ", ".join(f"{c} ({spelled(c)})" for c in close[1:]) + "."
        if any(c not in known for c in close):
            text += f" (A leading + sets a Megatron-Bridge {section} field that no config sets yet.)"
        return text
    shown = ", ".join(known[:40]) + (" ..." if len(known) > 40 else "")
    extra = f"; or, with a leading +, a field of Megatron-Bridge's {section} section" if section else ""
    if parent in OPEN_MAPS and not rest:
        extra = f"; {parent} takes any name: add one with a leading + (+{parent}.{word}={value})"
    return msg + (f"; keys there: {shown}" if known else "") + extra


def group_names() -> list[str]:
    """The config groups (``configs/<group>/``) -- top-level overrides such as ``model=`` or ``recipe=``."""
    return sorted(p.name for p in CONFIG_DIR.iterdir() if p.is_dir())


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


#: Top-level keys that never change what a run computes (where it runs, where files go, bridgebench's bookkeeping).
NOT_RUN_KEYS = ("cluster", "paths", "job", "hydra", "accounting")


def recipe_departures(cfg: DictConfig) -> dict[str, tuple[Any, Any]]:
    """Fields in which a run departs from its recipe as that release ships it: ``{dotted key: (recipe's value,
    run's value)}`` (values unresolved, so ``lr_decay_iters: ${train.train_iters}`` follows ``train_iters``), against
    a compose of ``recipe=<entry> release=<release> optimizer=<family>`` alone; keys of :data:`NOT_RUN_KEYS` are
    left out. Empty for a run without a recipe. Raises :class:`ConfigError` if that reference cannot be composed."""
    meta = cfg.recipe_meta
    if not meta.get("name"):
        return {}
    family = OptimizerKind(name=str(cfg.optimizer.optimizer)).family
    ref = compose([f"recipe={meta.entry}", f"release={meta.release}", f"optimizer={family}"])
    out: dict[str, tuple[Any, Any]] = {}

    def walk(a: Any, b: Any, prefix: str) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            for key in dict.fromkeys([*a, *b]):
                if not prefix and key in NOT_RUN_KEYS:
                    continue
                walk(a.get(key, _ABSENT), b.get(key, _ABSENT), f"{prefix}{key}.")
        elif a != b:
            out[prefix[:-1]] = (None if a is _ABSENT else a, None if b is _ABSENT else b)

    walk(OmegaConf.to_container(ref, resolve=False), OmegaConf.to_container(cfg, resolve=False), "")
    return out


_ABSENT = object()


def variant_provenance(cfg: DictConfig, departures: dict[str, tuple[Any, Any]] | None = None) -> tuple[str, str]:
    """Whose configuration a run is: ``("nvidia", why)`` when its recipe and optimizer are Megatron-Bridge's own perf
    recipe of the release, unchanged; ``("modified", why)`` when they are but the run changes fields of it (listed:
    ``departures``, from :func:`recipe_departures` -- computed when not given); ``("bridgebench", why)`` otherwise (a
    Muon variant no release ships, or no recipe).

    The optimizer family is :class:`bridgebench.model.optimizer.OptimizerKind`'s; a recipe's upstream families are
    ``recipe_meta.upstream_optimizers`` (written by ``bridgebench recipes generate``).
    """
    family = OptimizerKind(name=str(cfg.optimizer.optimizer)).family
    meta = cfg.recipe_meta
    if not meta.get("name"):
        return (
            "bridgebench",
            f"no recipe: {family} settings from configs/optimizer (bridgebench's, not a NVIDIA recipe)",
        )
    where = f"{meta.name} at {meta.release}"
    if family in list(meta.upstream_optimizers):
        # The source cited is the one of this optimizer's own upstream recipe (recipe_meta.sources: e.g. the launcher
        # run with --optimizer_type muon for Muon), never the AdamW run the recipe's values were generated from.
        own = (meta.get("sources") or {}).get(family)
        source = own or (
            f"Megatron-Bridge {meta.megatron_bridge} ships a {family} variant of {meta.name} (recipe_meta."
            f"upstream_optimizers); its source is not recorded in this recipe file: regenerate it with "
            f"`{meta.generated_by or 'bridgebench recipes generate'}`"
        )
        changed = recipe_departures(cfg) if departures is None else departures
        if changed:
            shown = ", ".join(f"{k} {a!r}->{b!r}" for k, (a, b) in list(changed.items())[:8])
            more = f" and {len(changed) - 8} more" if len(changed) > 8 else ""
            return "modified", (
                f"NVIDIA's recipe changed by you, not what NVIDIA ran: {where} with {family} is Megatron-Bridge's own "
                f"perf recipe ({source}), with {len(changed)} field(s) changed: {shown}{more}"
            )
        return "nvidia", f"NVIDIA's: {where} with {family} is Megatron-Bridge's own perf recipe ({source})"
    switch = cfg.get("optimizer_variant", {}).get("source") or "configs/optimizer"
    return "bridgebench", (
        f"bridgebench's, not NVIDIA's: no Megatron-Bridge release ships {meta.name} with {family}; this is its "
        f"{'/'.join(meta.upstream_optimizers)} recipe at {meta.release} with Kimi K2's {family} changes ({switch})"
    )


def _explain(err: BaseException) -> str:
    """One line from an exception and its causes (Hydra wraps OmegaConf's precise message as __cause__)."""
    parts: list[str] = []
    cur: BaseException | None = err
    while cur is not None:
        text = " ".join(
            line.strip()
            for line in str(cur).splitlines()
            if line.strip() and not line.strip().startswith(("full_key:", "object_type=", "reference_type="))
        )
        if text and text not in parts and "$VALUE" not in text:
            parts.append(text)
        cur = cur.__cause__ or cur.__context__
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
    swept_keys: set[str] = set()
    for ov in parser.parse_overrides(list(cfg_overrides)):
        if ov.is_sweep_override():
            swept_keys.add(ov.key_or_group)
            axes.append([f"{ov.key_or_group}={_quote(v)}" for v in ov.sweep_string_iterator()])
        elif ov.input_line is not None:
            fixed.append(ov.input_line)
    cfg = compose(fixed, return_hydra_config=True)
    params = cfg.hydra.sweeper.get("params")
    params = plain_dict(params, resolve=False) if params else {}
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


@dataclass(frozen=True, kw_only=True)
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
        return OptimizerKind(name=str(self.optimizer["optimizer"]))

    @property
    def is_muon(self) -> bool:
        return self.optimizer_kind.is_muon


def model_spec(cfg: DictConfig) -> ModelSpec:
    """Architecture part of ``cfg.model`` as a validated :class:`ModelSpec`.

    Raises:
        ConfigError: an unknown model field or a value that breaks a rule (from :class:`ModelSpecError`).
    """
    arch = {f.name for f in dataclasses.fields(ModelSpec)} - {"extra"}
    data = {k: v for k, v in plain_dict(cfg.model, resolve=True).items() if k in arch}
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
    return RunFacts(
        model=model,
        num_gpus=cfg.num_gpus,
        parallel=parallel,
        global_batch_size=cfg.train.global_batch_size,
        micro_batch_size=cfg.train.micro_batch_size,
        optimizer=plain_dict(cfg.optimizer, resolve=True),
        precision=plain_dict(cfg.precision, resolve=True),
        gpu=plain_dict(cfg.gpu, resolve=True),
        release=plain_dict(cfg.release, resolve=True),
        accounting=plain_dict(cfg.accounting, resolve=True),
    )
