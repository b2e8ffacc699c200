"""Import stand-in for Transformer Engine, for planning on machines without it (no GPU, no TE wheel).

Megatron-Bridge 0.6.2 ``megatron/bridge/peft/lora_layers.py`` runs ``import transformer_engine.pytorch as te`` at
import time and uses ``te.ops.Sequential`` etc. in annotations, so importing recipes, configs or ``flop_utils``
fails without TE. :func:`install` puts a placeholder package in ``sys.modules`` *after* ``megatron.core`` has been
imported (so Megatron-Core has already decided ``HAVE_TE = False`` and builds nothing with it). Every attribute of
the placeholder is a placeholder class; instantiating one raises :class:`TransformerEngineMissing`. Never build or
run a model with it installed: it exists so config objects can be constructed and validated off-GPU.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import types

from bridgebench.errors import BridgebenchError

STUB_MARK = "__bridgebench_te_stub__"


class TransformerEngineMissing(BridgebenchError, RuntimeError):
    """Raised when code tries to use Transformer Engine through the planning stand-in."""


class _PlaceholderMeta(type):
    def __getattr__(cls, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _placeholder(f"{cls.__qualname__}.{name}")


def _placeholder(qualname: str) -> type:
    def _init(self, *args, **kwargs):
        raise TransformerEngineMissing(
            f"{qualname}: Transformer Engine is not installed; bridgebench's planning stand-in cannot build models"
        )

    return _PlaceholderMeta(qualname.rsplit(".", 1)[-1], (), {"__init__": _init, "__qualname__": qualname})


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        value = _placeholder(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


def _module(name: str, is_package: bool) -> types.ModuleType:
    mod = _StubModule(name)
    mod.__spec__ = importlib.machinery.ModuleSpec(name, loader=None, is_package=is_package)
    if is_package:
        mod.__path__ = []
    setattr(mod, STUB_MARK, True)
    mod.__version__ = "0.0.0+bridgebench.stub"
    return mod


def te_available() -> bool:
    """True when a real Transformer Engine is importable (the stand-in does not count)."""
    mod = sys.modules.get("transformer_engine")
    if mod is not None:
        return not getattr(mod, STUB_MARK, False)
    return importlib.util.find_spec("transformer_engine") is not None


def install() -> bool:
    """Install the stand-in if TE is missing. Imports ``megatron.core`` first. Returns True if installed.

    Idempotent; does nothing (returns False) when a real Transformer Engine is importable.
    """
    import megatron.core  # noqa: F401  (must decide HAVE_TE before the stand-in exists)

    if te_available():
        return False
    if getattr(sys.modules.get("transformer_engine"), STUB_MARK, False):
        return True
    root = _module("transformer_engine", True)
    pytorch = _module("transformer_engine.pytorch", True)
    ops = _module("transformer_engine.pytorch.ops", False)
    pytorch.ops = ops
    root.pytorch = pytorch
    sys.modules.update(
        {"transformer_engine": root, "transformer_engine.pytorch": pytorch, "transformer_engine.pytorch.ops": ops}
    )
    return True
