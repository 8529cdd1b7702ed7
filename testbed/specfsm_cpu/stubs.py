"""Import-only stand-ins for two GPU-only modules SGLang 0.5.23 imports on CPU.

Installed into ``sys.modules`` by :func:`specfsm_cpu.boot.boot` at interpreter start,
before any ``sglang.srt`` import. Neither stub is a mock of behaviour under test:

* ``torchvision``: SGLang imports it unconditionally (first at
  ``srt/multimodal/internvl_utils.py:5`` through ``srt/configs/__init__.py:71``) for multimodal
  models only. The only torchvision wheel matching torch 2.13 here is a CUDA build that fails
  against CPU torch (``operator torchvision::nms does not exist``). NOTHING UNDER TEST CALLS IT:
  the test bed runs text-only Llama models; any attribute access raises.
* ``sgl_kernel``: SGLang's compiled kernel package has no CPU wheel on PyPI, yet on CPU it is
  imported at module level (e.g. ``kernels/ops/kvcache/cache_move.py:10``,
  ``kernels/ops/speculative/eagle.py:10``, ``cache_locs.py:28``, ``spec_tree.py:43``,
  ``mem_cache/allocation.py:46``). The ops the EAGLE path really calls on CPU are provided by
  pure-torch ports in :mod:`specfsm_cpu.ops` (each unit-tested). Every other name resolves
  to a placeholder that raises when CALLED: nothing under test calls one (a call means a path the
  test bed does not support, and it fails loudly). ``torch.ops.sgl_kernel`` stays empty, so
  ``cpu_has_amx_support()`` is False and layers use their native torch code
  (``srt/utils/common.py:354-372``).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any, NoReturn

STUB_MARKER = "__specfsm_stub__"


class StubCalledError(RuntimeError):
    """A GPU-only placeholder was called: the CPU test bed does not support this path."""


def _placeholder(module: str, name: str) -> Any:
    def _unsupported(*args: Any, **kwargs: Any) -> NoReturn:
        raise StubCalledError(
            f"{module}.{name} is an import-only stub of the specfsm SGLang CPU test bed "
            "(specfsm_cpu.stubs); this code path is not supported on CPU"
        )

    _unsupported.__name__ = name
    _unsupported.__qualname__ = f"{module}.{name}"
    return _unsupported


def _new_module(name: str, doc: str) -> types.ModuleType:
    mod = types.ModuleType(name, doc)
    mod.__spec__ = importlib.machinery.ModuleSpec(name, loader=None, is_package=True)
    mod.__path__ = []  # a package without submodules: `import name.sub` fails loudly
    mod.__file__ = __file__
    setattr(mod, STUB_MARKER, True)
    return mod


def make_sgl_kernel() -> types.ModuleType:
    """The ``sgl_kernel`` stand-in: real CPU-op ports plus raising placeholders."""
    from specfsm_cpu import ops

    mod = _new_module(
        "sgl_kernel",
        "specfsm CPU test bed stand-in for sgl_kernel (see specfsm_cpu.stubs).",
    )
    for name in ops.__all__:
        setattr(mod, name, getattr(ops, name))

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _placeholder("sgl_kernel", name)

    mod.__getattr__ = __getattr__  # type: ignore[method-assign]
    return mod


def make_torchvision() -> types.ModuleType:
    """The ``torchvision`` stand-in: every attribute is a raising placeholder."""
    mod = _new_module(
        "torchvision",
        "specfsm CPU test bed import-only stand-in for torchvision (text models only).",
    )
    mod.__version__ = "0.0.0+specfsm.stub"  # type: ignore[attr-defined]

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _placeholder("torchvision", name)

    mod.__getattr__ = __getattr__  # type: ignore[method-assign]
    return mod


class _StubSubmoduleFinder(importlib.machinery.PathFinder):
    """Serves ``torchvision.<sub>`` (e.g. ``torchvision.transforms``) as further stubs.

    SGLang does ``import torchvision.transforms as T`` and
    ``from torchvision.transforms.functional import InterpolationMode`` at module level
    (``srt/multimodal/internvl_utils.py:5-7``); neither is used by text models.
    """

    @classmethod
    def find_spec(cls, fullname: str, path: Any = None, target: Any = None) -> Any:
        if not fullname.startswith("torchvision."):
            return None
        return importlib.machinery.ModuleSpec(fullname, _StubLoader(), is_package=True)


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        mod = make_torchvision()
        mod.__name__ = spec.name
        mod.__spec__ = spec
        return mod

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def _prime_transformers_torchvision_check() -> None:
    """Make transformers' cached ``is_torchvision_available()`` answer False.

    transformers caches the answer (``@lru_cache`` in ``transformers/utils/import_utils.py``)
    and would otherwise find the stub through ``importlib.util.find_spec`` and pick torchvision
    image processors. A ``None`` entry in ``sys.modules`` makes ``find_spec`` return None while
    the check runs, whether or not a (broken) torchvision is installed.
    """
    sys.modules["torchvision"] = None  # type: ignore[assignment]
    try:
        from transformers.utils import import_utils

        import_utils.is_torchvision_available()
    finally:
        del sys.modules["torchvision"]


def install() -> None:
    """Put both stubs into ``sys.modules`` (idempotent)."""
    if getattr(sys.modules.get("sgl_kernel"), STUB_MARKER, False):
        return
    _prime_transformers_torchvision_check()
    sys.modules["torchvision"] = make_torchvision()
    sys.meta_path.insert(0, _StubSubmoduleFinder)
    sys.modules["sgl_kernel"] = make_sgl_kernel()
