"""Prefill observations: which policies ask for them, how they are configured, what they teach
and how they are logged (the SGLang adapter's side is tests/engine/test_prefill_decisions.py)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from _prefill_burst import burst, prefill, quiet

from specfsm import Mode, Observation
from specfsm.fsm.log import obs_fields
from specfsm.fsm.table import Event
from specfsm.policy.checks import PolicyKind
from specfsm.policy.goodput import GoodputPolicy
from specfsm.policy.registry import PolicySpecError, make_policy, with_test_policies
from specfsm.policy.simple import ScriptedPolicy, ThresholdPolicy

GOODPUT = {"name": "goodput", "shape": "chain3", "accept_len": 2.4}


def sees(spec: dict[str, object], registry: Mapping[str, PolicyKind] | None = None) -> bool:
    return bool(getattr(make_policy(spec, registry=registry), "sees_prefills", False))


def test_load_policies_see_prefills_by_default_schedules_do_not() -> None:
    assert sees({"name": "threshold", "high": 8, "low": 4})
    assert sees(GOODPUT)
    assert not sees({"name": "scripted", "schedule": [[4, "PLAIN"]]})
    assert not sees({"name": "fixed", "speculate": True})
    off = {"name": "threshold", "high": 8, "low": 4, "prefills": False}
    assert not sees(off) and make_policy(off).describe()["prefills"] is False
    assert not sees({**GOODPUT, "prefills": False})
    assert make_policy({**GOODPUT, "prefills": False}).describe()["prefills"] is False
    assert sees({"name": "random", "prefills": True}, registry=with_test_policies())


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"name": "threshold", "high": 8, "low": 4, "prefills": 1}, "policy.prefills: expected"),
        ({"name": "scripted", "schedule": [], "prefills": "yes"}, "policy.prefills: expected"),
        ({**GOODPUT, "prefills": "no"}, "prefills must be true or false"),
    ],
)
def test_prefills_must_be_a_bool(spec: dict[str, object], message: str) -> None:
    with pytest.raises((PolicySpecError, ValueError), match=message):
        make_policy(spec)


def test_threshold_leaves_speculating_on_a_burst_of_prefills() -> None:
    """A burst: the running batch is small but each prefill adds requests. One 8192-token
    chunk past the threshold is 32 decode steps of time: the debounce of 4 is met by it."""
    pol = ThresholdPolicy(high=18, low=17, debounce=4, min_dwell=0)
    got = [pol.decide(Mode.SPECULATING, prefill(i, 16 + 7 * i)) for i in range(1, 6)]
    assert [v is not None for v in got][:1] == [True]
    v = got[0]
    assert v is not None and v.event is Event.LOAD_HIGH and v.bs == 23
    assert v.reason == "decode_bs=23 > high=18 for 1 iteration worth 32 decode steps"
    # a chunk of 512 tokens is worth 2: two of them meet the debounce of 4
    pol = ThresholdPolicy(high=18, low=17, debounce=4, min_dwell=0)
    got = [pol.decide(Mode.SPECULATING, prefill(i, 20, tokens=512)) for i in range(1, 4)]
    assert [v is not None for v in got] == [False, True, False]
    # a prefill below the threshold breaks the streak, whatever its worth
    pol = ThresholdPolicy(high=18, low=17, debounce=4, min_dwell=0)
    assert pol.decide(Mode.SPECULATING, prefill(1, 20, tokens=512)) is None
    assert pol.decide(Mode.SPECULATING, prefill(2, 10, tokens=8192)) is None
    assert pol.decide(Mode.SPECULATING, prefill(3, 20, tokens=256)) is None


def test_threshold_without_prefill_debounce_counts_each_prefill_once() -> None:
    pol = ThresholdPolicy(high=18, low=17, debounce=4, min_dwell=0, prefill_debounce=False)
    got = [pol.decide(Mode.SPECULATING, prefill(i, 16 + 7 * i)) for i in range(1, 6)]
    assert [v is not None for v in got] == [False, False, False, True, False]
    v = got[3]
    assert v is not None and v.event is Event.LOAD_HIGH and v.bs == 44
    assert v.reason == "decode_bs=44 > high=18 for 4 iterations"
    spec = {"name": "threshold", "high": 8, "low": 4}
    assert make_policy(spec).describe()["prefill_debounce"] is True
    assert make_policy({**spec, "prefill_debounce": False}).describe()["prefill_debounce"] is False
    with pytest.raises((PolicySpecError, ValueError), match="prefill_debounce"):
        make_policy({**spec, "prefill_debounce": 1})


def test_threshold_dwell_counts_a_prefill_chunk_as_the_decode_steps_it_is_worth() -> None:
    """A burst right after a return to SPECULATING: 8192-token prefill chunks, a few hundred
    milliseconds each. Counted one iteration apiece, the dwell of 32 would hold SPECULATING
    through 32 of them (seconds of the burst); worth 32 decode steps each, the load event
    leaves at the first chunk past the threshold (the debounce counts them so too), or after
    the debounce's 4 chunks without `prefill_debounce`."""

    def burst(pol: ThresholdPolicy) -> int:
        pol.decide(Mode.SPECULATING, Observation(iteration=100, decode_bs=16, running=16))
        for i in range(1, 64):
            v = pol.decide(Mode.SPECULATING, prefill(100 + i, 16 + 8 * i))
            if v is not None:
                assert v.event is Event.LOAD_HIGH
                return i
        return -1

    assert burst(ThresholdPolicy(high=18, low=17, debounce=4, min_dwell=32)) == 1
    assert burst(ThresholdPolicy(high=18, low=17, min_dwell=32, prefill_debounce=False)) == 4
    assert burst(ThresholdPolicy(high=18, low=17, min_dwell=32, prefill_step_tokens=0)) == 32
    # a short prompt is one iteration, as a decode step
    pol = ThresholdPolicy(high=18, low=17, debounce=1, min_dwell=4)
    pol.decide(Mode.SPECULATING, Observation(iteration=0, decode_bs=1))
    got = [pol.decide(Mode.SPECULATING, prefill(i, 20, tokens=200)) for i in range(1, 6)]
    assert [v is not None for v in got][:4] == [False, False, False, True]
    assert (
        make_policy({"name": "threshold", "high": 8, "low": 4}).describe()["prefill_step_tokens"]
        == 256
    )
    with pytest.raises((PolicySpecError, ValueError), match="prefill_step_tokens"):
        make_policy({"name": "threshold", "high": 8, "low": 4, "prefill_step_tokens": -1})


