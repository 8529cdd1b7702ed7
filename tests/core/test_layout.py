"""The package layout is the architecture: which parts may import which."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "specfsm"
#: The SGLang adapter (the plugin, shipped in the same wheel)
ADAPTER = PKG.parent / "adapters" / "specfsm_sglang"
#: The one model module the FSM core may import: DraftShape's (pure Python, attrs only).
ALLOWED_IN_FSM = "specfsm.model.acceptance"


def _imports(path: Path) -> set[str]:
    """Every module `path` imports (at any depth: lazy imports count too)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def _modules(sub: str) -> list[Path]:
    return sorted((PKG / sub).rglob("*.py")) if sub else sorted(PKG.rglob("*.py"))


@pytest.mark.parametrize(
    ("part", "forbidden"),
    [
        ("fsm", ("specfsm.policy", "specfsm.model", "specfsm.sim", "specfsm.cli")),
        ("model", ("specfsm.policy", "specfsm.sim", "specfsm.cli")),
        ("policy", ("specfsm.sim", "specfsm.cli")),
        ("sim", ("specfsm.cli",)),
        ("", ("specfsm_sglang",)),
    ],
)
def test_arrows_point_one_way(part: str, forbidden: tuple[str, ...]) -> None:
    """The FSM core imports no policy, model (but DraftShape's pure module), sim or cli; nothing
    in specfsm/ the adapter."""
    bad = [
        f"{path.relative_to(PKG.parent)}: {mod}"
        for path in _modules(part)
        for mod in _imports(path)
        if any(mod == f or mod.startswith(f + ".") for f in forbidden)
        and not (part == "fsm" and mod.startswith(ALLOWED_IN_FSM))
    ]
    assert bad == []


def test_no_hidden_arrow_to_the_adapter() -> None:
    """No module name of the adapter appears as a string in specfsm/ (no importlib arrows)."""
    bad = [
        f"{path.relative_to(PKG.parent)}:{node.lineno}: {node.value!r}"
        for path in _modules("")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.startswith(("specfsm_sglang", "specfsm_testbed", "specfsm_cpu"))
    ]
    assert bad == []


