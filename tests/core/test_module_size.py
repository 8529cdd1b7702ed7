"""Every module under specfsm/ (the CLI and the log tools too, not only the core parts) is at
most 450 lines: a longer one holds more than one job and is split by job."""

from __future__ import annotations

from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "specfsm"
LIMIT = 450


def test_no_module_over_the_limit() -> None:
    big = {
        str(p.relative_to(PKG.parent)): n
        for p in sorted(PKG.rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > LIMIT
    }
    assert big == {}