def test_goodput_prices_a_prefill_with_its_queue_and_learns_nothing_from_it() -> None:
    pol = make_policy({**GOODPUT, "price_queued": 1.0, "debounce": 1, "min_dwell": 0})
    assert isinstance(pol, GoodputPolicy)
    acc = pol.est.ema_accept_len
    # accept lengths on a prefill observation are not learned (an adapter sends none)
    obs = Observation(iteration=1, decode_bs=1, accept_lens=(1, 1, 1), prefill_tokens=100)
    assert pol.decide(Mode.SPECULATING, obs) is None
    assert pol.est.ema_accept_len == acc
    v = pol.decide(Mode.SPECULATING, prefill(2, 2, queued=240))
    assert v is not None and v.event is Event.LOAD_HIGH, pol.last_reason


def test_scripted_with_prefills_switches_on_its_iteration_whatever_the_forward() -> None:
    pol = ScriptedPolicy([(3, Mode.PLAIN)], prefills=True)
    assert pol.decide(Mode.SPECULATING, prefill(2, 1)) is None
    v = pol.decide(Mode.SPECULATING, prefill(3, 1))
    assert v is not None and v.event is Event.LOAD_HIGH


def test_log_fields_name_the_prefill() -> None:
    assert obs_fields(prefill(5, 9, tokens=321))["prefill_tokens"] == 321
    assert "prefill_tokens" not in obs_fields(Observation(iteration=5, decode_bs=9))


# --------------------------------------------------------------------------- prefill pressure
PRESSURE = {
    **GOODPUT,
    "calibrate": False,
    "debounce": 1,
    "min_dwell": 0,
    "prefill_ms_per_token": 0.023,
}


