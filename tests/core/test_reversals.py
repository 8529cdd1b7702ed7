"""The goodput policy's reversal guard: a load switch soon after the one before doubles the
margin the next one needs, a quiet stretch takes it back, and a clear win still switches."""

from __future__ import annotations

from specfsm import Mode, Observation
from specfsm.fsm.table import Event
from specfsm.policy.goodput import GoodputPolicy
from specfsm.policy.goodput.ledger import Ledger
from specfsm.policy.registry import make_policy

# on the packaged table chain 3 at accept length 2.4 beats PLAIN by ~4% at bs 36 and loses by
# ~4% at bs 48 (crossover near bs 42): prices that close swap with every swing of the load
NEAR = (36, 48)
FAR = (2, 200)


def _policy(window: int) -> GoodputPolicy:
    spec = {
        "name": "goodput",
        "shape": "chain3",
        "accept_len": 2.4,
        "calibrate": False,
        "reversal_window": window,
    }
    pol = make_policy(spec)
    assert isinstance(pol, GoodputPolicy)
    return pol


def _play(pol: GoodputPolicy, sizes: tuple[int, int], every: int, n: int) -> list[Event]:
    """`n` iterations, the decode batch alternating between `sizes` every `every`; a load
    event moves the mode at once (the machine's DRAINING and RESYNCING left out)."""
    mode, events = Mode.SPECULATING, []
    for it in range(n):
        bs = sizes[(it // every) % 2]
        v = pol.decide(mode, Observation(iteration=it, decode_bs=bs, running=bs))
        if v is not None and v.event in (Event.LOAD_HIGH, Event.LOAD_LOW):
            events.append(v.event)
            mode = Mode.PLAIN if v.event is Event.LOAD_HIGH else Mode.SPECULATING
    return events


def test_each_reversal_doubles_the_margin_up_to_its_cap_and_a_quiet_window_halves_it() -> None:
    led = Ledger(debounce=1, min_dwell=0, margin=0.02, max_margin=0.16, reversal_window=100)
    at = led.margin
    led.load_switched(0)  # the first switch: nothing before it to reverse
    assert at(10) == 0.02
    for it, want in ((50, 0.04), (90, 0.08), (120, 0.16), (150, 0.16)):
        led.load_switched(it)
        assert at(it) == want, it
    assert led.reversals == 3  # the cap's three doublings, no more to undo later
    assert [at(150 + d) for d in (99, 100, 200, 300, 1000)] == [0.16, 0.08, 0.04, 0.02, 0.02]
    led.load_switched(500)  # 350 iterations after the last: not a reversal
    assert led.reversals == 0 and at(501) == 0.02
    off = Ledger(debounce=1, min_dwell=0, margin=0.02, max_margin=0.16)
    off.load_switched(0)
    off.load_switched(1)
    assert off.reversals == 0 and off.margin(2) == 0.02


def test_near_prices_stop_flipping_while_a_clear_load_step_still_switches() -> None:
    flips = len(_play(_policy(0), NEAR, 40, 2000))
    guarded = _play(_policy(256), NEAR, 40, 2000)
    assert flips >= 40  # every swing of the load, both ways
    # doubled twice, the margin holds the mode until two quiet windows take it back down
    assert len(guarded) <= flips // 3, (flips, len(guarded))
    # far apart, every step clears even the capped margin: no swing is missed
    assert len(_play(_policy(256), FAR, 40, 2000)) == len(_play(_policy(0), FAR, 40, 2000)) >= 40


def test_the_raised_margin_is_in_the_verdict() -> None:
    pol = _policy(256)
    mode = Mode.SPECULATING
    seen = []
    for it in range(400):
        bs = FAR[(it // 40) % 2]
        v = pol.decide(mode, Observation(iteration=it, decode_bs=bs, running=bs))
        if v is not None:
            seen.append((v.margin, v.reason))
            mode = Mode.PLAIN if v.event is Event.LOAD_HIGH else Mode.SPECULATING
    # the second switch is the first reversal: it raises the margin of the third
    assert [m for m, _ in seen[:4]] == [0.02, 0.02, 0.04, 0.08]
    assert "x (1+0.04)" in seen[2][1]
    assert max(m for m, _ in seen) == 0.16


def test_a_guard_is_checked_only_when_on() -> None:
    import pytest

    with pytest.raises(ValueError, match="max_margin >= margin"):
        _policy_spec(reversal_window=64, margin=0.3)
    assert _policy_spec(margin=0.3).params.max_margin == 0.16  # off: the cap is not read
    with pytest.raises(ValueError, match="reversal_window >= 0"):
        _policy_spec(reversal_window=-1)


def _policy_spec(**keys: object) -> GoodputPolicy:
    pol = make_policy({"name": "goodput", "shape": "chain3", "accept_len": 2.4, **keys})
    assert isinstance(pol, GoodputPolicy)
    return pol
