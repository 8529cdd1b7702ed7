#!/usr/bin/env python3
"""Measure SGLang's hook surface per release, statically: for every hook target of
`specfsm_sglang.compat.Surface`, does ``module.Class.method`` exist in that release's wheel, in
which file, and with which signature. Nothing of SGLang is imported (its source is parsed with
`ast`), so any release can be read on any machine.

    python scripts/sglang_surfaces.py                 # download 0.5.17 .. 0.5.23 (pip, no deps)
    python scripts/sglang_surfaces.py --wheels DIR    # or read the wheels already in DIR

Writes adapters/specfsm_sglang/surfaces/<version>.json (committed). tests/adapter/
test_surface_data.py checks `compat.SURFACES` against those files without network.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "adapters"))
from specfsm_sglang.compat import Surface, hook_targets  # noqa: E402

OUT = ROOT / "adapters" / "specfsm_sglang" / "surfaces"
VERSIONS = [f"0.5.{n}" for n in range(17, 24)]


class Wheel:
    """The Python sources of one wheel, parsed on demand."""

    def __init__(self, path: Path) -> None:
        self.zip = zipfile.ZipFile(path)
        self.names = set(self.zip.namelist())
        self._trees: dict[str, ast.Module | None] = {}

    def module(self, dotted: str) -> tuple[str, ast.Module] | None:
        for cand in (dotted.replace(".", "/") + ".py", dotted.replace(".", "/") + "/__init__.py"):
            if cand in self.names:
                if cand not in self._trees:
                    self._trees[cand] = ast.parse(self.zip.read(cand))
                tree = self._trees[cand]
                return (cand, tree) if tree is not None else None
        return None


def _signature(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    a = fn.args
    parts = [p.arg for p in a.posonlyargs + a.args]
    if a.vararg:
        parts.append("*" + a.vararg.arg)
    elif a.kwonlyargs:
        parts.append("*")
    parts += [k.arg for k in a.kwonlyargs]
    if a.kwarg:
        parts.append("**" + a.kwarg.arg)
    return "(" + ", ".join(parts) + ")"


def find_method(wheel: Wheel, module: str, cls: str, method: str, depth: int = 0) -> dict | None:
    """`cls.method` in `module`, following the class's bases through ``from X import Base``."""
    found = wheel.module(module)
    if found is None or depth > 6:
        return None
    path, tree = found
    imports = {
        alias.asname or alias.name: (node.module, alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if (
                    isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and item.name == method
                ):
                    return {"file": path, "line": item.lineno, "signature": _signature(item)}
            for base in node.bases:
                if isinstance(base, ast.Name):
                    mod, name = imports.get(base.id, (module, base.id))
                    hit = find_method(wheel, mod, name, method, depth + 1)
                    if hit is not None:
                        return hit
            return None
    if cls in imports:  # re-exported
        mod, name = imports[cls]
        return find_method(wheel, mod, name, method, depth + 1)
    return None


def measure(wheel_path: Path) -> dict:
    wheel = Wheel(wheel_path)
    targets = {}
    for name, target in hook_targets(Surface()).items():
        module, cls, method = target.rsplit(".", 2)
        targets[name] = {"target": target, "found": find_method(wheel, module, cls, method)}
    return targets


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wheels", type=Path, help="a folder with the sglang wheels")
    a = ap.parse_args()
    folder = a.wheels or Path(tempfile.mkdtemp(prefix="sglang-wheels-"))
    OUT.mkdir(parents=True, exist_ok=True)
    for v in VERSIONS:
        wheels = sorted(folder.glob(f"sglang-{v}-*.whl"))
        if not wheels and a.wheels is None:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
            r = subprocess.run([*cmd, "-q", "-d", str(folder), f"sglang=={v}"], check=False)
            wheels = sorted(folder.glob(f"sglang-{v}-*.whl")) if r.returncode == 0 else []
        if not wheels:
            print(f"sglang {v}: no wheel (not on PyPI?)")
            continue
        targets = measure(wheels[0])
        missing = [n for n, t in targets.items() if t["found"] is None]
        data = {"version": v, "wheel": re.sub(r"^.*/", "", str(wheels[0])), "targets": targets}
        (OUT / f"{v}.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        print(
            f"sglang {v}: {len(targets) - len(missing)}/{len(targets)} targets"
            + (f"; missing {', '.join(missing)}" if missing else "")
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
