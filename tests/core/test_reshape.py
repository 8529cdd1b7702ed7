"""RESHAPE: the draft shape changes inside SPECULATING through the table, never around it."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from structlog.testing import capture_logs

from specfsm import (
    SHAPE_EVENTS,
    TRANSITIONS,
    Event,
    InvalidShape,
    InvalidTransition,
    Mode,
    ModeActionError,
    Observation,
    SpecFSM,
    TransitionLog,
    json_logger,
)
from specfsm.fsm.diagram import render
from specfsm.fsm.machine import machine_config
from specfsm.fsm.record import TransitionRecord
from specfsm.fsm.table import TOWARD, legal_events
from specfsm.fsm.testing import RecordingActions
from specfsm.logtools.reader import read_logs
from specfsm.logtools.summary import dwells, summarize
from specfsm.model.acceptance import DraftShape

C3, C5, TREE = DraftShape.chain(3), DraftShape.chain(5), DraftShape(4, 2, 16)
SHAPES = (C3, C5, TREE)


def machine(
    mode: Mode = Mode.SPECULATING, actions: RecordingActions | None = None, **kw: Any
) -> SpecFSM:
    """A machine over SHAPES at chain3, started in `mode`."""
    kw.setdefault("shapes", SHAPES)
    kw.setdefault("shape", C3)
    return SpecFSM(actions=actions or RecordingActions(), initial=mode, **kw)


class Reshaper:
    """A policy returning RESHAPE with `next_shape` (or without, when it is not set)."""

    last_reason = "shape pays more"

    def __init__(self, shape: Any = None, event: Event | None = Event.RESHAPE) -> None:
        if shape is not None:
            self.next_shape = shape
        self.event = event

    def decide(self, mode: Mode, obs: Observation) -> Event | None:
        return self.event

    def describe(self) -> dict[str, object]:
        return {"policy": "reshaper"}


def test_table_has_reshape_only_in_speculating() -> None:
    """RESHAPE is a SPECULATING self-transition, in no other mode, and no load event of TOWARD."""
    assert frozenset({Event.RESHAPE}) == SHAPE_EVENTS
    assert Event.RESHAPE.value == "reshape"
    assert TRANSITIONS[Mode.SPECULATING][Event.RESHAPE] is Mode.SPECULATING
    assert [m for m in Mode if Event.RESHAPE in legal_events(m)] == [Mode.SPECULATING]
    assert Event.RESHAPE not in TOWARD.values()


def test_machine_config_is_internal_and_diagram_draws_it() -> None:
    """machine_config makes RESHAPE internal (dest None); the diagrams show it on SPECULATING."""
    (t,) = [t for t in machine_config()["transitions"] if t["trigger"] == "reshape"]
    assert t["source"] is Mode.SPECULATING and t["dest"] is None
    assert "SPECULATING -> SPECULATING" in render("dot") and "RESHAPE" in render("dot")
    assert "RESHAPE in SPECULATING stays in SPECULATING" in render("mermaid")
    assert "reshape_speculating" in render("mermaid")


@pytest.mark.parametrize("mode", [m for m in Mode if m is not Mode.SPECULATING])
def test_reshape_outside_speculating_is_invalid(mode: Mode) -> None:
    """RESHAPE outside SPECULATING raises InvalidTransition; mode, shape, actions unchanged."""
    actions = RecordingActions()
    fsm = machine(mode, actions)
    with pytest.raises(InvalidTransition) as info:
        fsm.process_event(Event.RESHAPE, shape=C5)
    assert not isinstance(info.value, InvalidShape)
    assert (fsm.mode, fsm.shape, actions.calls) == (mode, C3, [])


@pytest.mark.parametrize(
    ("event", "shape", "match"),
    [
        (Event.RESHAPE, None, "needs the new shape"),
        (Event.RESHAPE, C3, "already the current one"),
        (Event.RESHAPE, DraftShape.chain(7), "not one of the allowed shapes"),
        (Event.RESHAPE, "chain5", "must be a DraftShape"),
        (Event.LOAD_HIGH, C5, "goes only with RESHAPE"),
        (Event.FAULT, C5, "goes only with RESHAPE"),
    ],
)
def test_invalid_shape_request(event: Event, shape: Any, match: str) -> None:
    """A refused shape raises InvalidShape (an InvalidTransition) with mode and shape unchanged
    and no action run."""
    actions = RecordingActions()
    fsm = machine(actions=actions)
    with pytest.raises(InvalidShape, match=match) as info:
        fsm.process_event(event, shape=shape)
    assert isinstance(info.value, InvalidTransition)
    assert "mode and shape are unchanged" in str(info.value)
    assert (fsm.mode, fsm.shape, actions.calls, fsm.transitions) == (
        Mode.SPECULATING,
        C3,
        [],
        0,
    )


def test_reshape_runs_one_action_with_shapes_in_the_record() -> None:
    """RESHAPE runs reshape_speculating once (no exit/enter); record and listener carry both
    shapes; the shape is kept across PLAIN."""
    actions = RecordingActions()
    fsm = machine(actions=actions)
    got: list[TransitionRecord] = []
    fsm.listeners.append(got.append)
    assert fsm.process_event(Event.RESHAPE, None, "why", shape=TREE) is Mode.SPECULATING
    assert actions.names() == ["reshape_speculating"]
    t = actions.calls[0][1]
    assert (t.src, t.dst, t.event, t.shape, t.prev_shape) == (
        Mode.SPECULATING,
        Mode.SPECULATING,
        Event.RESHAPE,
        TREE,
        C3,
    )
    assert fsm.shape == TREE and fsm.shapes == SHAPES and fsm.transitions == 1
    (rec,) = got
    assert rec.shape == TREE and rec.prev_shape == C3 and rec.exit_us is None
    fsm.process_event(Event.LOAD_HIGH)
    assert got[-1].shape is None and got[-1].prev_shape is None
    fsm.process_event(Event.DRAINED)
    assert fsm.mode is Mode.PLAIN and fsm.shape == TREE


def test_any_shape_when_shapes_empty() -> None:
    """With no allowed set any DraftShape goes; the first RESHAPE's prev_shape may be None."""
    actions = RecordingActions()
    fsm = SpecFSM(actions=actions)
    assert fsm.shape is None and fsm.shapes == ()
    fsm.process_event(Event.RESHAPE, shape=C5)
    assert fsm.shape == C5 and actions.calls[0][1].prev_shape is None


