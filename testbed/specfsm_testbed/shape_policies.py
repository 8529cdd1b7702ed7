"""Test policies that change the draft shape on a fixed rhythm (engine tests, the GPU suite).

`ShapeCycle` walks a list of targets, each held for `every` decode forwards: a shape label
("chain1", "chain5", "4,3,8") is reached by RESHAPE (from PLAIN: LOAD_LOW first, then RESHAPE once
SPECULATING), "PLAIN" by LOAD_HIGH. A pure function of the iteration, so TP ranks agree. Named in a
policy spec as ``{"name": "specfsm_testbed.shape_policies:ShapeCycle", "targets": [...],
"every": 3}``.
"""

from __future__ import annotations

from collections.abc import Sequence

from specfsm import Event, Mode, Observation
from specfsm.fsm.table import toward_shape
from specfsm.model.acceptance import DraftShape, parse_shape


class ShapeCycle:
    """Targets (shape labels or "PLAIN"), each held for `every` iterations, in a cycle."""

    def __init__(self, targets: Sequence[str], every: int = 3) -> None:
        if not targets or every < 1:
            raise ValueError("ShapeCycle: need at least one target and every >= 1")
        self.targets: list[DraftShape | None] = [
            None if str(t).upper() == "PLAIN" else parse_shape(t) for t in targets
        ]
        self.labels = [str(t) for t in targets]
        self.every = int(every)
        self.last_reason = ""
        self.next_shape: DraftShape | None = None

    def decide(self, mode: Mode, obs: Observation) -> Event | None:
        i = (obs.iteration // self.every) % len(self.targets)
        want = self.targets[i]
        ev = toward_shape(mode, obs.shape, want)
        if ev is Event.RESHAPE:
            self.next_shape = want
        if ev is not None:
            self.last_reason = f"shape cycle: target {self.labels[i]}"
        return ev

    def describe(self) -> dict[str, object]:
        return {"policy": "shape_cycle", "targets": self.labels, "every": self.every}
