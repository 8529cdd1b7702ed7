"""State diagrams generated from the table by an offline `transitions` GraphMachine.

The runtime machine never is a GraphMachine (it restyles its graph on every transition); this
module builds a separate one only to render text.
"""

from __future__ import annotations

from typing import Any

from specfsm.machine import machine_config
from specfsm.table import INITIAL_MODE

FORMATS = ("mermaid", "dot")


def render(fmt: str = "mermaid") -> str:
    """The diagram source in `fmt` ("mermaid" needs nothing; "dot" needs the `graphviz`
    Python package: without it `specfsm.cli.MissingExtra`, never transitions' silent fallback
    to Mermaid)."""
    if fmt not in FORMATS:
        raise ValueError(f"diagram format must be one of {FORMATS}, got {fmt!r}")
    if fmt == "dot":
        from specfsm.cli import require_extra

        require_extra("--format dot", "diagram", "graphviz")
    from transitions.extensions.diagrams import GraphMachine

    class _Model:
        pass

    model: Any = _Model()
    GraphMachine(
        model=model,
        initial=INITIAL_MODE,
        graph_engine="mermaid" if fmt == "mermaid" else "graphviz",
        show_conditions=False,
        title="specfsm",
        **machine_config(),
    )
    source: str = model.get_graph().source
    return source.rstrip() + "\n"


BEGIN = "<!-- BEGIN GENERATED from specfsm.TRANSITIONS by `specfsm diagram --update-doc` -->"
END = "<!-- END GENERATED -->"


def doc_block() -> str:
    """The generated part of docs/state-machine.md: the Mermaid diagram and the table."""
    from specfsm.table import TRANSITIONS, Event, Mode

    rows = ["| mode | " + " | ".join(e.name for e in Event) + " |"]
    rows.append("|---" * (len(Event) + 1) + "|")
    for mode in Mode:
        cells = [TRANSITIONS[mode][e].name if e in TRANSITIONS[mode] else "-" for e in Event]
        rows.append(f"| **{mode.name}** | " + " | ".join(cells) + " |")
    return "\n".join(
        [
            BEGIN,
            "```mermaid",
            render("mermaid").rstrip(),
            "```",
            "",
            "Mode x Event (`-`: raises `InvalidTransition`, mode unchanged):",
            "",
            *rows,
            END,
        ]
    )


def update_doc(text: str) -> str:
    """`text` with its generated block replaced by the current one."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError("generated-block markers not found")
    return text[:start] + doc_block() + text[end + len(END) :]
