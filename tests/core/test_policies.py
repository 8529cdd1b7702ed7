"""Policies: determinism, legality, debounce, dwell, hysteresis, parameter checks and the
verdict (rule and compared numbers) each simple policy returns."""

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
from specfsm.fsm.verdict import NONE, OBSERVED, Verdict, event_of
from specfsm.model.acceptance import DraftShape
from specfsm.policy.simple import RULE_NAMES


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
    assert event_of(decisions[5]) is Event.LOAD_HIGH
    assert "high=8" in p.last_reason


def test_threshold_streak_resets() -> None:
    """A single iteration back under the threshold resets the debounce streak."""
    p = ThresholdPolicy(high=8, low=2, debounce=3, min_dwell=0)
    seq = [9, 9, 5, 9, 9, 9]
    out = [event_of(p.decide(Mode.SPECULATING, obs(i, b))) for i, b in enumerate(seq)]
    assert out == [None, None, None, None, None, Event.LOAD_HIGH]


def test_threshold_dead_band_holds_plain() -> None:
    """Between low and high nothing fires in either mode (hysteresis)."""
    p = ThresholdPolicy(high=8, low=2, debounce=1, min_dwell=0)
    for i in range(50):
        assert p.decide(Mode.PLAIN, obs(i, 5)) is None
        assert p.decide(Mode.SPECULATING, obs(i, 8)) is None
    assert event_of(p.decide(Mode.PLAIN, obs(51, 2))) is Event.LOAD_LOW


def test_threshold_abandons_resync_on_load() -> None:
    """In RESYNCING, load above high returns LOAD_HIGH (back to PLAIN)."""
    p = ThresholdPolicy(high=8, low=2, debounce=1, min_dwell=0)
    assert event_of(p.decide(Mode.RESYNCING, obs(0, 20))) is Event.LOAD_HIGH


@given(st.lists(st.integers(0, 64), min_size=1, max_size=200))
def test_policies_are_deterministic(loads: list[int]) -> None:
    """Two copies fed the same observations make the same decisions (ranks agree)."""
    a = ThresholdPolicy(high=16, low=4, debounce=2, min_dwell=3)
    b = ThresholdPolicy(high=16, low=4, debounce=2, min_dwell=3)
    mode = Mode.SPECULATING
    for i, bs in enumerate(loads):
        va, vb = a.decide(mode, obs(i, bs)), b.decide(mode, obs(i, bs))
        assert va == vb
        ea = event_of(va)
        if ea is not None:
            assert ea in TRANSITIONS[mode]
            mode = TRANSITIONS[mode][ea]
        if mode is Mode.DRAINING:
            mode = Mode.PLAIN
        elif mode is Mode.RESYNCING:
            mode = Mode.SPECULATING


def test_fixed_policy() -> None:
    """FixedPolicy moves toward its fixed choice only."""
    assert event_of(FixedPolicy(False).decide(Mode.SPECULATING, obs(0, 1))) is Event.LOAD_HIGH
    assert FixedPolicy(False).decide(Mode.PLAIN, obs(0, 1)) is None
    assert event_of(FixedPolicy(True).decide(Mode.PLAIN, obs(0, 1))) is Event.LOAD_LOW
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


def test_threshold_verdicts_carry_what_was_compared() -> None:
    """Each threshold decision is a Verdict: the rule, the signal, the observed value, the
    threshold it passed and by how much; its reason is the policy's last_reason."""
    p = ThresholdPolicy(high=32, low=8, debounce=1, min_dwell=0)
    chain3 = DraftShape.chain(3)
    high = p.decide(Mode.SPECULATING, Observation(iteration=7, decode_bs=40, shape=chain3))
    assert high == Verdict(
        Event.LOAD_HIGH,
        "threshold.high_bs",
        "decode_bs=40 > high=32 for 1 iteration",
        bound=OBSERVED,
        margin=8.0,
        chosen="plain",
        current="chain3",
        bs=40,
        signal="decode_bs",
        observed=40,
        threshold=32,
    )
    assert high.reason == p.last_reason
    low = p.decide(Mode.PLAIN, Observation(iteration=9, decode_bs=5, mean_ctx=700))
    assert low is not None and low.event is Event.LOAD_LOW
    assert (low.rule, low.observed, low.threshold, low.margin) == ("threshold.low_bs", 5, 8, 3.0)
    assert (low.chosen, low.current, low.ctx) == ("speculating", None, 700)
    assert low.as_json() == {
        "rule": "threshold.low_bs",
        "event": "LOAD_LOW",
        "shape": None,
        "chosen": "speculating",
        "current": None,
        "bound": "observed",
        "margin": 3.0,
        "bs": 5,
        "ctx": 700,
        "predicted_tok_s": {},
        "signal": "decode_bs",
        "observed": 5,
        "threshold": 8,
    }


