"""benchmarks/plain_tax.py --quick runs (so the benchmark cannot rot): its first line is the
issue's goal (no draft forward per zero-tax PLAIN step), SGLang's skip flag took effect, and
zero-tax's accept lengths in the first K-wide rounds after re-entry equal a warm draft's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "plain_tax.py"


def _value(lines: list[str], key: str) -> str:
    """The value of the ``key: value (...)`` line."""
    for ln in lines:
        if ln.startswith(key + ": "):
            return ln[len(key) + 2 :].split(" (", 1)[0]
    raise AssertionError(f"no {key!r} line in:\n" + "\n".join(lines))


def test_plain_tax_quick() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=SCRIPT.parents[1],
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == "plain_draft_forwards_per_step: 0 (goal == 0)", proc.stdout
    assert _value(lines, "draft_forwards_per_plain_step warm") == "1"
    skip = next(ln for ln in lines if ln.startswith("draft_forwards_per_plain_step skip_flag:"))
    assert (
        skip.startswith("draft_forwards_per_plain_step skip_flag: 0 ")
        and "took effect: yes" in skip
    )
    assert _value(lines, "first10_accept zero_tax") == _value(lines, "first10_accept warm")
    assert _value(lines, "first10_rounds_equal zero_tax warm") == "True"
    assert _value(lines, "greedy_equal_to_no_speculation") == "True"
    for b in (1, 4):
        for lag in (8, 32):
            assert float(_value(lines, f"CPU catchup_ms B={b} L={lag}")) > 0
