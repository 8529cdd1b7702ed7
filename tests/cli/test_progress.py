"""specfsm's one progress bar (sim, sweeps, the demo)."""

from __future__ import annotations

import io

from specfsm.progress import Progress


def test_not_a_terminal_draws_only_the_final_line() -> None:
    """On a pipe or a log file: no carriage-return spam, one final line with the total."""
    out = io.StringIO()
    bar = Progress(50, "sim", unit="tok", out=out)
    for _ in range(50):
        bar.tick()
    bar.close()  # idempotent after the total closed it
    text = out.getvalue()
    assert text.count("\n") == 1 and text.count("\r") == 1
    assert "50/50 tok" in text and "#" * 30 in text


def test_disabled_draws_nothing() -> None:
    """enabled=False (or a total of 0) keeps the stream clean."""
    out = io.StringIO()
    for bar in (Progress(5, "x", False, out=out), Progress(0, "y", out=out)):
        bar.update(5)
        bar.close()
    assert out.getvalue() == ""