def _close_call(pol: GoodputPolicy) -> int:
    """A batch where speculation's decode price beats PLAIN's by 3-15% (the bursty trace's
    re-speculation at bs 41 was 4.5% on the H200's profile)."""
    for bs in range(64, 0, -1):
        plain, spec = pol.predict(bs)
        if 1.03 < spec / plain < 1.15:
            return bs
    raise AssertionError("no batch size where speculation wins by 3-15%")


def _decode(it: int, bs: int, ms: float) -> Observation:
    return Observation(iteration=it, decode_bs=bs, running=bs, step_ms=ms, step_bs=bs)


def test_prefill_pressure_keeps_plain_while_arrivals_keep_the_gpu_busy() -> None:
    pol = make_policy(PRESSURE)
    assert isinstance(pol, GoodputPolicy)
    bs = _close_call(pol)
    ms = pol.predicted_ms(bs)
    # a burst: a 1300-token prefill between every two decodes (~30 ms of prefill each)
    got = burst(pol, bs, ms, _decode)
    assert all(v is None for v in got), pol.last_reason
    assert pol.est.share > 0.5
    assert pol.est.pressure_factor() > 1.5
    # the burst ends: decodes alone bring the share down and speculation back
    v = quiet(pol, bs, ms, _decode)
    assert v is not None and v.event is Event.LOAD_LOW, pol.last_reason
    assert "prefill share" in v.reason and pol.est.share < 0.1


def test_prefill_pressure_sends_speculating_to_plain_in_a_burst() -> None:
    pol = make_policy(PRESSURE)
    assert isinstance(pol, GoodputPolicy)
    bs = _close_call(pol)
    ms = pol.predicted_ms(bs, pol.launch_shape)
    assert pol.decide(Mode.SPECULATING, _decode(1, bs, ms)) is None
    v = None
    for i in range(2, 100, 2):
        v = pol.decide(Mode.SPECULATING, prefill(i, bs, tokens=4096))
        if v is not None:
            break
    assert v is not None and v.event is Event.LOAD_HIGH, pol.last_reason
    assert "prefill share" in v.reason
    (name, plain), *_ = v.predicted
    assert name == "plain" and plain > dict(v.predicted)[pol.launch_shape.label()]


