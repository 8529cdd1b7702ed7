"""The start-up profile's pure parts: the schedule it drives the machine with, the cost-table
rows made of what it measured, and the record of a finished profile. No SGLang here: the driver
that runs them inside the engine is `specfsm_sglang.profile` (its docstring: the theory of
operation); the controller's switchboard prices the policy with the rows (`seed_calibration`).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import attrs

from specfsm import Event, Mode, Observation
from specfsm.fsm.table import toward_shape
from specfsm.model.acceptance import DraftShape
from specfsm.model.costs import (
    COLUMNS,
    PLAIN_STEP_MODEL,
    PLAIN_WARM_MODEL,
    SPEC_STEP_PREFIX,
    spec_step_model,
    step_model_shape,
)
from specfsm.policy.goodput import STEP_PLAIN, STEP_SPEC, STEP_WARM

#: A phase that has not finished after this many decode forwards per target is cut short.
MAX_FORWARDS_PER_TARGET = 64


# ------------------------------------------------------------------------------ the schedule
class ProfileSchedule:
    """The profile's policy: per phase (one batch size) hold each target until it measured
    `forwards` decode forwards at that batch size, then come home to the launch shape in
    SPECULATING; `phase_done` then asks the driver to end the phase. Targets: the launch shape,
    the other shapes, the launch shape again (RESHAPE), PLAIN (None). A pure function of what it
    observed (iterations, batch sizes, modes): TP ranks decide alike."""

    def __init__(
        self, home: DraftShape, shapes: Sequence[DraftShape], forwards: int, plain_kind: str
    ) -> None:
        self.home = home
        others = [s for s in shapes if s != home]
        self.targets: list[DraftShape | None] = [home, *others, None]
        self.forwards = forwards
        self.plain_kind = plain_kind
        self.next_shape: DraftShape | None = None
        self.last_reason = ""
        #: (kind, shape or None, bs) -> measured ms (the first forward after a change left out)
        self.samples: dict[tuple[str, DraftShape | None, int], list[float]] = {}
        self.bs = 0
        self.phase_done = True
        self._i = 0
        self._run: tuple[str, DraftShape | None, int] | None = None
        self._forwards = 0

    def start(self, bs: int) -> None:
        """A new phase at batch size `bs`."""
        self.bs = bs
        self.phase_done = False
        self._i = 0
        self._run = None
        self._forwards = 0

    def _key(self, want: DraftShape | None) -> tuple[str, DraftShape | None, int]:
        return ("spec", want, self.bs) if want is not None else (self.plain_kind, None, self.bs)

    def _record(self, obs: Observation) -> None:
        if obs.step_ms <= 0.0 or obs.step_bs <= 0:
            self._run = None
            return
        key = (obs.step_kind, obs.step_shape, obs.step_bs)
        if key != self._run:  # the first forward after a change: not counted
            self._run = key
            return
        self.samples.setdefault(key, []).append(obs.step_ms)

    def decide(self, mode: Mode, obs: Observation) -> Event | None:
        if self.phase_done:
            return None
        self._record(obs)
        self._forwards += 1
        if self._forwards > MAX_FORWARDS_PER_TARGET * len(self.targets):
            self._i = len(self.targets)  # cut short: come home
        while self._i < len(self.targets):
            if len(self.samples.get(self._key(self.targets[self._i]), ())) < self.forwards:
                break
            self._i += 1
        want = self.targets[self._i] if self._i < len(self.targets) else self.home
        ev = toward_shape(mode, obs.shape, want)
        if ev is Event.RESHAPE:
            self.next_shape = want
        if ev is None and self._i >= len(self.targets) and mode is Mode.SPECULATING:
            self.phase_done = True
        if ev is not None:
            label = "PLAIN" if want is None else want.label()
            self.last_reason = f"start-up profile: bs={self.bs}, target {label}"
        return ev

    def describe(self) -> dict[str, object]:
        return {
            "policy": "startup_profile",
            "targets": ["PLAIN" if t is None else t.label() for t in self.targets],
            "forwards": self.forwards,
        }


# ------------------------------------------------------------------------------ the rows
#: The cost-table model of each measured PLAIN step kind (`Observation.step_kind`).
OFF_STEP_MODELS = {STEP_PLAIN: PLAIN_STEP_MODEL, STEP_WARM: PLAIN_WARM_MODEL}


def profile_rows(
    samples: dict[tuple[str, DraftShape | None, int], list[float]], ctx: int
) -> list[tuple[str, int, int, int, float]]:
    """Cost-table rows (`specfsm.model.costs.COLUMNS`) from the schedule's samples: the median
    per (kind, shape, bs); kinds the table format has no model for (RESYNCING's) are left out."""
    rows: list[tuple[str, int, int, int, float]] = []
    for (kind, shape, bs), ms in sorted(samples.items(), key=lambda kv: _sort_key(kv[0])):
        if not ms:
            continue
        med = round(statistics.median(ms), 4)
        if kind == STEP_SPEC and shape is not None:
            rows.append((spec_step_model(shape), bs, shape.draft_tokens, ctx, med))
        elif kind in OFF_STEP_MODELS:
            rows.append((OFF_STEP_MODELS[kind], bs, 1, ctx, med))
    return rows


def seed_calibration(policy: Any, rows: Sequence[tuple[str, int, int, int, float]]) -> int:
    """Mark every profiled (kind, shape, bs) as measured in a calibrating goodput policy (its
    ``calibration``, factor 1: the rows are its prior now), so it does not spend iterations
    probing what the profile measured; returns the points seeded (0: nothing to seed)."""
    cal = getattr(policy, "calibration", None)
    if cal is None:
        return 0
    off_kinds = {m: k for k, m in OFF_STEP_MODELS.items()}
    n = 0
    for model, bs, _q, _ctx, _ms in rows:
        if model.startswith(SPEC_STEP_PREFIX):
            shape = step_model_shape(model)
            if shape is not None:
                cal.observe(STEP_SPEC, shape, bs, 1.0)
                n += 1
        elif model in off_kinds:
            cal.observe(off_kinds[model], None, bs, 1.0)
            n += 1
    return n


def _sort_key(key: tuple[str, DraftShape | None, int]) -> tuple[str, int, int, int, int]:
    kind, s, bs = key
    return (kind, s.topk if s else 0, s.steps if s else 0, s.draft_tokens if s else 0, bs)


def rows_csv(rows: Sequence[tuple[str, int, int, int, float]], header: Sequence[str]) -> str:
    lines = [f"# {h}" for h in header]
    lines.append(",".join(COLUMNS))
    lines += [f"{m},{bs},{q},{ctx},{ms}" for m, bs, q, ctx, ms in rows]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------ the result
@attrs.frozen
class ProfileResult:
    """What the profile measured: rows, where they were written, per-phase notes, seconds."""

    rows: list[tuple[str, int, int, int, float]]
    path: str
    phases: list[dict[str, object]]
    skipped: list[str]
    seconds: float
    ctx: int
