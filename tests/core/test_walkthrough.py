"""The simulated walkthrough visits all four modes in order."""

from __future__ import annotations

import io

from specfsm import Mode
from specfsm.cli.walkthrough import run


def test_walkthrough_visits_all_modes() -> None:
    """A 1 -> 64 -> 1 ramp goes SPECULATING, DRAINING, PLAIN, RESYNCING, SPECULATING."""
    out = io.StringIO()
    modes = run(out)
    seq = [m for i, m in enumerate(modes) if i == 0 or modes[i - 1] is not m]
    assert seq[0] is Mode.SPECULATING and Mode.PLAIN in seq and seq[-1] is Mode.SPECULATING
    assert "specfsm.transition" in out.getvalue()
