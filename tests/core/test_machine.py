"""SpecFSM: the Mode x Event space, action order, fault routing, the failed flag."""

from __future__ import annotations

import itertools

import pytest

from specfsm import (
    TRANSITIONS,
    Event,
    InvalidTransition,
    MachineFailed,
    Mode,
    ModeActionError,
    Observation,
    ScriptedPolicy,
    SpecFSM,
    SpecFSMError,
)
from specfsm.fsm.actions import action_name
from specfsm.fsm.table import SHAPE_EVENTS, shape_action_name
from specfsm.fsm.testing import RecordingActions, capturing_log
from specfsm.model.acceptance import DraftShape

PAIRS = list(itertools.product(Mode, Event))


def machine_in(mode: Mode, actions: RecordingActions | None = None) -> SpecFSM:
    """A machine with recording actions, started in `mode`."""
    log, _ = capturing_log()
    return SpecFSM(actions=actions or RecordingActions(), initial=mode, log=log)


@pytest.mark.parametrize(("mode", "event"), PAIRS, ids=lambda x: x.name)
def test_mode_event_space(mode: Mode, event: Event) -> None:
    """Legal pairs reach the table's destination with exit before enter; illegal ones raise
    InvalidTransition naming mode and event, run no action and leave the mode unchanged."""
    actions = RecordingActions()
    fsm = machine_in(mode, actions)
    dst = TRANSITIONS[mode].get(event)
    if dst is None:
        with pytest.raises(InvalidTransition) as info:
            fsm.process_event(event)
        assert mode.name in str(info.value) and event.name in str(info.value)
        assert fsm.mode is mode
        assert actions.calls == []
        return
    shape = DraftShape.chain(5) if event in SHAPE_EVENTS else None
    assert fsm.process_event(event, shape=shape) is dst
    assert fsm.mode is dst
    expected = [action_name("enter", dst)]
    if event in SHAPE_EVENTS:
        expected = [shape_action_name(event, mode)]
    elif event is not Event.FAULT:
        expected.insert(0, action_name("exit", mode))
    assert actions.names() == expected
    for _, info_ in actions.calls:
        assert (info_.src, info_.dst, info_.event) == (mode, dst, event)


ACTIONS = [action_name(k, m) for m in Mode for k in ("exit", "enter")]


def path_to(name: str) -> tuple[Mode, list[Event]]:
    """A start mode and events whose last transition runs action `name`."""
    for src, row in TRANSITIONS.items():
        for event, dst in row.items():
            if event is Event.FAULT or event in SHAPE_EVENTS:
                continue
            if name in (action_name("exit", src), action_name("enter", dst)):
                return src, [event]
    raise AssertionError(name)


@pytest.mark.parametrize("name", ACTIONS)
def test_injected_failure_in_every_action(name: str) -> None:
    """A failing action sends the machine to PLAIN through FAULT, logs action_failed and raises
    ModeActionError chained to the cause."""
    start, events = path_to(name)
    actions = RecordingActions(fail={name: 1})
    log, lines = capturing_log()
    fsm = SpecFSM(actions=actions, initial=start, log=log)
    with pytest.raises(ModeActionError) as info:
        for event in events:
            fsm.process_event(event)
    assert isinstance(info.value.__cause__, RuntimeError)
    assert info.value.action == name
    assert fsm.mode is Mode.PLAIN and not fsm.failed
    kinds = [line["event"] for line in lines]
    assert "specfsm.action_failed" in kinds
    fault = [line for line in lines if line.get("trigger") == "FAULT"]
    assert len(fault) == 1 and fault[0]["dst"] == "PLAIN"
    assert actions.names()[-1] == "enter_plain"
    # the machine keeps working afterwards
    fsm.process_event(Event.LOAD_LOW)
    assert fsm.mode is Mode.RESYNCING


def test_fault_path_failure_marks_machine_failed() -> None:
    """When enter_plain fails on the fault path too, the machine is failed and stays so."""
    actions = RecordingActions(fail={"enter_plain": 2})
    fsm = machine_in(Mode.DRAINING, actions)
    with pytest.raises(MachineFailed) as info:
        fsm.process_event(Event.DRAINED)
    assert isinstance(info.value.__cause__, RuntimeError)
    assert fsm.failed
    with pytest.raises(MachineFailed):
        fsm.process_event(Event.FAULT)
    with pytest.raises(MachineFailed):
        fsm.step(Observation(iteration=1, decode_bs=1))


def test_keyboard_interrupt_in_action_is_not_swallowed() -> None:
    """A KeyboardInterrupt inside an action propagates and marks the machine failed."""

    class Interrupting(RecordingActions):
        def enter_draining(self, t: object) -> None:  # type: ignore[override]
            raise KeyboardInterrupt

    fsm = machine_in(Mode.SPECULATING, Interrupting())
    with pytest.raises(KeyboardInterrupt):
        fsm.process_event(Event.LOAD_HIGH)
    assert fsm.failed


def test_step_calls_transitions_only_when_due(monkeypatch: pytest.MonkeyPatch) -> None:
    """step() never enters process_event while the policy returns None."""
    fsm = machine_in(Mode.SPECULATING)
    fsm.policy = ScriptedPolicy([(10, Mode.PLAIN)])
    calls: list[Event] = []
    real = fsm.process_event

    def spy(event: Event, *a: object, **k: object) -> Mode:
        calls.append(event)
        return real(event, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(fsm, "process_event", spy)
    for it in range(10):
        assert fsm.step(Observation(iteration=it, decode_bs=1)) is None
    assert calls == []
    assert fsm.step(Observation(iteration=10, decode_bs=1)) is Event.LOAD_HIGH
    assert calls == [Event.LOAD_HIGH] and fsm.mode is Mode.DRAINING


def test_policy_emitting_completion_event_is_a_policy_fault() -> None:
    """A policy may not emit DRAINED/RESYNCED: the machine faults it to PLAIN and says why."""

    class Bad:
        last_reason = "bad"

        def decide(self, mode: Mode, obs: Observation) -> Event | None:
            return Event.RESYNCED

        def describe(self) -> dict[str, object]:
            return {}

    fsm = machine_in(Mode.RESYNCING)
    fsm.policy = Bad()
    assert fsm.step(Observation(iteration=0, decode_bs=1)) is Event.FAULT
    assert fsm.mode is Mode.PLAIN
    assert isinstance(fsm.last_policy_error, SpecFSMError)
    assert "completion events come from the engine" in str(fsm.last_policy_error)


def test_listeners_get_records() -> None:
    """Listeners receive one record per transition with durations."""
    fsm = machine_in(Mode.SPECULATING)
    got = []
    fsm.listeners.append(got.append)
    fsm.process_event(Event.LOAD_HIGH, Observation(iteration=7, decode_bs=40), "load")
    assert len(got) == 1
    rec = got[0]
    assert (rec.src, rec.dst, rec.iteration, rec.reason) == (
        Mode.SPECULATING,
        Mode.DRAINING,
        7,
        "load",
    )
    assert rec.exit_us is not None and rec.enter_us is not None


def test_unknown_action_set_is_refused() -> None:
    """An actions object lacking a method is refused at construction."""

    class Half:
        def enter_plain(self, t: object) -> None: ...

    with pytest.raises(TypeError, match="lacks"):
        SpecFSM(actions=Half())  # type: ignore[arg-type]
