"""The one record of a transition, from the moment the table accepts it to its listeners.

The machine builds it when `process_event` accepts an event (timings not yet known) and hands
that to the mode actions; once both actions ran it hands listeners (metrics, timelines) the same
record with the actions' timings and the completion time filled in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from specfsm.fsm.table import Event, Mode

if TYPE_CHECKING:
    from specfsm.fsm.verdict import Verdict
    from specfsm.model.acceptance import DraftShape


@attrs.frozen(slots=True)
class TransitionRecord:
    """One transition src -> dst by `event` at `iteration`.

    `exit_us`, `enter_us` (how long each action ran; None when it did not run) and
    `monotonic_s` (when the transition completed) are filled only in the copy listeners get.
    `shape` is the target shape of a shape event (RESHAPE), `prev_shape` the shape it replaces;
    both None for every other event. `verdict` is the policy's decision when it gave one (None:
    a bare Event, a completion event, a fault).
    """

    iteration: int
    src: Mode
    dst: Mode
    event: Event
    reason: str = ""
    exit_us: float | None = None
    enter_us: float | None = None
    monotonic_s: float = 0.0
    shape: DraftShape | None = None
    prev_shape: DraftShape | None = None
    verdict: Verdict | None = None


#: The name the mode actions' parameter had before the records were merged (same class).
TransitionInfo = TransitionRecord
