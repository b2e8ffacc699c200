"""Dump an older Megatron-Bridge release's own perf configuration for bridgebench's recipes (run once per release;
the output is shipped here and read by ``bridgebench recipes generate`` and ``tests/mbridge/test_fidelity.py``).

Runs under a Python environment with that release's megatron-bridge wheel (and a matching megatron-core), with
``scripts/performance`` of the same git tag unpacked at ``--scripts``. See SOURCES.md for the exact commands.

What it executes is the launcher path of the tag's ``scripts/performance/run_script.py`` up to, not including,
``pretrain()``: ``argument_parser.parse_cli_args`` -> ``perf_plugins.PerfEnvPlugin.setup`` (environment variables
and the Hydra arguments the plugin appends) -> ``utils.utils.get_perf_optimized_recipe`` -> ``utils.overrides``
``set_cli_overrides`` / ``set_user_overrides`` / ``set_post_overrides``. Off-GPU stand-ins: bridgebench's Transformer
Engine import stand-in, the offline Hugging Face config cache, and ``torch.cuda.get_device_properties`` reporting the
target GPU (``apply_flex_dispatcher_backend`` asks for it). The container is flattened with
``bridgebench.mbridge.flatten`` (loaded from this repository) and the launcher's environment is added as
``env_vars.<NAME>``.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import inspect
import os
import sys
import types
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent

#: recipe -> (launcher -m, -mr, -g, -c, -ng, optimizer types passed with --optimizer_type or None)
RECIPES = {
    "kimi_k2_gb300_mxfp8": ("kimi", "kimi_k2", "gb300", "fp8_mx", 256, ["muon", "adam"]),
    "deepseek_v3_gb300_mxfp8": ("deepseek", "deepseek_v3", "gb300", "fp8_mx", 256, [None]),
    "qwen3_235b_a22b_gb300_mxfp8": ("qwen", "qwen3_235b_a22b", "gb300", "fp8_mx", 256, [None]),
    "qwen3_30b_a3b_gb300_mxfp8": ("qwen", "qwen3_30b_a3b", "gb300", "fp8_mx", 8, [None]),
    "qwen3_30b_a3b_gb200_mxfp8": ("qwen", "qwen3_30b_a3b", "gb200", "fp8_mx", 8, [None]),
    "qwen3_30b_a3b_b300_mxfp8": ("qwen", "qwen3_30b_a3b", "b300", "fp8_mx", 8, [None]),
    "qwen3_30b_a3b_b200_mxfp8": ("qwen", "qwen3_30b_a3b", "b200", "fp8_mx", 8, [None]),
    "qwen3_30b_a3b_h100_fp8_cs": ("qwen", "qwen3_30b_a3b", "h100", "fp8_cs", 16, [None]),
}
#: torch.cuda.get_device_properties(0) on the target GPU: (name, major, minor, SMs, memory GiB)
GPUS = {
    "gb300": ("NVIDIA GB300", 10, 3, 148, 288),
    "gb200": ("NVIDIA GB200", 10, 0, 148, 192),
    "b300": ("NVIDIA B300", 10, 3, 148, 288),
    "b200": ("NVIDIA B200", 10, 0, 148, 192),
    "h100": ("NVIDIA H100 80GB HBM3", 9, 0, 132, 80),
}


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _pretend_gpu(gpu: str) -> None:
    import torch

    name, major, minor, sms, gib = GPUS[gpu]
    props = types.SimpleNamespace(
        name=name, major=major, minor=minor, multi_processor_count=sms, total_memory=gib << 30
    )
    torch.cuda.get_device_properties = lambda *a, **k: props
    torch.cuda.get_device_capability = lambda *a, **k: (major, minor)
    torch.cuda.get_device_name = lambda *a, **k: name


def _launcher_env(args, family, model, gpu, dtype) -> tuple[dict, list[str]]:
    """executors.PERF_ENV_VARS (+ the GB200 lines of slurm_executor), then PerfEnvPlugin.setup on a stand-in
    executor; returns (env, Hydra args the plugin appends)."""
    import nemo_run as run
    import perf_plugins
    from utils import executors

    env = copy.deepcopy(executors.PERF_ENV_VARS)
    if gpu == "gb200":
        env.update({"NCCL_NET_GDR_LEVEL": "PHB", "NCCL_NET_GDR_C2C": "1"})
    executor = types.SimpleNamespace(
        env_vars=env,
        nodes=max(1, args.num_gpus // 4),
        ntasks_per_node=4,
        job_dir="/tmp/job",
        launcher=None,
        srun_args=[],
        setup_lines="",
    )
    fields = getattr(perf_plugins.PerfEnvPlugin, "__dataclass_fields__", {})
    kw = dict(
        enable_vboost=False,
        model_family_name=family,
        model_recipe_name=model,
        gpu=gpu,
        compute_dtype=dtype,
        train_task="pretrain",
        config_variant=args.config_variant,
        tp_size=None,
        pp_size=None,
        cp_size=None,
        ep_size=None,
        moe_a2a_overlap=getattr(args, "moe_a2a_overlap", None),
        num_gpus=args.num_gpus,
    )
    task = run.Script(path="run_script.py", args=[])
    perf_plugins.PerfEnvPlugin(**{k: v for k, v in kw.items() if k in fields}).setup(task, executor)
    return env, list(task.args)


def _kimi_dispatch_shim() -> None:
    """v0.4.x AutoBridge looks the architecture name up as a transformers attribute; the offline Kimi K2 config.json
    has no auto_map for remote code, and KimiK2Bridge is registered by the name "KimiK2ForCausalLM" only, so a
    placeholder class of that name is enough for the dispatch (no model is built)."""
    import transformers
    from megatron.bridge.models.conversion import auto_bridge

    placeholder = type("KimiK2ForCausalLM", (), {})
    transformers.KimiK2ForCausalLM = placeholder
    prop = auto_bridge.AutoBridge.__dict__["_causal_lm_architecture"]
    getter = prop.fget if isinstance(prop, property) else prop.func

    def patched(self):
        try:
            return getter(self)
        except ValueError as err:
            if "KimiK2ForCausalLM" in str(err):
                return placeholder
            raise

    auto_bridge.AutoBridge._causal_lm_architecture = property(patched)


def dump(recipe: str, optimizer: str | None, tag: str, release: str, out: Path) -> Path:
    import megatron.bridge
    import megatron.core
    from argument_parser import parse_cli_args
    from utils.overrides import set_cli_overrides, set_post_overrides, set_user_overrides
    from utils.utils import get_perf_optimized_recipe

    family, model, gpu, dtype, ngpu, _ = RECIPES[recipe]
    _pretend_gpu(gpu)
    argv = ["-m", family, "-mr", model, "-g", gpu, "-c", dtype, "-ng", str(ngpu)]
    argv += ["--optimizer_type", optimizer] if optimizer else []
    parser = parse_cli_args()
    args, _ = parser.parse_known_args(argv)
    env, plugin_args = _launcher_env(args, family, model, gpu, dtype)
    argv += plugin_args
    args, cli_overrides = parser.parse_known_args(argv)
    kw = dict(
        model_family_name=args.model_family_name,
        model_recipe_name=args.model_recipe_name,
        train_task=args.task,
        gpu=args.gpu,
        compute_dtype=args.compute_dtype,
        mock=args.data == "mock",
        config_variant=args.config_variant,
    )
    if "optimizer_type" in inspect.signature(get_perf_optimized_recipe).parameters:
        kw["optimizer_type"] = optimizer
    cfg = get_perf_optimized_recipe(**kw)
    cfg = set_cli_overrides(cfg, cli_overrides)
    cfg = set_user_overrides(cfg, args)
    cfg = set_post_overrides(
        cfg,
        args.model_family_name,
        args.model_recipe_name,
        args.gpu,
        args.num_gpus,
        args.compute_dtype,
        args.task,
        user_gbs=args.global_batch_size,
        config_variant=args.config_variant,
    )
    flatten = _load("bb_flatten", REPO / "src" / "bridgebench" / "mbridge" / "flatten.py")
    flat = {k: v for k, v in flatten.flatten(cfg).items() if not k.startswith("env_vars.")}
    flat.update({f"env_vars.{k}": flatten.plain(v) for k, v in env.items()})
    meta = {
        "release": release,
        "megatron_bridge_version": megatron.bridge.__version__.split("+")[0],
        "megatron_core_version": megatron.core.__version__.split("+")[0],
        "preset": recipe,
        "optimizer_variant": optimizer or flat.get("optimizer.optimizer"),
        "source": f"Megatron-Bridge {tag} scripts/performance (git tag) + {tag} wheel src; launcher argv "
        f"{' '.join(argv)} (config_variant default {args.config_variant!r})",
        "env_vars_source": f"{tag}: utils/executors.py PERF_ENV_VARS + perf_plugins.py PerfEnvPlugin.setup (executed)",
        "gpu_stand_in": f"torch.cuda.get_device_properties patched to report {GPUS[gpu][:3]}",
        "how": "executed: get_perf_optimized_recipe -> set_cli_overrides -> set_user_overrides -> set_post_overrides "
        "(run_script.py main without pretrain); TE import stand-in; offline HF config cache",
    }
    path = out / release / f"{recipe}__{meta['optimizer_variant']}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump({"_meta": meta}, sort_keys=False, width=120)
    text += yaml.safe_dump(flat, sort_keys=False, default_flow_style=None, width=160)
    path.write_text(text)
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tag", required=True, help="Megatron-Bridge git tag, e.g. v0.3.1")
    ap.add_argument("--release", required=True, help="NeMo release, e.g. 26.02.01")
    ap.add_argument("--scripts", required=True, type=Path, help="<tag checkout>/scripts/performance")
    ap.add_argument("--out", type=Path, default=HERE)
    ap.add_argument("recipes", nargs="*", default=list(RECIPES))
    a = ap.parse_args()
    sys.path[:0] = [str(a.scripts), str(REPO / "src")]
    from bridgebench.mbridge import hf_cache, te_stub

    hf_cache.activate()
    te_stub.install()
    if not te_stub.te_available() and "transformer_engine_torch" not in sys.modules:
        # v0.4+ diffusion (wan) modules import TE's C extension at import time: an empty placeholder module
        sys.modules["transformer_engine_torch"] = types.ModuleType("transformer_engine_torch")
    if a.tag.startswith("v0.4") and "kimi_k2_gb300_mxfp8" in a.recipes:
        _kimi_dispatch_shim()
    failed = 0
    for recipe in a.recipes:
        for optimizer in RECIPES[recipe][5]:
            try:
                print(f"wrote {dump(recipe, optimizer, a.tag, a.release, a.out)}")
            except Exception as err:  # noqa: BLE001  (a release without that recipe: report, go on)
                failed += 1
                print(f"FAILED {recipe} {optimizer}: {err!r}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main())
