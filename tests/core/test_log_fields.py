"""Observation lines say what they mean: the accept lengths' round and staleness, mean_ctx only
when measured, control lines placed at their iteration."""

from __future__ import annotations

import io
import json

from specfsm import (
    Event,
    Mode,
    Observation,
    SpecFSM,
    ThresholdPolicy,
    TransitionLog,
    json_logger,
)
from specfsm.fsm.testing import RecordingActions


def _lines(buf: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(x) for x in buf.getvalue().splitlines()]


def test_accept_lens_round_and_staleness() -> None:
    """While SPECULATING the accept lengths are current and name their round; in PLAIN and in
    SPECULATING before a new K-wide round they are marked stale; mean_ctx 0 is not written."""
    buf = io.StringIO()
    log = TransitionLog(json_logger(buf), rank=1)
    fsm = SpecFSM(
        ThresholdPolicy(high=4, low=1, debounce=1, min_dwell=0),
        RecordingActions(),
        log=log,
        observe_every=1,
    )
    log.accept_lens_iteration = 9
    fsm.step(Observation(iteration=10, decode_bs=2, accept_lens=(3, 2)))  # SPECULATING
    fsm.step(Observation(iteration=11, decode_bs=9, accept_lens=(3, 2)))  # -> DRAINING
    fsm.process_event(Event.DRAINED, Observation(iteration=11, decode_bs=9), "drained")
    fsm.step(Observation(iteration=12, decode_bs=9, accept_lens=(3, 2)))  # PLAIN
    fsm.step(Observation(iteration=13, decode_bs=0, accept_lens=(3, 2)))  # -> RESYNCING
    fsm.process_event(Event.RESYNCED, Observation(iteration=14, decode_bs=0), "caught up")
    fsm.step(Observation(iteration=15, decode_bs=2, accept_lens=(3, 2)))  # old round
    log.accept_lens_iteration = 15
    fsm.step(Observation(iteration=16, decode_bs=2, accept_lens=(4, 4)))  # new round
    obs = {x["iteration"]: x for x in _lines(buf) if x["event"] == "specfsm.observation"}
    assert obs[10]["accept_lens_iteration"] == 9 and obs[10]["accept_lens_stale"] is False
    assert obs[12]["mode"] == "PLAIN" and obs[12]["accept_lens_stale"] is True
    assert obs[15]["mode"] == "SPECULATING" and obs[15]["accept_lens_stale"] is True
    assert obs[16]["accept_lens_stale"] is False and obs[16]["accept_lens_iteration"] == 15
    assert all("mean_ctx" not in x for x in _lines(buf))
    trans = [x for x in _lines(buf) if x["event"] == "specfsm.transition" and "bs" in x]
    assert trans and trans[0]["src"] == "SPECULATING" and trans[0]["accept_lens_stale"] is False


def test_empty_accept_lens_and_measured_ctx() -> None:
    """No accept lengths: no round fields; a measured mean_ctx is written."""
    buf = io.StringIO()
    log = TransitionLog(json_logger(buf))
    log.observation(Observation(iteration=3, decode_bs=2, mean_ctx=512), Mode.PLAIN)
    (line,) = _lines(buf)
    assert line["accept_lens"] == [] and line["mean_ctx"] == 512
    assert "accept_lens_iteration" not in line and "accept_lens_stale" not in line


def test_config_line_iteration() -> None:
    """Start-up config lines are at iteration 0; a control change carries its iteration."""
    buf = io.StringIO()
    log = TransitionLog(json_logger(buf))
    log.config({"policy": "x"})
    log.config({"control": "applied"}, iteration=77)
    assert [x["iteration"] for x in _lines(buf)] == [0, 77]
