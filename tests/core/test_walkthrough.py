"""The simulated walkthrough visits all four modes in order."""

from __future__ import annotations

import io
import json

from specfsm import Mode
from specfsm.cli.walkthrough import run


def test_walkthrough_visits_all_modes() -> None:
    """A 1 -> 64 -> 1 ramp goes SPECULATING, DRAINING, PLAIN, RESYNCING, SPECULATING."""
    out = io.StringIO()
    modes = run(out)
    seq = [m for i, m in enumerate(modes) if i == 0 or modes[i - 1] is not m]
    assert seq == [Mode.SPECULATING, Mode.DRAINING, Mode.PLAIN, Mode.RESYNCING, Mode.SPECULATING]
    lines = [json.loads(x) for x in out.getvalue().splitlines() if x.startswith("{")]
    logged = [
        (x["src"], x["dst"], x["trigger"]) for x in lines if x["event"] == "specfsm.transition"
    ]
    assert logged == [
        ("SPECULATING", "DRAINING", "LOAD_HIGH"),
        ("DRAINING", "PLAIN", "DRAINED"),
        ("PLAIN", "RESYNCING", "LOAD_LOW"),
        ("RESYNCING", "SPECULATING", "RESYNCED"),
    ]
