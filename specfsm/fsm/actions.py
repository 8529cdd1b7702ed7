"""Mode actions: the ONLY place where an engine attaches, allocates, detaches or frees
mode-specific speculative state.

An engine adapter implements `ModeActions` (one entry and one exit action per mode). The machine
guarantees, for every transition src -> dst: exit(src) runs to completion before enter(dst)
starts, so per-batch state of two modes never coexists on a batch. The FAULT transition skips
exit(src) (that action may be the one that failed) and runs only `enter_plain`, which therefore
must be *total*: idempotent, and able to establish PLAIN's guarantees from any partially applied
state.

A shape event (RESHAPE: the draft shape changes inside SPECULATING) is an internal
self-transition: neither exit(mode) nor enter(mode) runs, only its own action, named from the
table (`specfsm.fsm.table.shape_action_name`: `reshape_speculating`). Its record carries the new
shape (`t.shape`) and the old one (`t.prev_shape`); it attaches the new shape's pre-built state
once the old shape's in-flight batch no longer needs its own. A failing one faults to PLAIN.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from specfsm.fsm.record import TransitionInfo
from specfsm.fsm.table import SHAPE_TRANSITIONS, Mode, shape_action_name

Action = Callable[[TransitionInfo], None]


class ModeActions(Protocol):
    """Entry and exit actions per mode, implemented by each engine adapter."""

    def enter_speculating(self, t: TransitionInfo) -> None: ...
    def exit_speculating(self, t: TransitionInfo) -> None: ...
    def enter_draining(self, t: TransitionInfo) -> None: ...
    def exit_draining(self, t: TransitionInfo) -> None: ...
    def enter_plain(self, t: TransitionInfo) -> None: ...
    def exit_plain(self, t: TransitionInfo) -> None: ...
    def enter_resyncing(self, t: TransitionInfo) -> None: ...
    def exit_resyncing(self, t: TransitionInfo) -> None: ...
    def reshape_speculating(self, t: TransitionInfo) -> None: ...


class NoopActions:
    """ModeActions that do nothing: for engines with no mode-specific state, and as a base."""

    def enter_speculating(self, t: TransitionInfo) -> None:
        return None

    def exit_speculating(self, t: TransitionInfo) -> None:
        return None

    def enter_draining(self, t: TransitionInfo) -> None:
        return None

    def exit_draining(self, t: TransitionInfo) -> None:
        return None

    def enter_plain(self, t: TransitionInfo) -> None:
        return None

    def exit_plain(self, t: TransitionInfo) -> None:
        return None

    def enter_resyncing(self, t: TransitionInfo) -> None:
        return None

    def exit_resyncing(self, t: TransitionInfo) -> None:
        return None

    def reshape_speculating(self, t: TransitionInfo) -> None:
        return None


def _cannot(owner: str, name: str) -> Action:
    """The stand-in for a shape action an engine's actions lack: an engine with one draft shape
    cannot change it, so a shape event there raises (and faults to PLAIN) instead of binding
    failing at start-up."""

    def cannot(t: TransitionInfo) -> None:
        raise NotImplementedError(f"{owner} has no {name}(t): this engine cannot change shape")

    return cannot


def action_name(kind: str, mode: Mode) -> str:
    """`enter_plain`-style method name for an action kind ("enter"/"exit") and a mode."""
    return f"{kind}_{mode.value.lower()}"


def bind_actions(actions: ModeActions) -> dict[tuple[str, Mode], Action]:
    """Resolve every action of `actions` once, so transitions do no lookups: ("enter", mode) and
    ("exit", mode) for every mode, and (event.value, mode) for every shape self-transition of
    the table (("reshape", SPECULATING) -> `reshape_speculating`; actions without it get a
    stand-in that raises, so a RESHAPE there faults to PLAIN)."""
    out: dict[tuple[str, Mode], Action] = {}
    for mode, event in SHAPE_TRANSITIONS:
        name = shape_action_name(event, mode)
        fn = getattr(actions, name, None)
        out[(event.value, mode)] = fn if callable(fn) else _cannot(type(actions).__name__, name)
    for mode in Mode:
        for kind in ("enter", "exit"):
            fn = getattr(actions, action_name(kind, mode), None)
            if not callable(fn):
                raise TypeError(
                    f"{type(actions).__name__} lacks {action_name(kind, mode)}(t): "
                    "every mode needs an entry and an exit action (see ModeActions)"
                )
            out[(kind, mode)] = fn
    return out