def test_core_imports_without_numpy() -> None:
    """fsm, policy, model, the registry and the CLI import with numpy and matplotlib blocked."""
    code = (
        "import sys; sys.modules['numpy'] = None; sys.modules['matplotlib'] = None\n"
        "import specfsm, specfsm.fsm.machine, specfsm.fsm.diagram, specfsm.policy\n"
        "import specfsm.policy.registry, specfsm.model.costs, specfsm.cli.main\n"
        "import specfsm.sim.engine, specfsm.sim.peers, specfsm.sim.report, specfsm.sim.tune\n"
        "from specfsm import SpecFSM; SpecFSM()\n"
        "assert 'specfsm_sglang' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_no_transitions_logger_level_at_import() -> None:
    """Import leaves the `transitions` logger alone; a SpecFSM quiets it unless a level is set."""
    code = (
        "import logging, specfsm\n"
        "assert logging.getLogger('transitions').level == logging.NOTSET\n"
        "specfsm.SpecFSM()\n"
        "assert logging.getLogger('transitions').level == logging.WARNING\n"
        "logging.getLogger('transitions').setLevel(logging.DEBUG); specfsm.SpecFSM()\n"
        "assert logging.getLogger('transitions').level == logging.DEBUG\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_py_typed_ships() -> None:
    """The PEP 561 marker is in the package folder (so the wheel carries it)."""
    assert (PKG / "py.typed").is_file()


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _runtime_imports(path: Path) -> set[str]:
    """The specfsm modules `path` imports when it runs (lazy imports too; not those under
    `if TYPE_CHECKING:`, which never run)."""
    tree = ast.parse(path.read_text())
    typing_only = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for stmt in node.body
        for n in ast.walk(stmt)
    }
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return {m for m in out if m.startswith("specfsm")}


#: the parts whose modules must form no import circle and stay at most 450 lines
CORE_PARTS = ("fsm", "model", "policy", "sim")


def _core_modules() -> list[Path]:
    return [p for part in CORE_PARTS for p in _modules(part)] + [PKG / "__init__.py"]


def _circles(graph: dict[str, list[str]]) -> list[list[str]]:
    """The import circles of `graph` (module -> the modules it imports), one per back edge."""
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for n in graph[m]:
            if state.get(n) == 1:
                cycles.append([*stack[stack.index(n) :], n])
            elif n not in state:
                visit(n, [*stack, n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    return cycles


def test_no_import_circle() -> None:
    """No core module imports itself back through others (the arrows form a DAG)."""
    modules = {_module_name(p): p for p in _core_modules()}
    graph = {m: sorted(x for x in _runtime_imports(p) if x in modules and x != m)
             for m, p in modules.items()}  # fmt: skip
    assert _circles(graph) == []


def test_modules_are_small() -> None:
    """Every core module is at most 450 lines: one job each."""
    big = {str(p.relative_to(PKG.parent)): n for p in _core_modules()
           if (n := len(p.read_text().splitlines())) > 450}  # fmt: skip
    assert big == {}


# ------------------------------------------------------------------------------ the adapter
#: Adapter modules allowed past 450 lines, each with the reason it still is.
ADAPTER_LONG: dict[str, str] = {}

#: The adapter modules `specfsm config check` runs, which must import without SGLang or torch
#: (the check runs on a machine without them: specfsm_sglang.config_check).
CONFIG_MODULES = (
    "config",
    "config_check",
    "schema",
    "values",
    "paths",
    "refusal",
    "server_checks",
    "compat",
    "control",
)


#: A configuration file that passes the check (the GPU server example's)
EXAMPLE_CONFIG = PKG.parent / "examples" / "gpu_server" / "specfsm.json"


def _adapter_modules() -> list[Path]:
    return sorted(ADAPTER.glob("*.py"))


def _adapter_imports(path: Path) -> set[str]:
    """The adapter modules `path` imports, everywhere: at the top, inside functions and under
    `if TYPE_CHECKING:` (a circle through a type-only import still ties the modules together:
    neither can be read, typed or moved without the other)."""
    pkg = ADAPTER.name
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith(pkg + "."))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == pkg:  # from specfsm_sglang import config, hooks
                out.update(f"{pkg}.{a.name}" for a in node.names)
            elif node.module.startswith(pkg + "."):
                out.add(node.module)
    return out


def test_adapter_has_no_import_circle() -> None:
    """No adapter module imports itself back through others, counting lazy imports and
    type-only ones: the adapter's arrows form a DAG too."""
    modules = {f"{ADAPTER.name}.{p.stem}": p for p in _adapter_modules() if p.stem != "__init__"}
    graph = {m: sorted(x for x in _adapter_imports(p) if x in modules and x != m)
             for m, p in modules.items()}  # fmt: skip
    assert sum(map(len, graph.values())) > 20  # the walk sees the adapter's imports
    assert _circles(graph) == []


def test_adapter_modules_are_small() -> None:
    """Every adapter module is at most 450 lines (one job each), but the ones `ADAPTER_LONG`
    names with their reason; an exception that no longer applies is dropped from it."""
    sizes = {p.name: len(p.read_text().splitlines()) for p in _adapter_modules()}
    big = {name for name, n in sizes.items() if n > 450}
    assert big - set(ADAPTER_LONG) == set(), {n: sizes[n] for n in big - set(ADAPTER_LONG)}
    assert set(ADAPTER_LONG) - big == set(), "no longer over 450 lines: drop it from ADAPTER_LONG"


@pytest.mark.parametrize("mod", ["sglang", "torch"])
def test_only_the_adapter_imports_sglang_and_torch(mod: str) -> None:
    """Nothing in specfsm/ imports SGLang; the core (fsm, model, policy, sim) imports no torch
    either (at any depth: lazy imports count). The one torch import outside the adapter is
    specfsm bundle's optional device report (logtools), which works without it."""
    paths = _modules("") if mod == "sglang" else _core_modules()
    bad = [
        f"{path.relative_to(PKG.parent)}: {m}"
        for path in paths
        for m in _imports(path)
        if m == mod or m.startswith(mod + ".")
    ]
    assert bad == []


def test_config_check_imports_without_sglang_or_torch() -> None:
    """The configuration's modules import, and check a file, with SGLang and torch blocked."""
    code = (
        "import sys; sys.modules['sglang'] = None; sys.modules['torch'] = None\n"
        "import importlib\n"
        f"for m in {CONFIG_MODULES!r}: importlib.import_module('specfsm_sglang.' + m)\n"
        "from specfsm_sglang import config\n"
        f"assert config.check_file({str(EXAMPLE_CONFIG)!r}) == []\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
