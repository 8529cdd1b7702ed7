"""The import graph of specfsm/ has no circle, whatever kind of import closes it.

Every import between specfsm modules is one of three kinds: at module level (runs at import),
inside a function (runs on the first call) or under ``if TYPE_CHECKING:`` (never runs, but a
circle through it still ties two modules to each other). A circle through a lazy or typing-only
import does not fail at import time, which is why it needs its own check: each kind is counted
and the circles of the whole graph reported. Run as a script for the report:

    .venv/bin/python tests/core/test_import_graph.py
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "specfsm"

EAGER = "module"  # at module level (including under try/except or a plain `if`)
LAZY = "function"  # inside a function or method body
TYPING = "TYPE_CHECKING"  # under `if TYPE_CHECKING:`

Edge = tuple[str, str, str, int]  # (importer, imported, kind, line)


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _targets(node: ast.Import | ast.ImportFrom, importer: str, mods: dict[str, Path]) -> list[str]:
    """The specfsm modules an import statement names (a `from pkg import sub` names `sub`
    when it is a module, else `pkg`; a relative import is resolved from `importer`)."""
    known = mods.keys()
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in known]
    if node.level:
        is_pkg = mods[importer].name == "__init__.py"
        base = importer.split(".")
        base = base if is_pkg else base[:-1]
        base = base[: len(base) - (node.level - 1)]
        mod = ".".join([*base, *([node.module] if node.module else [])])
    else:
        mod = node.module or ""
    out = [f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in known]
    if mod in known and len(out) < len(node.names):
        out.append(mod)
    return out


def edges(mods: dict[str, Path]) -> list[Edge]:
    """Every import between specfsm modules, with its kind and line."""
    out: list[Edge] = []

    def walk(node: ast.AST, importer: str, kind: str) -> None:
        for child in ast.iter_child_nodes(node):
            k = kind
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                k = kind if kind == TYPING else LAZY
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    walk_stmt(stmt, importer, TYPING)
                for stmt in child.orelse:
                    walk_stmt(stmt, importer, k)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for target in _targets(child, importer, mods):
                    if target != importer:
                        out.append((importer, target, k, child.lineno))
            walk(child, importer, k)

    def walk_stmt(stmt: ast.stmt, importer: str, kind: str) -> None:
        wrapper = ast.Module(body=[stmt], type_ignores=[])
        walk(wrapper, importer, kind)

    for name, path in mods.items():
        walk(ast.parse(path.read_text()), name, EAGER)
    return out


def circles(es: list[Edge], kinds: tuple[str, ...] = (EAGER, LAZY, TYPING)) -> list[list[str]]:
    """The strongly connected components (more than one module) of the graph of `kinds`."""
    graph: dict[str, set[str]] = {}
    for a, b, k, _ in es:
        if k in kinds:
            graph.setdefault(a, set()).add(b)
            graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return sorted(out)


def report() -> str:
    mods = modules()
    es = edges(mods)
    by_kind = Counter(k for _, _, k, _ in es)
    lines = [
        f"{len(mods)} modules, {len(es)} imports between them: "
        + ", ".join(f"{by_kind[k]} {k}" for k in (EAGER, LAZY, TYPING))
    ]
    for kind in (LAZY, TYPING):
        for a, b, k, line in es:
            if k == kind:
                lines.append(f"  {kind:13s} {a}:{line} -> {b}")
    for label, kinds in (
        ("module-level only", (EAGER,)),
        ("with imports in functions", (EAGER, LAZY)),
        ("with TYPE_CHECKING imports too", (EAGER, LAZY, TYPING)),
    ):
        found = circles(es, kinds)
        lines.append(f"circles, {label}: {len(found)}")
        for comp in found:
            inner = set(comp)
            lines.append("  " + " <-> ".join(comp))
            for a, b, k, line in es:
                if a in inner and b in inner and k in kinds:
                    lines.append(f"      {a}:{line} -> {b} ({k})")
    return "\n".join(lines)


def test_the_script_sees_every_kind() -> None:
    """The walker tells the three kinds apart (each occurs in specfsm/)."""
    kinds = {k for _, _, k, _ in edges(modules())}
    assert kinds == {EAGER, LAZY, TYPING}


def test_a_circle_through_any_kind_is_found(tmp_path: Path) -> None:
    """A planted package: a circle closed by a lazy import, one closed by a TYPE_CHECKING
    import, and a relative import, each found; module-level edges alone show none."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    files = {
        "__init__.py": "",
        "a.py": "from pkg import b\n",
        "b.py": "def f():\n    from pkg.a import x\n",
        "c.py": "from . import d\n",
        "d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.c import y\n",
    }
    for name, text in files.items():
        (pkg / name).write_text(text)
    mods = {f"pkg.{p.stem}" if p.stem != "__init__" else "pkg": p for p in pkg.glob("*.py")}
    es = edges(mods)
    assert sorted((a, b, k) for a, b, k, _ in es) == [
        ("pkg.a", "pkg.b", EAGER),
        ("pkg.b", "pkg.a", LAZY),
        ("pkg.c", "pkg.d", EAGER),
        ("pkg.d", "pkg.c", TYPING),
    ]
    assert circles(es, (EAGER,)) == []
    assert circles(es, (EAGER, LAZY)) == [["pkg.a", "pkg.b"]]
    assert circles(es) == [["pkg.a", "pkg.b"], ["pkg.c", "pkg.d"]]


def test_no_import_circle_in_specfsm() -> None:
    """No specfsm module reaches itself again through imports of any kind."""
    assert circles(edges(modules())) == [], report()


if __name__ == "__main__":
    print(report())
