"""Diagrams come from the table, and the committed doc matches it."""

from __future__ import annotations

from pathlib import Path

from specfsm import TRANSITIONS
from specfsm.cli import main
from specfsm.fsm.diagram import TITLE, doc_block, edge_table, mermaid_hash, render
from specfsm.fsm.table import EVENT_SOURCES

DOC = Path(__file__).resolve().parents[2] / "docs" / "state-machine.md"
SVG = DOC.parent / "img" / "state-machine.svg"


def test_mermaid_has_every_edge() -> None:
    """Every table edge appears in the Mermaid source, labelled with the event name the logs
    print (LOAD_HIGH, not the trigger value load_high)."""
    src = render("mermaid")
    assert src.startswith("---")
    assert "stateDiagram-v2" in src
    for s, row in TRANSITIONS.items():
        for e, d in row.items():
            if s is d:  # a self-loop is drawn as a note (its label would sit on other labels)
                assert f"note left of {s.name} : {e.name} in {s.name} stays in {s.name}" in src
                continue
            edge = [
                ln for ln in src.splitlines() if ln.strip().startswith(f"{s.name} --> {d.name}:")
            ]
            labels = [x.strip() for x in edge[0].split(":", 1)[1].split("|")] if edge else []
            assert e.name in labels, (s, e, d)
            assert e.value not in edge[0].split(":", 1)[1], (s, e, d)


def test_mermaid_is_a_document() -> None:
    """A real `title:` front matter (Mermaid drops a bare title) and no runtime colouring."""
    src = render("mermaid")
    assert src.splitlines()[:3] == ["---", f"title: {TITLE}", "---"]
    assert "classDef" not in src and "Class " not in src


def test_edge_table_says_who_emits_every_event() -> None:
    """The table beside the diagram has one row per edge with its emitter and meaning."""
    rows = edge_table()[2:]
    assert len(rows) == sum(len(r) for r in TRANSITIONS.values())
    for event, (who, when) in EVENT_SOURCES.items():
        assert any(f"`{event.name}`" in r and who in r and when in r for r in rows), event


def test_rendered_svg_is_from_the_current_source() -> None:
    """docs/img/state-machine.svg was rendered (scripts/render_diagram.py) from today's Mermaid
    source (it records the source hash) and names every mode and event."""
    svg = SVG.read_text()
    assert f"specfsm mermaid source hash {mermaid_hash()}" in svg, (
        "the table changed: re-render with scripts/render_diagram.py"
    )
    for mode in TRANSITIONS:
        assert mode.name in svg
    for event in EVENT_SOURCES:
        assert event.name in svg


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
