"""The package layout is the architecture: which parts may import which."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "specfsm"
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
