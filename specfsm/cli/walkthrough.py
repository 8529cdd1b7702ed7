"""A short simulated walk through the modes: a load ramp driven through the real SpecFSM with a
ThresholdPolicy for on/off and a draft shape chosen by load inside SPECULATING (a deep chain at
small batches, a shallow one above `SHALLOW_ABOVE`: RESHAPE, the SPECULATING self-transition),
the engine's completion events played by a toy engine. No SGLang needed."""

from __future__ import annotations

import argparse
import sys
from typing import IO

from specfsm.cli.args import ArgParser, add_command
from specfsm.fsm.log import TransitionLog, json_logger
from specfsm.fsm.machine import SpecFSM, TransitionRecord
from specfsm.fsm.observation import Observation
from specfsm.fsm.table import Event, Mode
from specfsm.fsm.testing import RecordingActions
from specfsm.fsm.verdict import Verdict, rule_verdict
from specfsm.model.acceptance import DraftShape
from specfsm.policy.simple import ThresholdPolicy

#: the launch shape (small batches) and the one SPECULATING switches to above SHALLOW_ABOVE
DEEP = DraftShape.chain(5)
SHALLOW = DraftShape.chain(2)
SHALLOW_ABOVE = 8

GLYPH = {Mode.SPECULATING: "S", Mode.DRAINING: "d", Mode.PLAIN: ".", Mode.RESYNCING: "r"}


class LoadShapePolicy:
    """On/off from a ThresholdPolicy; inside SPECULATING, RESHAPE to the shallow shape once the
    decode batch stays above `above` for `debounce` iterations, back to the deep one once it
    stays at or below it (the shape is kept across PLAIN). Its RESHAPE verdicts are rules
    ``walkthrough.shallow`` / ``walkthrough.deep`` on decode_bs against `above`."""

    def __init__(self, onoff: ThresholdPolicy, above: int = SHALLOW_ABOVE, debounce: int = 4):
        self.onoff = onoff
        self.above = above
        self.debounce = debounce
        self.next_shape: DraftShape | None = None
        self.last_reason = ""
        self._streak = 0

    def decide(self, mode: Mode, obs: Observation) -> Verdict | None:
        v = self.onoff.decide(mode, obs)
        if v is not None or mode is not Mode.SPECULATING:
            self.last_reason = self.onoff.last_reason
            self._streak = 0
            return v
        bs = obs.decode_bs
        shallow = bs > self.above
        want = SHALLOW if shallow else DEEP
        self._streak = self._streak + 1 if want != obs.shape else 0
        if self._streak < self.debounce:
            return None
        self._streak = 0
        self.next_shape = want
        cmp = ">" if shallow else "<="
        self.last_reason = reason = f"decode_bs={bs} {cmp} {self.above}: {want.label()}"
        return rule_verdict(
            Event.RESHAPE,
            "walkthrough.shallow" if shallow else "walkthrough.deep",
            reason,
            obs,
            shape=want,
            signal="decode_bs",
            observed=bs,
            threshold=self.above,
            margin=bs - self.above if shallow else self.above - bs,
        )

    def describe(self) -> dict[str, object]:
        return {
            **self.onoff.describe(),
            "shapes": [DEEP.label(), SHALLOW.label()],
            "shallow_above": self.above,
        }


def load_ramp(n: int = 240, peak: int = 64) -> list[int]:
    """Batch sizes going 1 -> peak -> 1 in a triangle."""
    half = n // 2
    return [max(1, round(1 + (peak - 1) * (i if i < half else n - i) / half)) for i in range(n)]


def run(out: IO[str] = sys.stdout, log_to: IO[str] | None = None) -> list[Mode]:
    """Drive the ramp; print a timeline; return the mode per iteration."""
    actions = RecordingActions()
    fsm = SpecFSM(
        LoadShapePolicy(ThresholdPolicy(high=32, low=16, debounce=4, min_dwell=16)),
        actions,
        log=TransitionLog(json_logger(log_to or out)),
        shapes=(DEEP, SHALLOW),
        shape=DEEP,
    )
    reshapes: list[TransitionRecord] = []
    fsm.listeners.append(lambda r: reshapes.append(r) if r.event is Event.RESHAPE else None)
    modes: list[Mode] = []
    glyphs: list[str] = []
    for it, bs in enumerate(load_ramp()):
        fsm.step(Observation(iteration=it, decode_bs=bs, running=bs, shape=fsm.shape))
        modes.append(fsm.mode)
        glyphs.append("s" if fsm.mode is Mode.SPECULATING and fsm.shape == SHALLOW else "")
        # the engine's part: a drain completes after the in-flight batch, a resync in one step
        if fsm.mode is Mode.DRAINING:
            fsm.process_event(Event.DRAINED, reason="in-flight batch processed")
        elif fsm.mode is Mode.RESYNCING:
            fsm.process_event(Event.RESYNCED, reason="draft caught up")
    print(
        f"\nmode per iteration (S speculating at {DEEP.label()}, s at {SHALLOW.label()}, "
        "d draining, . plain, r resyncing):",
        file=out,
    )
    line = "".join(g or GLYPH[m] for g, m in zip(glyphs, modes, strict=True))
    for i in range(0, len(line), 80):
        print(f"  {i:4d} {line[i : i + 80]}", file=out)
    shapes = "; ".join(
        f"{r.prev_shape.label() if r.prev_shape else '?'} -> {r.shape.label() if r.shape else '?'}"
        f" at {r.iteration}"
        for r in reshapes
    )
    print(
        f"actions run: {len(actions.calls)}; transitions: {fsm.transitions}; "
        f"RESHAPE: {shapes or 'none'}",
        file=out,
    )
    return modes


def main(argv: list[str]) -> int:
    ArgParser(
        prog="specfsm walkthrough",
        description="simulated load ramp through the real FSM: on/off and a shape change",
    ).parse_args(argv)
    run()
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    add_command(
        subparsers,
        "walkthrough",
        "simulated load ramp through the FSM (on/off, RESHAPE), with its JSON log",
        main,
    )