def test_prefill_pressure_is_off_by_default_and_a_quiet_gpu_prices_as_before() -> None:
    off = make_policy({**PRESSURE, "prefill_ms_per_token": 0.0})
    on = make_policy(PRESSURE)
    assert isinstance(off, GoodputPolicy) and isinstance(on, GoodputPolicy)
    assert make_policy(GOODPUT).describe()["prefill_ms_per_token"] == 0.0
    for pol in (off, on):
        for i in range(1, 50):
            pol.decide(Mode.SPECULATING, _decode(i, 8, 10.0))
    # the decode time comes from step_ms: ranks must be given one value even uncalibrated
    assert on.uses_step_ms and not off.uses_step_ms
    assert off.est.share == 0.0 and on.est.share == 0.0
    assert on.est.pressure_factor() == 1.0
    for i in range(50, 60):
        off.decide(Mode.SPECULATING, prefill(i, 8, tokens=8192))
    assert off.est.share == 0.0  # off: prefills are not counted
    assert on.est.estimate(8, 0, 60).spec_ms == off.est.estimate(8, 0, 60).spec_ms


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("prefill_ms_per_token", -0.1, "prefill_ms_per_token and prefill_extra must be >= 0"),
        ("prefill_extra", -1.0, "prefill_ms_per_token and prefill_extra must be >= 0"),
        ("prefill_ema", 0.0, "prefill_ema must be in"),
        ("prefill_ema", 1.5, "prefill_ema must be in"),
    ],
)
def test_prefill_pressure_parameters_are_checked(key: str, value: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_policy({**PRESSURE, key: value})


def _dwell_policy(ms_per_token: float) -> GoodputPolicy:
    pol = make_policy({**PRESSURE, "min_dwell": 32, "prefill_ms_per_token": ms_per_token})
    assert isinstance(pol, GoodputPolicy)
    return pol


def _first_verdict_in_burst(pol: GoodputPolicy) -> int | None:
    """SPECULATING re-entered at a close call, then a burst of 8192-token prefill chunks
    (each ~190 ms at 0.023 ms/token, ~20 decode steps of 10 ms): the iteration of the first
    verdict, None when the burst's 40 chunks pass without one."""
    bs = _close_call(pol)
    ms = pol.predicted_ms(bs, pol.launch_shape)
    for i in range(1, 9):  # the mode is entered (its dwell starts) and a step is measured
        assert pol.decide(Mode.SPECULATING, _decode(i, bs, ms)) is None, pol.last_reason
    for i in range(9, 49):
        if pol.decide(Mode.SPECULATING, prefill(i, bs, queued=8)) is not None:
            return i
    return None


def test_prefill_chunks_count_toward_the_dwell_as_the_decode_steps_they_take() -> None:
    """The H200 bursty run that went back to SPECULATING at the start of a burst sat there
    for 33 prefill iterations (5.7 s) before its dwell of 32 iterations let it leave."""
    on = _dwell_policy(0.023)
    first = _first_verdict_in_burst(on)
    assert first is not None and first < 9 + 8, on.last_reason
    v = on.last_verdict
    assert v is not None and v.event is Event.LOAD_HIGH and "prefill share" in v.reason
    assert on.ledger.dwelt(first) > 32  # 2-3 chunks of ~19 steps' credit each
    on.ledger.seen(Mode.PLAIN, first + 1)
    assert on.ledger.dwelt(first + 1) == 0.0  # PLAIN's dwell starts afresh, credit and all
    # the same stream without the pressure: a prefill iteration is one iteration
    off = _dwell_policy(0.0)
    assert off.est.prefill_steps(prefill(20, 8)) == 0.0
    late = _first_verdict_in_burst(off)
    assert late is None or late >= 32, off.last_reason


def test_prefill_steps_are_the_chunk_time_over_the_measured_decode_step() -> None:
    pol = _dwell_policy(0.02)
    assert pol.est.prefill_steps(prefill(1, 8, tokens=1000)) == 0.0  # no step measured yet
    pol.decide(Mode.SPECULATING, _decode(1, 8, 10.0))
    assert pol.est.step_ms == 10.0
    assert pol.est.prefill_steps(prefill(2, 8, tokens=5000)) == pytest.approx(9.0)
    assert pol.est.prefill_steps(prefill(2, 8, tokens=200)) == 0.0  # under one step
    assert pol.est.prefill_steps(_decode(3, 8, 10.0)) == 0.0


def _burst_onset(prefill_debounce: bool) -> tuple[int, GoodputPolicy]:
    """SPECULATING at a small batch on a quiet GPU (decodes of 8 ms), then a burst of
    3000-token prefills, as on the H200's bursty trace: the number of chunks until LOAD_HIGH."""
    pol = make_policy(
        {**PRESSURE, "debounce": 4, "min_dwell": 32, "prefill_debounce": prefill_debounce}
    )
    assert isinstance(pol, GoodputPolicy)
    for i in range(1, 65):
        assert pol.decide(Mode.SPECULATING, _decode(i, 4, 8.0)) is None, pol.last_reason
    for k in range(1, 41):
        v = pol.decide(Mode.SPECULATING, prefill(64 + k, 4 + k, tokens=3000))
        if v is not None:
            assert v.event is Event.LOAD_HIGH
            return k, pol
    raise AssertionError(f"no LOAD_HIGH in 40 chunks: {pol.last_reason}")


def test_prefill_chunks_count_toward_the_debounce_as_the_decode_steps_they_take() -> None:
    """A 3000-token chunk is ~8.6 decode steps of 8 ms: once the share prices PLAIN above
    speculation, the first chunk meets the debounce of 4; counted one each, four chunks
    (0.3-0.5 s of a burst on the H200) pass before the load event, every one of them a
    speculative prefill."""
    fast, on = _burst_onset(True)
    slow, off = _burst_onset(False)
    assert slow == fast + 3, (fast, slow)
    v = on.last_verdict
    assert v is not None and "debounce met in 1 iteration worth 9 decode steps" in v.reason
    w = off.last_verdict
    assert w is not None and "debounce met" not in w.reason
    assert make_policy(PRESSURE).describe()["prefill_debounce"] is True
    with pytest.raises(ValueError, match="prefill_debounce must be true or false"):
        make_policy({**PRESSURE, "prefill_debounce": "yes"})