def test_threshold_on_running_names_its_signal() -> None:
    """signal="running": the rule and the observed value are the running requests'."""
    p = ThresholdPolicy(high=4, low=1, debounce=1, min_dwell=0, signal="running")
    v = p.decide(Mode.SPECULATING, Observation(iteration=0, decode_bs=2, running=6))
    assert v is not None and (v.rule, v.signal, v.observed, v.margin) == (
        "threshold.high_running",
        "running",
        6,
        2.0,
    )
    assert v.bs == 2  # the decode batch stays where the goodput verdicts keep it


def test_fixed_and_scripted_verdicts() -> None:
    """FixedPolicy names its answer; ScriptedPolicy the schedule entry (and the iteration it
    starts at), the initial target, or its callable."""
    v = FixedPolicy(False).decide(Mode.SPECULATING, obs(3, 12))
    assert v is not None and (v.rule, v.bound, v.chosen, v.bs) == ("fixed.never", NONE, "plain", 12)
    assert v.signal is None and "signal" not in v.as_json()
    v = FixedPolicy(True).decide(Mode.PLAIN, obs(0, 1))
    assert v is not None and (v.rule, v.reason) == ("fixed.always", "fixed: always speculate")

    p = ScriptedPolicy([(3, Mode.PLAIN), (6, Mode.SPECULATING)], initial=Mode.PLAIN)
    first = p.decide(Mode.PLAIN, obs(0, 1))
    assert first is None  # initial PLAIN, already there
    v = p.decide(Mode.SPECULATING, obs(1, 1))
    assert v is not None and (v.rule, v.observed, v.threshold) == ("scripted.initial", 1, None)
    assert p.decide(Mode.PLAIN, obs(4, 1)) is None
    v = p.decide(Mode.PLAIN, obs(7, 1))
    assert v is not None and v.event is Event.LOAD_LOW
    assert (v.rule, v.signal, v.observed, v.threshold, v.margin) == (
        "scripted.schedule",
        "iteration",
        7,
        6,
        1.0,
    )
    q = ScriptedPolicy(lambda i: False)
    v = q.decide(Mode.SPECULATING, obs(2, 1))
    assert v is not None and (v.rule, v.threshold) == ("scripted.callable", None)


@given(st.lists(st.integers(0, 64), min_size=1, max_size=120))
def test_every_simple_verdict_is_a_known_rule(loads: list[int]) -> None:
    """Whatever the load, a simple policy's decision is a Verdict whose rule is in RULE_NAMES
    and whose event is legal in the mode it was asked in."""
    policies = [
        ThresholdPolicy(high=16, low=4, debounce=2, min_dwell=3),
        ThresholdPolicy(high=16, low=4, debounce=1, min_dwell=0, signal="running"),
        FixedPolicy(True),
        FixedPolicy(False),
        ScriptedPolicy([(5, Mode.PLAIN), (40, Mode.SPECULATING)]),
        ScriptedPolicy(lambda i: i % 3 == 0),
    ]
    for p in policies:
        mode = Mode.PLAIN
        for i, bs in enumerate(loads):
            v = p.decide(mode, obs(i, bs))
            if v is None:
                continue
            assert isinstance(v, Verdict) and v.rule in RULE_NAMES
            assert v.event in TRANSITIONS[mode] and v.reason == p.last_reason
            mode = {Mode.DRAINING: Mode.PLAIN, Mode.RESYNCING: Mode.SPECULATING}.get(
                TRANSITIONS[mode][v.event], TRANSITIONS[mode][v.event]
            )
