"""The transition table: shape and the properties the design relies on."""

from specfsm import SAFE_MODE, TRANSITIONS, Event, Mode


def test_exactly_four_modes() -> None:
    """The table has exactly the four modes of the design."""
    assert {m.name for m in Mode} == {"SPECULATING", "DRAINING", "PLAIN", "RESYNCING"}
    assert set(TRANSITIONS) == set(Mode)


def test_required_transitions() -> None:
    """The transitions the design card requires are in the table."""
    assert TRANSITIONS[Mode.SPECULATING][Event.LOAD_HIGH] is Mode.DRAINING
    assert TRANSITIONS[Mode.DRAINING][Event.DRAINED] is Mode.PLAIN
    assert TRANSITIONS[Mode.PLAIN][Event.LOAD_LOW] is Mode.RESYNCING
    assert TRANSITIONS[Mode.RESYNCING][Event.RESYNCED] is Mode.SPECULATING
    assert TRANSITIONS[Mode.RESYNCING][Event.LOAD_HIGH] is Mode.PLAIN


def test_fault_from_every_mode_goes_to_plain() -> None:
    """FAULT is legal in every mode and leads to the safe mode."""
    assert SAFE_MODE is Mode.PLAIN
    for mode in Mode:
        assert TRANSITIONS[mode][Event.FAULT] is Mode.PLAIN


def test_every_mode_reachable_and_can_reach_plain() -> None:
    """Every mode is reachable from SPECULATING and every mode can reach PLAIN."""
    seen, todo = {Mode.SPECULATING}, [Mode.SPECULATING]
    while todo:
        for dst in TRANSITIONS[todo.pop()].values():
            if dst not in seen:
                seen.add(dst)
                todo.append(dst)
    assert seen == set(Mode)


def test_table_is_read_only() -> None:
    """The table cannot be mutated at runtime."""
    try:
        TRANSITIONS[Mode.PLAIN][Event.LOAD_HIGH] = Mode.SPECULATING  # type: ignore[index]
    except TypeError:
        return
    raise AssertionError("TRANSITIONS is mutable")


def test_toward_shape_names_the_event_the_table_accepts() -> None:
    """toward_shape: RESHAPE only while speculating at another shape; the load events of
    TOWARD otherwise; None where the machine is or only a completion event can move it."""
    from specfsm.fsm.table import TOWARD, Event, Mode, toward_shape
    from specfsm.model.acceptance import DraftShape

    c1, c3 = DraftShape.chain(1), DraftShape.chain(3)
    assert toward_shape(Mode.SPECULATING, c3, c1) is Event.RESHAPE
    assert toward_shape(Mode.SPECULATING, c3, c3) is None
    assert toward_shape(Mode.SPECULATING, c3, None) is TOWARD[(Mode.SPECULATING, Mode.PLAIN)]
    assert toward_shape(Mode.PLAIN, None, c1) is TOWARD[(Mode.PLAIN, Mode.SPECULATING)]
    assert toward_shape(Mode.PLAIN, None, None) is None
    assert toward_shape(Mode.DRAINING, None, c1) is None
