"""The one record of a transition, from the moment the table accepts it to its listeners.

The machine builds it when `process_event` accepts an event (timings not yet known) and hands
that to the mode actions; once both actions ran it hands listeners (metrics, timelines) the same
record with the actions' timings and the completion time filled in.
"""

from __future__ import annotations

import attrs

from specfsm.fsm.table import Event, Mode


@attrs.frozen(slots=True)
class TransitionRecord:
    """One transition src -> dst by `event` at `iteration`.

    `exit_us`, `enter_us` (how long each action ran; None when it did not run) and
    `monotonic_s` (when the transition completed) are filled only in the copy listeners get.
    """

    iteration: int
    src: Mode
    dst: Mode
    event: Event
    reason: str = ""
    exit_us: float | None = None
    enter_us: float | None = None
    monotonic_s: float = 0.0


#: The name the mode actions' parameter had before the records were merged (same class).
TransitionInfo = TransitionRecord
