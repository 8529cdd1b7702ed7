"""The draft shapes of a recorded run (`specfsm logs replay`): the log's shape labels read back
into DraftShapes, and the shape the machine was in at each iteration (`ShapeTrack`)."""

from __future__ import annotations

import bisect
import re

import attrs

from specfsm.fsm.table import Event
from specfsm.logtools.reader import Run
from specfsm.model.acceptance import DraftShape, parse_shape

_TREE_LABEL = re.compile(r"tree\(topk=(\d+),steps=(\d+),tokens=(\d+)\)")


def shape_of(label: object) -> DraftShape | None:
    """The DraftShape of a log's shape label ("chain3", "tree(topk=4,steps=2,tokens=16)", or
    what `parse_shape` reads); None when `label` is not one."""
    if not isinstance(label, str):
        return None
    m = _TREE_LABEL.fullmatch(label.strip().replace(" ", ""))
    if m:
        return DraftShape(int(m[1]), int(m[2]), int(m[3]))
    try:
        return parse_shape(label)
    except ValueError:
        return None


@attrs.frozen
class ShapeTrack:
    """The recorded draft shape over a run: `launch` until the first RESHAPE, then each one's
    shape_to from its iteration on (`its`, ascending). `named`: the log names shapes (a
    `shape_states` config entry or a RESHAPE); False for a log written before shapes."""

    launch: DraftShape
    its: tuple[int, ...] = ()
    shapes: tuple[DraftShape, ...] = ()
    allowed: tuple[DraftShape, ...] = ()
    named: bool = False

    def at(self, iteration: int, before: bool = False) -> DraftShape:
        """The shape of the forward of `iteration` (after its RESHAPE, if any); `before=True`:
        the shape before that iteration's transitions (what its observation saw)."""
        find = bisect.bisect_left if before else bisect.bisect_right
        i = find(self.its, iteration)
        return self.shapes[i - 1] if i else self.launch


def shape_track(run: Run, default: DraftShape, launch: DraftShape | None = None) -> ShapeTrack:
    """The run's recorded shapes (see ShapeTrack). The launch shape: `launch`, else the config
    line's `shape_states.launch`, else the first RESHAPE's shape_from, else `default`.
    ValueError when a RESHAPE's shape_to is not a shape label."""
    cfg = run.config or {}
    states = cfg.get("shape_states")
    named = isinstance(states, dict)
    listed: list[DraftShape] = []
    cfg_launch = None
    if isinstance(states, dict):
        cfg_launch = shape_of(states.get("launch"))
        listed = [s for k in states if k != "launch" and (s := shape_of(k)) is not None]
    its: list[int] = []
    shapes: list[DraftShape] = []
    first_from = None
    for t in run.transitions:
        if t.data.get("trigger") != Event.RESHAPE.name:
            continue
        to = shape_of(t.data.get("shape_to"))
        if to is None:
            raise ValueError(
                f"{t.source}:{t.line}: RESHAPE at iteration {t.iteration} has no readable "
                f"shape_to ({t.data.get('shape_to')!r:.60})"
            )
        if not its:
            first_from = shape_of(t.data.get("shape_from"))
        its.append(t.iteration)
        shapes.append(to)
        named = True
    start = launch or cfg_launch or first_from or default
    allowed = tuple(dict.fromkeys([start, *listed, *shapes])) if named else ()
    return ShapeTrack(start, tuple(its), tuple(shapes), allowed, named)
