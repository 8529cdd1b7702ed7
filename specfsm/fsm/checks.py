"""The machine's check of a RESHAPE's shape: a valid new shape, or InvalidShape."""

from __future__ import annotations

from specfsm.fsm.errors import InvalidShape
from specfsm.fsm.table import SHAPE_EVENTS, Event, Mode
from specfsm.model.acceptance import DraftShape


def check_new_shape(
    mode: Mode,
    event: Event,
    shape: object,
    allowed: tuple[DraftShape, ...],
    current: DraftShape | None,
) -> None:
    """Raise InvalidShape unless `shape` is a valid new shape for shape event `event`: a
    DraftShape, among `allowed` (when not empty), other than `current`."""
    if event not in SHAPE_EVENTS:
        raise InvalidShape(mode, event, f"a shape ({shape!r:.80}) goes only with RESHAPE")
    if shape is None:
        raise InvalidShape(mode, event, "RESHAPE needs the new shape (shape=DraftShape(...))")
    if not isinstance(shape, DraftShape):
        raise InvalidShape(mode, event, f"the shape must be a DraftShape, got {shape!r:.80}")
    if allowed and shape not in allowed:
        raise InvalidShape(
            mode,
            event,
            f"shape {shape.label()} is not one of the allowed shapes "
            f"{[x.label() for x in allowed]}",
        )
    if shape == current:
        raise InvalidShape(mode, event, f"shape {shape.label()} is already the current one")
