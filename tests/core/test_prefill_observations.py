"""Prefill observations: which policies ask for them, how they are configured, what they teach
and how they are logged (the SGLang adapter's side is tests/engine/test_prefill_decisions.py)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from specfsm import Mode, Observation
from specfsm.fsm.log import obs_fields
from specfsm.fsm.table import Event
from specfsm.policy.checks import PolicyKind
from specfsm.policy.goodput import GoodputPolicy
from specfsm.policy.registry import PolicySpecError, make_policy, with_test_policies
from specfsm.policy.simple import ScriptedPolicy, ThresholdPolicy

GOODPUT = {"name": "goodput", "shape": "chain3", "accept_len": 2.4}


def prefill(it: int, bs: int, queued: int = 0, tokens: int = 8192) -> Observation:
    return Observation(iteration=it, decode_bs=bs, running=bs, queued=queued, prefill_tokens=tokens)


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
    """A burst: the running batch is small but each prefill adds requests; the threshold
    counts the prefill observations like decode ones."""
    pol = ThresholdPolicy(high=18, low=17, debounce=4, min_dwell=0)
    got = [pol.decide(Mode.SPECULATING, prefill(i, 16 + 7 * i)) for i in range(1, 6)]
    assert [v is not None for v in got] == [False, False, False, True, False]
    v = got[3]
    assert v is not None and v.event is Event.LOAD_HIGH and v.bs == 44


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
