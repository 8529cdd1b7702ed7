"""The simulated walkthrough visits all four modes in order and changes the draft shape inside
SPECULATING (RESHAPE) on the way."""

from __future__ import annotations

import io
import json

from specfsm import Mode
from specfsm.cli.walkthrough import DEEP, SHALLOW, run


def test_walkthrough_visits_all_modes() -> None:
    """A 1 -> 64 -> 1 ramp goes SPECULATING, DRAINING, PLAIN, RESYNCING, SPECULATING, with a
    RESHAPE to the shallow shape on the way up and back to the deep one on the way down."""
    out = io.StringIO()
    modes = run(out)
    seq = [m for i, m in enumerate(modes) if i == 0 or modes[i - 1] is not m]
    assert seq == [Mode.SPECULATING, Mode.DRAINING, Mode.PLAIN, Mode.RESYNCING, Mode.SPECULATING]
    lines = [json.loads(x) for x in out.getvalue().splitlines() if x.startswith("{")]
    logged = [
        (x["src"], x["dst"], x["trigger"]) for x in lines if x["event"] == "specfsm.transition"
    ]
    assert logged == [
        ("SPECULATING", "SPECULATING", "RESHAPE"),
        ("SPECULATING", "DRAINING", "LOAD_HIGH"),
        ("DRAINING", "PLAIN", "DRAINED"),
        ("PLAIN", "RESYNCING", "LOAD_LOW"),
        ("RESYNCING", "SPECULATING", "RESYNCED"),
        ("SPECULATING", "SPECULATING", "RESHAPE"),
    ]


def test_walkthrough_reshape_lines() -> None:
    """The RESHAPE lines name the shapes (deep -> shallow, then back after PLAIN, which kept the
    shallow one), and the screen shows both shapes and the summary line."""
    out = io.StringIO()
    run(out)
    text = out.getvalue()
    lines = [json.loads(x) for x in text.splitlines() if x.startswith("{")]
    reshapes = [x for x in lines if x.get("trigger") == "RESHAPE"]
    assert [(x["shape_from"], x["shape_to"]) for x in reshapes] == [
        (DEEP.label(), SHALLOW.label()),
        (SHALLOW.label(), DEEP.label()),
    ]
    assert all(x["exit_us"] is None and x["enter_us"] is None for x in reshapes)
    timeline = "".join(x.split()[1] for x in text.splitlines() if x.startswith("  "))
    assert "Ss" in timeline and "rs" in timeline and timeline.endswith("S")
    last = text.splitlines()[-1]
    assert last.startswith("actions run:") and "RESHAPE: chain5 -> chain2 at" in last
    assert len(text.splitlines()) <= 12
