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
    """The diagram source in `fmt` ("mermaid" needs nothing; "dot" needs `graphviz`)."""
    if fmt not in FORMATS:
        raise ValueError(f"diagram format must be one of {FORMATS}, got {fmt!r}")
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
