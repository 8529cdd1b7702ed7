"""State diagrams generated from the table by an offline `transitions` GraphMachine.

The runtime machine never is a GraphMachine (it restyles its graph on every transition); this
module builds a separate one only to render text. The diagram is a document, not a snapshot of
a running machine: edges carry the event names the logs print (LOAD_HIGH, not the trigger
value load_high), the Mermaid front matter has a real `title:`, and GraphMachine's runtime
colouring (its active-state classes) is left out. `edge_table()` says beside it who emits each
event and when (`specfsm.fsm.table.EVENT_SOURCES`). A rendered SVG is committed next to the source
(docs/img/state-machine.svg, `scripts/render_diagram.sh`); it records the hash of the Mermaid
source it was rendered from, and a test fails when the table moves on without it.
"""

from __future__ import annotations

import hashlib
from typing import Any

from specfsm.fsm.machine import machine_config
from specfsm.fsm.table import (
    EVENT_SOURCES,
    INITIAL_MODE,
    TRANSITIONS,
    Event,
    Mode,
    shape_action_name,
)

FORMATS = ("mermaid", "dot")
TITLE = "specfsm modes and events, generated from specfsm.TRANSITIONS"


def render(fmt: str = "mermaid") -> str:
    """The diagram source in `fmt` ("mermaid" needs nothing; "dot" needs the `graphviz`
    Python package: without it `specfsm._extras.MissingExtra`, never transitions' silent fallback
    to Mermaid)."""
    if fmt not in FORMATS:
        raise ValueError(f"diagram format must be one of {FORMATS}, got {fmt!r}")
    if fmt == "dot":
        from specfsm._extras import require_extra

        require_extra("--format dot", "diagram", "graphviz")
    from transitions.extensions.diagrams import GraphMachine

    class _Model:
        pass

    model: Any = _Model()
    config = machine_config()
    for t in config["transitions"]:
        t["trigger"] = Event(t["trigger"]).name  # the names the logs print
    GraphMachine(
        model=model,
        initial=INITIAL_MODE,
        graph_engine="mermaid" if fmt == "mermaid" else "graphviz",
        show_conditions=False,
        title=TITLE,
        **config,
    )
    source: str = model.get_graph().source
    if fmt == "mermaid":
        source = _document(source)
    return source.rstrip() + "\n"


def _document(source: str) -> str:
    """GraphMachine's Mermaid as a document: a `title:` front matter (transitions writes the
    bare title, which Mermaid drops) and no runtime colouring (classDef / Class lines)."""
    body = source.split("---", 2)[2] if source.startswith("---") else source
    lines = [
        ln.rstrip()
        for ln in body.splitlines()
        if not ln.strip().startswith(("classDef ", "Class ")) and ln.strip()
    ]
    out = []
    for ln in lines:
        ln = ln.replace("direction LR", "direction TB")  # less crowded than left-to-right
        src, arrow, rest = ln.strip().partition(" --> ")
        if arrow and rest.split(":", 1)[0].strip() == src:
            # a self-loop's label lands on the other edges' labels: say it in a note instead
            # an internal one (a shape event) runs its own action, not exit + enter: say so
            labels = [x.strip() for x in rest.split(":", 1)[1].split("|")]
            for label in labels:
                event, internal, _ = label.partition(" [internal]")
                note = f"  note left of {src} : {event} in {src} stays in {src}"
                if internal:
                    action = shape_action_name(Event[event], Mode[src])
                    note += f" (internal, runs {action} only)"
                out.append(note)
            continue
        out.append(ln)
    return "\n".join(["---", f"title: {TITLE}", "---", *out])


def mermaid_hash() -> str:
    """sha256 (16 hex) of the Mermaid source: what a rendered SVG records it was made from."""
    return hashlib.sha256(render("mermaid").encode()).hexdigest()[:16]


def edge_table() -> list[str]:
    """Markdown rows: every edge of the table with who emits its event and when."""
    rows = ["| from | event | to | emitted by | when |", "|---|---|---|---|---|"]
    for src in Mode:
        for event, dst in TRANSITIONS[src].items():
            who, when = EVENT_SOURCES[event]
            rows.append(f"| {src.name} | `{event.name}` | {dst.name} | {who} | {when} |")
    return rows


BEGIN = "<!-- BEGIN GENERATED from specfsm.TRANSITIONS by `specfsm diagram --update-doc` -->"
END = "<!-- END GENERATED -->"


def doc_block() -> str:
    """The generated part of docs/state-machine.md: the Mermaid diagram and the table."""
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
            "![the state diagram, rendered](img/state-machine.svg)",
            "",
            "Rendered from the source above by Mermaid in a headless browser "
            f"(`scripts/render_diagram.py`; source hash `{mermaid_hash()}`).",
            "",
            "Every edge, who emits its event and when (`specfsm.fsm.table.EVENT_SOURCES`):",
            "",
            *edge_table(),
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