def test_constructor_checks_shapes() -> None:
    """A start shape outside `shapes`, or something not a DraftShape, is refused."""
    with pytest.raises(ValueError, match="not one of shapes"):
        SpecFSM(shapes=[C3], shape=C5)
    with pytest.raises(TypeError, match="DraftShape"):
        SpecFSM(shapes=["chain3"])  # type: ignore[list-item]


def test_failing_reshape_action_faults_to_plain_shape_unchanged() -> None:
    """A raising reshape_speculating: action_failed, FAULT to PLAIN (enter_plain only),
    ModeActionError, the shape unchanged."""
    actions = RecordingActions(fail={"reshape_speculating": 1})
    fsm = machine(actions=actions)
    with capture_logs() as logs, pytest.raises(ModeActionError) as info:
        fsm.process_event(Event.RESHAPE, shape=C5)
    assert info.value.action == "reshape_speculating"
    assert fsm.mode is Mode.PLAIN and fsm.shape == C3 and not fsm.failed
    assert actions.names() == ["reshape_speculating", "enter_plain"]
    assert [x["event"] for x in logs] == ["specfsm.action_failed", "specfsm.transition"]
    assert logs[0]["action"] == "reshape_speculating" and logs[1]["trigger"] == "FAULT"
    assert "shape_to" not in logs[1]


def test_actions_without_reshape_fault_instead_of_failing_to_bind() -> None:
    """Actions lacking reshape_speculating still bind; a RESHAPE there faults to PLAIN."""

    class Old:
        def __getattr__(self, name: str) -> Any:
            if name.startswith(("enter_", "exit_")):
                return lambda t: None
            raise AttributeError(name)

    fsm = SpecFSM(actions=Old())  # type: ignore[arg-type]
    with capture_logs(), pytest.raises(ModeActionError, match="cannot change shape"):
        fsm.process_event(Event.RESHAPE, shape=C5)
    assert fsm.mode is Mode.PLAIN and fsm.shape is None


