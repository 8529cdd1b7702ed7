"""specfsm's exceptions: one base class, one subclass per failure kind."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specfsm.fsm.table import Event, Mode


class SpecFSMError(Exception):
    """Base class of every specfsm error."""


class InvalidTransition(SpecFSMError):
    """An event the table does not accept in the current mode. The mode is unchanged."""

    def __init__(self, mode: Mode, event: Event) -> None:
        self.mode = mode
        self.event = event
        super().__init__(
            f"invalid transition: event {event.name} is not allowed in mode {mode.name} "
            f"(the mode stays {mode.name}; see specfsm.TRANSITIONS)"
        )


class InvalidShape(InvalidTransition):
    """A shape request the machine refuses: RESHAPE without a shape, a shape with another event,
    a shape outside the allowed set, or the current shape again. Mode and shape are unchanged."""

    def __init__(self, mode: Mode, event: Event, detail: str) -> None:
        self.mode = mode
        self.event = event
        self.detail = detail
        SpecFSMError.__init__(
            self,
            f"invalid shape request: event {event.name} in mode {mode.name}: {detail} "
            f"(mode and shape are unchanged; see specfsm.fsm.table.SHAPE_EVENTS)",
        )


class ModeActionError(SpecFSMError):
    """A mode's entry or exit action raised. The machine went to the safe mode (PLAIN)."""

    def __init__(self, action: str, mode_after: Mode, cause: BaseException) -> None:
        self.action = action
        self.mode_after = mode_after
        super().__init__(
            f"mode action {action} failed with {type(cause).__name__}: {cause}; "
            f"the machine is now in {mode_after.name}"
        )


class MachineFailed(SpecFSMError):
    """The fault path itself failed. The engine must stop: its mode is unknown."""


class SpecStateError(SpecFSMError):
    """Spec state on a batch does not match what the mode allows (a contract violation)."""

    def __init__(self, mode: Mode, field: str, expected: str, actual: str) -> None:
        self.mode = mode
        self.field = field
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"spec state violates mode {mode.name}: {field}: expected {expected}, got {actual}"
        )


class PolicyError(SpecFSMError):
    """A policy raised or returned something other than None or a legal load event.

    The machine does not raise it from `step`: it faults to PLAIN and keeps it in
    `SpecFSM.last_policy_error` (the engine keeps serving).
    """

    def __init__(self, policy: str, iteration: int, mode: Mode, detail: str) -> None:
        self.policy = policy
        self.iteration = iteration
        self.mode = mode
        self.detail = detail
        super().__init__(f"policy {policy} at iteration {iteration} in {mode.name}: {detail}")
