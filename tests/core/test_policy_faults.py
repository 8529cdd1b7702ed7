"""Policy faults never stop the machine: raise / garbage / wrong event -> FAULT to PLAIN."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from specfsm import Event, FixedPolicy, Mode, Observation, SpecFSM, TransitionLog, json_logger
from specfsm.fsm.errors import PolicyError, SpecFSMError
from specfsm.fsm.machine import policy_name
from specfsm.fsm.testing import RecordingActions, capturing_log


class Returns:
    """A policy returning a fixed value (anything) on every decide."""

    last_reason = "returns"

    def __init__(self, value: Any) -> None:
        self.value = value

    def decide(self, mode: Mode, obs: Observation) -> Any:
        return self.value

    def describe(self) -> dict[str, object]:
        return {"policy": "returns"}


class Raises:
    """A policy whose decide raises."""

    last_reason = ""

    def decide(self, mode: Mode, obs: Observation) -> Event | None:
        raise RuntimeError("boom")

    def describe(self) -> dict[str, object]:
        return {"policy": "raises"}


def obs(i: int) -> Observation:
    return Observation(iteration=i, decode_bs=4)


@pytest.mark.parametrize(
    ("policy", "initial", "text"),
    [
        (Raises(), Mode.SPECULATING, "raised RuntimeError: boom"),
        (Returns("LOAD_HIGH"), Mode.SPECULATING, "returned str 'LOAD_HIGH', not an Event"),
        (Returns(["x"]), Mode.SPECULATING, "returned list ['x'], not an Event"),
        (Returns(1), Mode.RESYNCING, "returned int 1"),
        (Returns(Event.DRAINED), Mode.DRAINING, "completion events come from the engine"),
        (Returns(Event.FAULT), Mode.SPECULATING, "policies emit only load events"),
        (Returns(Event.LOAD_LOW), Mode.SPECULATING, "does not accept in SPECULATING"),
    ],
    ids=["raises", "str", "list", "int", "drained", "fault", "illegal-load"],
)
def test_fault_goes_to_plain_with_one_line(policy: Any, initial: Mode, text: str) -> None:
    """Each kind of bad policy: step returns FAULT, mode PLAIN, a PolicyError (a SpecFSMError,
    never AttributeError) kept, one policy_failed line naming policy, iteration and error."""
    log, lines = capturing_log()
    fsm = SpecFSM(policy, RecordingActions(), initial=initial, log=log)
    assert fsm.step(obs(17)) is Event.FAULT
    assert fsm.mode is Mode.PLAIN and not fsm.failed
    err = fsm.last_policy_error
    assert isinstance(err, PolicyError) and isinstance(err, SpecFSMError)
    assert text in str(err) and "iteration 17" in str(err)
    failed = [x for x in lines if x["event"] == "specfsm.policy_failed"]
    assert len(failed) == 1
    assert (failed[0]["policy"], failed[0]["iteration"], failed[0]["faults"]) == (
        policy_name(policy),
        17,
        1,
    )
    assert text in failed[0]["error"]
    trans = [x for x in lines if x["event"] == "specfsm.transition"]
    assert [(t["src"], t["dst"], t["trigger"]) for t in trans] == [
        (initial.value, "PLAIN", "FAULT")
    ]
    assert fsm.policy_faults == 1


def test_exception_line_says_where() -> None:
    """The policy_failed line of a raising policy names the file and line it raised at."""
    log, lines = capturing_log()
    SpecFSM(Raises(), RecordingActions(), log=log).step(obs(1))
    (line,) = [x for x in lines if x["event"] == "specfsm.policy_failed"]
    assert "test_policy_faults.py" in line["at"] and "decide" in line["at"]


def test_replaced_after_n_faults_then_swappable() -> None:
    """After max_policy_faults faults the policy becomes FixedPolicy(False), logged once; the
    machine keeps serving in PLAIN; assigning a policy resets the count."""
    log, lines = capturing_log()
    fsm = SpecFSM(Raises(), RecordingActions(), log=log, max_policy_faults=3)
    for i in range(3):
        assert fsm.step(obs(i)) is Event.FAULT
    assert isinstance(fsm.policy, FixedPolicy) and fsm.policy.speculate is False
    replaced = [x for x in lines if x["event"] == "specfsm.policy_replaced"]
    assert len(replaced) == 1 and replaced[0]["old"] == "raises"
    assert replaced[0]["new"] == {"policy": "fixed", "speculate": False}
    for i in range(3, 20):
        assert fsm.step(obs(i)) is None
    assert fsm.mode is Mode.PLAIN and fsm.policy_faults == 3
    fsm.policy = Raises()  # the operator swaps a policy in: a fresh count
    assert fsm.step(obs(20)) is Event.FAULT and fsm.policy_faults == 4
    assert isinstance(fsm.policy, Raises)
    fsm.policy = FixedPolicy(True)
    assert fsm.step(obs(21)) is Event.LOAD_LOW and fsm.mode is Mode.RESYNCING


def test_json_line_is_one_line() -> None:
    """On a real JSON log the fault is exactly one specfsm.policy_failed line."""
    buf = io.StringIO()
    fsm = SpecFSM(Raises(), RecordingActions(), log=TransitionLog(json_logger(buf)))
    fsm.step(obs(5))
    events = [json.loads(x)["event"] for x in buf.getvalue().splitlines()]
    assert events == ["specfsm.policy_failed", "specfsm.transition"]


def test_keyboard_interrupt_in_policy_is_not_swallowed() -> None:
    """Only Exception is a policy fault; KeyboardInterrupt propagates."""

    class Interrupts(Raises):
        def decide(self, mode: Mode, obs: Observation) -> Event | None:
            raise KeyboardInterrupt

    fsm = SpecFSM(Interrupts(), RecordingActions())
    with pytest.raises(KeyboardInterrupt):
        fsm.step(obs(0))
    assert fsm.mode is Mode.SPECULATING


def test_bad_limit_refused() -> None:
    """max_policy_faults must be an int >= 1."""
    with pytest.raises(ValueError, match="max_policy_faults"):
        SpecFSM(max_policy_faults=0)
    with pytest.raises(TypeError, match="max_policy_faults"):
        SpecFSM(max_policy_faults=True)


def test_plugin_loader_dotted_path_and_errors() -> None:
    """load_policy_factory resolves 'module:Attr'; unknown modules, attributes and entry
    points are LookupErrors naming what was tried; check_policy names missing members."""
    from specfsm.policy.plugins import check_policy, load_policy_factory

    assert load_policy_factory("specfsm.policy.simple:FixedPolicy") is FixedPolicy
    with pytest.raises(LookupError, match="cannot import 'nope_mod'"):
        load_policy_factory("nope_mod:X")
    with pytest.raises(LookupError, match="has no attribute 'Nope'"):
        load_policy_factory("specfsm.policy.simple:Nope")
    with pytest.raises(LookupError, match=r"group .specfsm\.policies."):
        load_policy_factory("no-such-entry-point")
    with pytest.raises(TypeError, match="lacks decide, describe"):
        check_policy(object(), "x")
    assert check_policy(FixedPolicy(True), "fixed").speculate is True  # type: ignore[attr-defined]
