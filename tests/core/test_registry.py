"""The one policy registry: one syntax, one error format, test policies only on request."""

from __future__ import annotations

import pytest

from specfsm import TRANSITIONS, Event, Mode, toward
from specfsm.fsm.table import LOAD_EVENTS, TOWARD
from specfsm.model.acceptance import DraftShape, parse_shape
from specfsm.policy import GoodputPolicy, ThresholdPolicy
from specfsm.policy.registry import (
    ENV_TEST_POLICIES,
    POLICIES,
    PolicySpecError,
    make_policy,
    parse_spec,
    with_test_policies,
)


def test_test_policies_need_opting_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """every/random are refused by the production registry and built by the test one."""
    monkeypatch.delenv(ENV_TEST_POLICIES, raising=False)
    assert "every" not in POLICIES and "random" not in POLICIES
    with pytest.raises(PolicySpecError, match=r"unknown policy 'every'.*SPECFSM_TEST_POLICIES=1"):
        make_policy({"name": "every", "k": 2})
    assert make_policy({"name": "every", "k": 2}, registry=with_test_policies())
    monkeypatch.setenv(ENV_TEST_POLICIES, "1")
    assert make_policy({"name": "random", "seed": 1, "p": 0.5})


@pytest.mark.parametrize(
    "text",
    [
        "goodput:shape=chain3,accept_len=2.5",
        "goodput:shape=[4,2,16],accept_len=3.1",
        'goodput:shape="4,2,16",accept_len=3.1',
        'goodput:shape="tree",accept_len=3.1',
    ],
)
def test_shorthand_shapes(text: str) -> None:
    """A shape in the shorthand needs no quotes; a comma inside quotes or brackets stays."""
    policy = make_policy(parse_spec(text))
    assert isinstance(policy, GoodputPolicy)
    assert policy.cost.shape == parse_shape(parse_spec(text)["shape"])


def test_one_error_format() -> None:
    """Every refusal is `<key>: <reason>` naming the parameter and what it allows."""
    with pytest.raises(PolicySpecError) as info:
        make_policy(parse_spec("threshold:high=abc,low=2"))
    assert str(info.value) == "policy.high: expected an integer >= 1, got 'abc'"
    with pytest.raises(PolicySpecError, match=r"^policy: ThresholdPolicy: need low < high"):
        make_policy(parse_spec("threshold:high=4,low=8"))
    assert isinstance(make_policy(parse_spec('{"name": "threshold", "high": 9}') | {"low": 1}),
                      ThresholdPolicy)  # fmt: skip


def test_one_shape_syntax() -> None:
    """`parse_shape` takes every spelling the configs and commands use."""
    tree = DraftShape(4, 2, 16)
    for text in ("tree", "TREE", "4,2,16", " 4, 2, 16 ", [4, 2, 16], {"topk": 4, "steps": 2,
                 "draft_tokens": 16}):  # fmt: skip
        assert parse_shape(text) == tree
    assert parse_shape("chain5") == DraftShape.chain(5)
    with pytest.raises(ValueError, match="chainN"):
        parse_shape("pyramid")


def test_toward_is_read_off_the_table() -> None:
    """TOWARD's event is legal in its mode and settles in its target; DRAINING has none."""
    for (mode, target), event in TOWARD.items():
        if event is None:
            continue
        assert event in LOAD_EVENTS and event in TRANSITIONS[mode]
        dst = TRANSITIONS[mode][event]
        for done in (Event.DRAINED, Event.RESYNCED):  # the engine completes what it started
            dst = TRANSITIONS[dst].get(done, dst)
        assert dst is target, (mode, target, event)
    assert toward(Mode.SPECULATING, False) is Event.LOAD_HIGH
    assert toward(Mode.RESYNCING, False) is Event.LOAD_HIGH
    assert toward(Mode.PLAIN, True) is Event.LOAD_LOW
    assert toward(Mode.DRAINING, True) is None and toward(Mode.DRAINING, False) is None
    assert toward(Mode.SPECULATING, True) is None and toward(Mode.PLAIN, False) is None
