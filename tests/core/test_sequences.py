"""Hypothesis-generated event sequences against the table."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from specfsm import (
    TRANSITIONS,
    Event,
    InvalidTransition,
    MachineFailed,
    Mode,
    ModeActionError,
    SpecFSM,
)
from specfsm.fsm.actions import action_name
from specfsm.fsm.table import SHAPE_EVENTS, SHAPE_TRANSITIONS, shape_action_name
from specfsm.fsm.testing import RecordingActions, capturing_log
from specfsm.model.acceptance import DraftShape

ACTION_NAMES = [action_name(k, m) for m in Mode for k in ("enter", "exit")]
ACTION_NAMES += [shape_action_name(e, m) for m, e in SHAPE_TRANSITIONS]
SHAPES = (DraftShape.chain(3), DraftShape.chain(5))


@settings(max_examples=300, deadline=None)
@given(
    events=st.lists(st.sampled_from(list(Event)), max_size=40),
    fail=st.dictionaries(st.sampled_from(ACTION_NAMES), st.integers(0, 1), max_size=2),
)
def test_random_sequences_follow_table(events: list[Event], fail: dict[str, int]) -> None:
    """Any sequence: legal events follow the table, illegal ones change nothing, failures
    land in PLAIN (the shape unchanged), and a shape event changes the shape only."""
    actions = RecordingActions(fail=fail)
    log, lines = capturing_log()
    fsm = SpecFSM(actions=actions, log=log)
    model = Mode.SPECULATING
    for event in events:
        before, shape = fsm.mode, fsm.shape
        assert before is model
        new = (SHAPES[1] if shape == SHAPES[0] else SHAPES[0]) if event in SHAPE_EVENTS else None
        try:
            fsm.process_event(event, shape=new)
        except InvalidTransition:
            assert event not in TRANSITIONS[model]
            assert fsm.mode is before and fsm.shape == shape
            continue
        except ModeActionError:
            assert fsm.mode is Mode.PLAIN and fsm.shape == shape
            model = Mode.PLAIN
            continue
        except MachineFailed:
            # only enter_plain failing on the fault path (an explicit FAULT, or the recovery
            # after another failure) may fail the machine
            assert "enter_plain" in fail and fsm.failed
            return
        model = TRANSITIONS[model][event]
        assert fsm.mode is model
        assert fsm.shape == (new if new is not None else shape)
    assert not fsm.failed
    # every transition line names a legal (src, trigger) -> dst
    for line in lines:
        if line["event"] == "specfsm.transition":
            src, ev = Mode[line["src"]], Event[line["trigger"]]
            assert TRANSITIONS[src][ev] is Mode[line["dst"]]
