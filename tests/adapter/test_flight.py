"""Which decode intervals a rank reports as step times (`Flight.step_start`): none across a
prefill, and with overlap scheduling not the second one after it either (its launch waited for
the prefill's result, so the interval holds the prefill's GPU time); not the first one after a
change of step kind or shape; none of a process's first `START_SKIP`."""

from __future__ import annotations

import pytest

pytest.importorskip("specfsm_sglang")
from specfsm_sglang.flight import START_SKIP, Flight


def _reported(fl: Flight, events: str) -> list[bool]:
    """Play ``events`` (d: a decode forward, c: a decode forward of another kind or shape than
    the one before, e: a prefill); per decode, whether it reports."""
    out = []
    t = 0.0
    for ev in events:
        t += 1.0
        if ev == "e":
            fl.forget_step()
            continue
        out.append(fl.step_start() > 0.0)
        if ev == "c":
            fl.step_changed()
        fl.prev_t = t  # what the controller does after its observation
        fl.prev_kind = "spec"
    return out


def test_without_overlap_one_interval_skipped() -> None:
    assert _reported(Flight(1, overlap=False, start_skip=0), "dddeddd") == [
        False,
        True,
        True,
        False,
        True,
        True,
    ]


def test_with_overlap_two_intervals_skipped() -> None:
    assert _reported(Flight(1, overlap=True, start_skip=0), "dddedddd") == [
        False,
        True,
        True,
        False,
        False,
        True,
        True,
    ]


def test_prefills_back_to_back_skip_from_the_last() -> None:
    assert _reported(Flight(1, overlap=True, start_skip=0), "ddeedede" + "ddd") == [
        False,
        True,
        False,
        False,
        False,
        False,
        True,
    ]


def test_first_interval_after_a_change_skipped() -> None:
    assert _reported(Flight(1, overlap=True, start_skip=0), "dddcddcd") == [
        False,
        True,
        True,
        True,
        False,
        True,
        True,
        False,
    ]


def test_a_change_after_a_prefill_adds_no_skip() -> None:
    # the interval the change starts is already one the prefill leaves out
    assert _reported(Flight(1, overlap=True, start_skip=0), "ddecddd") == [
        False,
        True,
        False,
        False,
        True,
        True,
    ]


def test_a_process_first_intervals_skipped_across_prefills() -> None:
    fl = Flight(1, overlap=True)
    got = _reported(fl, "ddddedddd" + "d" * START_SKIP)
    first = got.index(True)
    # the first decode and the one after the prefill have no interval to report; START_SKIP
    # intervals are left out besides, the prefill's second skip falling inside them
    assert first == START_SKIP + 2
    assert all(got[first:])
