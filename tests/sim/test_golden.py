"""The simulator's golden decision traces reproduce exactly (see golden_traces.py)."""

from __future__ import annotations

from typing import Any

import golden_traces as G


def _by_case(lines: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        out.setdefault(line["case"], []).append(line)
    return out


def test_golden_decision_traces() -> None:
    """Every transition (iteration, src, dst, event, shape, reason) and every case's result of
    the fixed grid are the recorded ones; a failure names the case and its first difference."""
    want = _by_case(G.read_fixture())
    got = _by_case(G.generate())
    assert sorted(got) == sorted(want)
    bad = []
    for case, lines in want.items():
        if got[case] != lines:
            i = next(
                (i for i, (g, w) in enumerate(zip(got[case], lines, strict=False)) if g != w),
                min(len(got[case]), len(lines)),
            )
            bad.append((case, lines[i : i + 1], got[case][i : i + 1]))
    assert not bad, f"{len(bad)} cases differ; first: {bad[0]}"
