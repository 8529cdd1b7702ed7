"""Mode actions: the ONLY place where an engine attaches, allocates, detaches or frees
mode-specific speculative state.

An engine adapter implements `ModeActions` (one entry and one exit action per mode). The machine
guarantees, for every transition src -> dst: exit(src) runs to completion before enter(dst)
starts, so per-batch state of two modes never coexists on a batch. The FAULT transition skips
exit(src) (that action may be the one that failed) and runs only `enter_plain`, which therefore
must be *total*: idempotent, and able to establish PLAIN's guarantees from any partially applied
state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from specfsm.fsm.record import TransitionInfo
from specfsm.fsm.table import Mode

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


def action_name(kind: str, mode: Mode) -> str:
    """`enter_plain`-style method name for an action kind ("enter"/"exit") and a mode."""
    return f"{kind}_{mode.value.lower()}"


def bind_actions(actions: ModeActions) -> dict[tuple[str, Mode], Action]:
    """Resolve every (kind, mode) action of `actions` once, so transitions do no lookups."""
    out: dict[tuple[str, Mode], Action] = {}
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
