"""A short simulated walk through the modes: a load ramp driven through the real SpecFSM with a
ThresholdPolicy, the engine's completion events played by a toy engine. No SGLang needed."""

from __future__ import annotations

import argparse
import sys
from typing import IO

from specfsm.cli.args import ArgParser
from specfsm.cli.main import add_command
from specfsm.fsm.log import TransitionLog, json_logger
from specfsm.fsm.machine import SpecFSM
from specfsm.fsm.observation import Observation
from specfsm.fsm.table import Event, Mode
from specfsm.fsm.testing import RecordingActions
from specfsm.policy.simple import ThresholdPolicy

GLYPH = {Mode.SPECULATING: "S", Mode.DRAINING: "d", Mode.PLAIN: ".", Mode.RESYNCING: "r"}


def load_ramp(n: int = 240, peak: int = 64) -> list[int]:
    """Batch sizes going 1 -> peak -> 1 in a triangle."""
    half = n // 2
    return [max(1, round(1 + (peak - 1) * (i if i < half else n - i) / half)) for i in range(n)]


def run(out: IO[str] = sys.stdout, log_to: IO[str] | None = None) -> list[Mode]:
    """Drive the ramp; print a timeline; return the mode per iteration."""
    actions = RecordingActions()
    fsm = SpecFSM(
        ThresholdPolicy(high=32, low=16, debounce=4, min_dwell=16),
        actions,
        log=TransitionLog(json_logger(log_to or out)),
    )
    modes: list[Mode] = []
    for it, bs in enumerate(load_ramp()):
        fsm.step(Observation(iteration=it, decode_bs=bs, running=bs))
        modes.append(fsm.mode)
        # the engine's part: a drain completes after the in-flight batch, a resync in one step
        if fsm.mode is Mode.DRAINING:
            fsm.process_event(Event.DRAINED, reason="in-flight batch processed")
        elif fsm.mode is Mode.RESYNCING:
            fsm.process_event(Event.RESYNCED, reason="draft caught up")
    print("\nmode per iteration (S speculating, d draining, . plain, r resyncing):", file=out)
    line = "".join(GLYPH[m] for m in modes)
    for i in range(0, len(line), 80):
        print(f"  {i:4d} {line[i : i + 80]}", file=out)
    print(f"actions run: {len(actions.calls)}; transitions: {fsm.transitions}", file=out)
    return modes


def main(argv: list[str]) -> int:
    ArgParser(
        prog="specfsm walkthrough", description="simulated load ramp through the real FSM"
    ).parse_args(argv)
    run()
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    add_command(
        subparsers, "walkthrough", "simulated load ramp through the FSM, with its JSON log", main
    )
