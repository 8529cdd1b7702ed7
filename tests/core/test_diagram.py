"""Diagrams come from the table, and the committed doc matches it."""

from __future__ import annotations

from pathlib import Path

from specfsm import TRANSITIONS
from specfsm.cli import main
from specfsm.diagram import doc_block, render

DOC = Path(__file__).resolve().parents[2] / "docs" / "state-machine.md"


def test_mermaid_has_every_edge() -> None:
    """Every table edge appears in the Mermaid source."""
    src = render("mermaid")
    assert src.startswith("---")
    assert "stateDiagram-v2" in src
    for s, row in TRANSITIONS.items():
        for e, d in row.items():
            edge = [
                ln for ln in src.splitlines() if ln.strip().startswith(f"{s.name} --> {d.name}:")
            ]
            assert edge and e.value in edge[0], (s, e, d)


def test_dot_renders() -> None:
    """The DOT source names every mode."""
    src = render("dot")
    assert src.startswith("digraph")
    for s in TRANSITIONS:
        assert s.name in src


def test_committed_doc_matches_table() -> None:
    """docs/state-machine.md embeds exactly the block generated from the table
    (regenerate: specfsm diagram --update-doc docs/state-machine.md)."""
    assert doc_block() in DOC.read_text()


def test_cli_diagram(capsys: object) -> None:
    """`specfsm diagram --format mermaid` prints the diagram."""
    assert main(["diagram", "--format", "mermaid"]) == 0
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "stateDiagram-v2" in out