def test_policy_reshape_applies_next_shape() -> None:
    """A policy's RESHAPE with next_shape: step returns RESHAPE and the shape changes."""
    actions = RecordingActions()
    fsm = machine(actions=actions)
    fsm.policy = Reshaper(C5)
    with capture_logs() as logs:
        assert fsm.step(Observation(iteration=4, decode_bs=2)) is Event.RESHAPE
    assert fsm.shape == C5 and fsm.mode is Mode.SPECULATING and fsm.policy_faults == 0
    assert logs[0]["reason"] == "shape pays more" and logs[0]["iteration"] == 4


@pytest.mark.parametrize(
    ("policy", "mode", "says"),
    [
        (Reshaper(None), Mode.SPECULATING, "needs the new shape"),
        (Reshaper("chain5"), Mode.SPECULATING, "must be a DraftShape"),
        (Reshaper(DraftShape.chain(7)), Mode.SPECULATING, "not one of the allowed shapes"),
        (Reshaper(C3), Mode.SPECULATING, "already the current one"),
        (Reshaper(C5), Mode.PLAIN, "does not accept in PLAIN"),
        (Reshaper(C5), Mode.RESYNCING, "does not accept in RESYNCING"),
    ],
)
def test_policy_reshape_refused_is_a_policy_fault(policy: Reshaper, mode: Mode, says: str) -> None:
    """A RESHAPE without a valid next_shape, or outside SPECULATING, is a policy fault: one
    policy_failed line, counted, FAULT to PLAIN, the shape unchanged."""
    fsm = machine(mode)
    fsm.policy = policy
    with capture_logs() as logs:
        assert fsm.step(Observation(iteration=9, decode_bs=2)) is Event.FAULT
    assert fsm.mode is Mode.PLAIN and fsm.shape == C3 and fsm.policy_faults == 1
    assert fsm.last_policy_error is not None and says in str(fsm.last_policy_error)
    failed = [x for x in logs if x["event"] == "specfsm.policy_failed"]
    assert len(failed) == 1 and "RESHAPE" in failed[0]["error"]
    assert [x["trigger"] for x in logs if x["event"] == "specfsm.transition"] == ["FAULT"]


def test_transition_line_carries_shapes() -> None:
    """The RESHAPE line has src = dst = SPECULATING, shape_from/shape_to labels, shape_us, and
    null exit_us/enter_us; other lines have no shape fields."""
    buf = io.StringIO()
    fsm = machine(log=TransitionLog(json_logger(buf), rank=2))
    fsm.process_event(Event.RESHAPE, Observation(iteration=5, decode_bs=3), "r", shape=TREE)
    fsm.process_event(Event.LOAD_HIGH, Observation(iteration=6, decode_bs=30), "load")
    first, second = (json.loads(x) for x in buf.getvalue().splitlines())
    assert (first["src"], first["dst"], first["trigger"], first["rank"]) == (
        "SPECULATING",
        "SPECULATING",
        "RESHAPE",
        2,
    )
    assert first["shape_from"] == "chain3" and first["shape_to"] == TREE.label()
    assert isinstance(first["shape_us"], float) and first["shape_us"] >= 0
    assert first["exit_us"] is None and first["enter_us"] is None and first["bs"] == 3
    assert not {"shape_from", "shape_to", "shape_us"} & set(second)


def test_logtools_count_reshapes(tmp_path: Any) -> None:
    """The log tools read RESHAPE lines, count them apart from switches, and keep the dwell."""
    path = tmp_path / "t.jsonl"
    with open(path, "w") as f:
        fsm = machine(log=TransitionLog(json_logger(f)), observe_every=1)
        for it in range(1, 21):
            fsm.step(Observation(iteration=it, decode_bs=2))
            if it in (5, 12):
                fsm.process_event(
                    Event.RESHAPE,
                    Observation(iteration=it, decode_bs=2),
                    "r",
                    shape=C5 if it == 5 else TREE,
                )
    logs = read_logs([str(path)])
    assert not logs.problems
    overall = summarize(logs).overall
    assert overall.reshapes == 2 and overall.switches == 0
    assert dict(overall.reshape_to) == {"chain5": 1, TREE.label(): 1}
    d = overall.as_dict()
    assert d["reshapes"] == 2 and d["reshapes_per_100_iterations"] == 10.0
    (run,) = logs.engines()[0].ranks[0]
    assert [x.mode for x in dwells(run)] == ["SPECULATING"]
