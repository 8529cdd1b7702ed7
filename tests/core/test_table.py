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
