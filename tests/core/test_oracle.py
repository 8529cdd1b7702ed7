"""The executor against a plain `transitions` oracle built from the same table."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from transitions import Machine, MachineError

from specfsm import TRANSITIONS, Event, InvalidTransition, Mode, SpecFSM
from specfsm.fsm.table import SHAPE_EVENTS
from specfsm.fsm.testing import capturing_log
from specfsm.model.acceptance import DraftShape


def oracle(initial: Mode) -> Any:
    """A bare transitions.Machine over the table, with no callbacks."""

    class M:
        pass

    m: Any = M()
    Machine(
        model=m,
        states=list(Mode),
        initial=initial,
        transitions=[
            {"trigger": e.value, "source": s, "dest": d}
            for s, row in TRANSITIONS.items()
            for e, d in row.items()
        ],
        auto_transitions=False,
    )
    return m


@pytest.mark.parametrize(("mode", "event"), list(itertools.product(Mode, Event)))
def test_executor_matches_oracle(mode: Mode, event: Event) -> None:
    """For every pair, SpecFSM and the oracle agree on acceptance and destination."""
    m = oracle(mode)
    fsm = SpecFSM(initial=mode, log=capturing_log()[0])
    try:
        m.trigger(event.value)
        oracle_ok = True
    except MachineError:
        oracle_ok = False
    try:
        fsm.process_event(event, shape=DraftShape.chain(5) if event in SHAPE_EVENTS else None)
        ours_ok = True
    except InvalidTransition:
        ours_ok = False
    assert ours_ok == oracle_ok
    assert fsm.mode is m.state
