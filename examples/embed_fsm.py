"""Embed specfsm's core in any engine loop: a toy engine with its own mode actions.

Run: python examples/embed_fsm.py
"""

from __future__ import annotations

import sys

from specfsm import (
    Event,
    Mode,
    NoopActions,
    Observation,
    SpecFSM,
    ThresholdPolicy,
    TransitionInfo,
    TransitionLog,
    json_logger,
)


class ToyEngineActions(NoopActions):
    """The engine's mode-specific state: here just the draft width attached to the batch."""

    def __init__(self) -> None:
        self.width = 4

    def enter_speculating(self, t: TransitionInfo) -> None:
        self.width = 4  # attach the K-wide state

    def enter_draining(self, t: TransitionInfo) -> None:
        self.width = 1  # no new draft; the in-flight batch finishes with its own state

    def enter_plain(self, t: TransitionInfo) -> None:
        self.width = 1  # total: valid from any partial state (the FAULT path runs only this)


def main() -> None:
    actions = ToyEngineActions()
    fsm = SpecFSM(
        ThresholdPolicy(high=16, low=4, debounce=2, min_dwell=8),
        actions,
        log=TransitionLog(json_logger(sys.stdout)),
    )
    loads = [2] * 20 + [30] * 30 + [2] * 30
    for it, bs in enumerate(loads):
        fsm.step(Observation(iteration=it, decode_bs=bs, running=bs))  # hot path
        if fsm.mode is Mode.DRAINING:  # the engine reports completion events
            fsm.process_event(Event.DRAINED, reason="in-flight batch done")
        elif fsm.mode is Mode.RESYNCING:
            fsm.process_event(Event.RESYNCED, reason="draft caught up")
    print(f"final mode {fsm.mode.name}, width {actions.width}, transitions {fsm.transitions}")


if __name__ == "__main__":
    main()
