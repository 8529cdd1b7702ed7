"""Which decode intervals a rank reports as step times (`Flight.step_start`): none across a
prefill, and with overlap scheduling not the second one after it either (its launch waited for
the prefill's result, so the interval holds the prefill's GPU time)."""

from __future__ import annotations

import pytest

pytest.importorskip("specfsm_sglang")
from specfsm_sglang.flight import Flight


def _reported(fl: Flight, events: str) -> list[bool]:
    """Play ``events`` (d: a decode forward, e: a prefill); per decode, whether it reports."""
    out = []
    t = 0.0
    for ev in events:
        t += 1.0
        if ev == "e":
            fl.forget_step()
            continue
        out.append(fl.step_start() > 0.0)
        fl.prev_t = t  # what the controller does after its observation
    return out


def test_without_overlap_one_interval_skipped() -> None:
    assert _reported(Flight(1, overlap=False), "dddeddd") == [False, True, True, False, True, True]


def test_with_overlap_two_intervals_skipped() -> None:
    assert _reported(Flight(1, overlap=True), "dddedddd") == [
        False,
        True,
        True,
        False,
        False,
        True,
        True,
    ]


def test_prefills_back_to_back_skip_from_the_last() -> None:
    assert _reported(Flight(1, overlap=True), "ddeedede" + "ddd") == [
        False,
        True,
        False,
        False,
        False,
        False,
        True,
    ]
