"""The glue to the `transitions` library: its machine configuration generated from the table,
the model object it drives, the per-transition scratch state its callbacks share, and its
logger's level."""

from __future__ import annotations

import logging
from typing import Any

import attrs

from specfsm.fsm.observation import Observation
from specfsm.fsm.record import TransitionRecord
from specfsm.fsm.table import SHAPE_EVENTS, TRANSITIONS, Mode


def quiet_transitions_logger() -> None:
    """Raise the `transitions` logger to WARNING unless someone configured its level.

    `transitions` logs 12 lines per transition, 4 of them at INFO; SGLang runs the root logger
    at INFO, which would cost ~40 us and flood the console per switch. Called when a SpecFSM is
    built (never at import), and an explicit level set by the application wins.
    """
    logger = logging.getLogger("transitions")
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.WARNING)


@attrs.define(slots=True)
class Pending:
    """Per-transition scratch state shared with the `transitions` callbacks."""

    info: TransitionRecord
    obs: Observation | None
    exit_us: float | None = None
    enter_us: float | None = None
    shape_us: float | None = None
    failed_action: str | None = None
    error: BaseException | None = None


class Model:
    """The object `transitions` drives; `mode` is its state attribute."""

    mode: Mode


def machine_config() -> dict[str, Any]:
    """`transitions.Machine` keyword arguments generated from TRANSITIONS (also for diagrams).

    A shape event's self-transition is internal (`dest` None: `transitions` runs no exit/enter
    callbacks for it, and its diagrams draw it as a self-loop marked internal)."""
    return {
        "states": list(Mode),
        "transitions": [
            {"trigger": event.value, "source": src, "dest": None if event in SHAPE_EVENTS else dst}
            for src, row in TRANSITIONS.items()
            for event, dst in row.items()
        ],
        "auto_transitions": False,
        "ignore_invalid_triggers": False,
        "queued": False,
    }
