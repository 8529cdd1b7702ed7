"""scripts/sglang_surfaces.py reads a wheel without importing it: a method found on the class,
on a base imported from another module, or reported missing."""

from __future__ import annotations

import importlib.util
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("specfsm_sglang")
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "sglang_surfaces.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sglang_surfaces", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_find_method_through_bases(tmp_path: Path) -> None:
    whl = tmp_path / "sglang-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr(
            "sglang/a.py",
            "from sglang.b import Mixin\nclass S(Mixin):\n    def __init__(self, server_args, *a):"
            "\n        pass\n",
        )
        z.writestr(
            "sglang/b.py",
            "class Mixin:\n    async def on_idle(self, *, fast=1, **kw):\n        pass\n",
        )
    mod = _script()
    wheel = mod.Wheel(whl)
    init = mod.find_method(wheel, "sglang.a", "S", "__init__")
    assert init == {"file": "sglang/a.py", "line": 3, "signature": "(self, server_args, *a)"}
    idle = mod.find_method(wheel, "sglang.a", "S", "on_idle")
    assert idle == {"file": "sglang/b.py", "line": 2, "signature": "(self, *, fast, **kw)"}
    assert mod.find_method(wheel, "sglang.a", "S", "gone") is None
    assert mod.find_method(wheel, "sglang.nope", "S", "__init__") is None
