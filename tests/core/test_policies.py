"""Policies: determinism, legality, debounce, dwell, hysteresis and parameter checks."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specfsm import (
    TRANSITIONS,
    Event,
    FixedPolicy,
    Mode,
    Observation,
    ScriptedPolicy,
    ThresholdPolicy,
    toward,
)


def obs(it: int, bs: int) -> Observation:
    return Observation(iteration=it, decode_bs=bs, running=bs)


def test_toward_is_legal_everywhere() -> None:
    """toward() only returns events legal in the given mode."""
    for mode in Mode:
        for want in (True, False):
            ev = toward(mode, want)
            assert ev is None or ev in TRANSITIONS[mode]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"high": 8, "low": 8},
        {"high": 4, "low": 8},
        {"high": 8, "low": -1},
        {"high": 8, "low": 2, "debounce": 0},
        {"high": 8, "low": 2, "min_dwell": -1},
        {"high": 8, "low": 2, "signal": "gpu"},
        {"high": 8.5, "low": 2},
    ],
)
def test_threshold_rejects_bad_parameters(kwargs: dict[str, object]) -> None:
    """Bad ThresholdPolicy parameters raise ValueError at construction."""
    with pytest.raises(ValueError, match="ThresholdPolicy"):
        ThresholdPolicy(**kwargs)  # type: ignore[arg-type]


def test_threshold_debounce_and_dwell() -> None:
    """LOAD_HIGH fires only after `debounce` iterations above high and after min_dwell."""
    p = ThresholdPolicy(high=8, low=2, debounce=3, min_dwell=5)
    decisions = [p.decide(Mode.SPECULATING, obs(i, 9)) for i in range(8)]
    # dwell counts from iteration 0: first allowed at iteration 5, streak is long by then
    assert decisions[:5] == [None] * 5
    assert decisions[5] is Event.LOAD_HIGH
    assert "high=8" in p.last_reason


def test_threshold_streak_resets() -> None:
    """A single iteration back under the threshold resets the debounce streak."""
    p = ThresholdPolicy(high=8, low=2, debounce=3, min_dwell=0)
    seq = [9, 9, 5, 9, 9, 9]
    out = [p.decide(Mode.SPECULATING, obs(i, b)) for i, b in enumerate(seq)]
    assert out == [None, None, None, None, None, Event.LOAD_HIGH]


def test_threshold_dead_band_holds_plain() -> None:
    """Between low and high nothing fires in either mode (hysteresis)."""
    p = ThresholdPolicy(high=8, low=2, debounce=1, min_dwell=0)
    for i in range(50):
        assert p.decide(Mode.PLAIN, obs(i, 5)) is None
        assert p.decide(Mode.SPECULATING, obs(i, 8)) is None
    assert p.decide(Mode.PLAIN, obs(51, 2)) is Event.LOAD_LOW


def test_threshold_abandons_resync_on_load() -> None:
    """In RESYNCING, load above high returns LOAD_HIGH (back to PLAIN)."""
    p = ThresholdPolicy(high=8, low=2, debounce=1, min_dwell=0)
    assert p.decide(Mode.RESYNCING, obs(0, 20)) is Event.LOAD_HIGH


@given(st.lists(st.integers(0, 64), min_size=1, max_size=200))
def test_policies_are_deterministic(loads: list[int]) -> None:
    """Two copies fed the same observations make the same decisions (ranks agree)."""
    a = ThresholdPolicy(high=16, low=4, debounce=2, min_dwell=3)
    b = ThresholdPolicy(high=16, low=4, debounce=2, min_dwell=3)
    mode = Mode.SPECULATING
    for i, bs in enumerate(loads):
        ea, eb = a.decide(mode, obs(i, bs)), b.decide(mode, obs(i, bs))
        assert ea == eb
        if ea is not None:
            assert ea in TRANSITIONS[mode]
            mode = TRANSITIONS[mode][ea]
        if mode is Mode.DRAINING:
            mode = Mode.PLAIN
        elif mode is Mode.RESYNCING:
            mode = Mode.SPECULATING


def test_fixed_policy() -> None:
    """FixedPolicy moves toward its fixed choice only."""
    assert FixedPolicy(False).decide(Mode.SPECULATING, obs(0, 1)) is Event.LOAD_HIGH
    assert FixedPolicy(False).decide(Mode.PLAIN, obs(0, 1)) is None
    assert FixedPolicy(True).decide(Mode.PLAIN, obs(0, 1)) is Event.LOAD_LOW
    assert FixedPolicy(True).decide(Mode.SPECULATING, obs(0, 1)) is None


def test_scripted_schedule_and_callable() -> None:
    """ScriptedPolicy follows its schedule, or a callable target."""
    p = ScriptedPolicy([(3, Mode.PLAIN), (6, Mode.SPECULATING)])
    assert [p.target(i) for i in range(8)] == [True] * 3 + [False] * 3 + [True] * 2
    rng = random.Random(0)
    flips = [rng.random() < 0.5 for _ in range(10)]
    q = ScriptedPolicy(lambda i: flips[i])
    assert [q.target(i) for i in range(10)] == flips


@pytest.mark.parametrize(
    "schedule",
    [
        [(3, Mode.DRAINING)],
        [(3, Mode.PLAIN), (3, Mode.SPECULATING)],
        [(5, Mode.PLAIN), (2, Mode.PLAIN)],
    ],
)
def test_scripted_rejects_bad_schedule(schedule: list[tuple[int, Mode]]) -> None:
    """ScriptedPolicy refuses non-increasing iterations and non-target modes."""
    with pytest.raises(ValueError, match="ScriptedPolicy"):
        ScriptedPolicy(schedule)
