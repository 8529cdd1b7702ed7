"""The JSON transition log: names, keys, rank and iteration on every line, sampling."""

from __future__ import annotations

import io
import json

import pytest

from specfsm import (
    Event,
    Mode,
    ModeActionError,
    Observation,
    SpecFSM,
    ThresholdPolicy,
    TransitionLog,
    json_logger,
)
from specfsm.fsm.testing import RecordingActions, capture_transitions, capturing_log


def test_transition_line_fields() -> None:
    """A transition line carries ts, src, dst, trigger, reason, bs, inputs, durations, rank."""
    buf = io.StringIO()
    fsm = SpecFSM(
        ThresholdPolicy(high=4, low=1, debounce=1, min_dwell=0),
        RecordingActions(),
        log=TransitionLog(json_logger(buf), rank=3),
    )
    fsm.step(Observation(iteration=42, decode_bs=9, running=9, accept_lens=(2, 3), mean_ctx=700))
    lines = [json.loads(x) for x in buf.getvalue().splitlines()]
    assert len(lines) == 1
    line = lines[0]
    assert line["event"] == "specfsm.transition"
    assert (line["rank"], line["iteration"], line["src"], line["dst"], line["trigger"]) == (
        3,
        42,
        "SPECULATING",
        "DRAINING",
        "LOAD_HIGH",
    )
    assert line["bs"] == 9 and line["accept_lens"] == [2, 3] and line["mean_ctx"] == 700
    assert "high=4" in line["reason"]
    assert line["exit_us"] >= 0 and line["enter_us"] >= 0
    assert isinstance(line["ts"], float)


def test_action_failed_line() -> None:
    """A failing action produces action_failed with the error, then the FAULT transition."""
    log, lines = capturing_log(rank=1)
    fsm = SpecFSM(actions=RecordingActions(fail={"enter_draining": 1}), log=log)
    with pytest.raises(ModeActionError):
        fsm.process_event(Event.LOAD_HIGH)
    names = [x["event"] for x in lines]
    assert names == ["specfsm.action_failed", "specfsm.transition"]
    assert lines[0]["action"] == "enter_draining" and "injected failure" in lines[0]["error"]
    assert lines[1]["trigger"] == "FAULT" and lines[1]["src"] == "DRAINING"
    assert all(x["rank"] == 1 for x in lines)


def test_observation_sampling() -> None:
    """observe_every=N writes one observation line per N iterations; 0 writes none."""
    log, lines = capturing_log()
    fsm = SpecFSM(log=log, observe_every=10)
    for it in range(100):
        fsm.step(Observation(iteration=it, decode_bs=1))
    obs_lines = [x for x in lines if x["event"] == "specfsm.observation"]
    assert len(obs_lines) == 10 and obs_lines[0]["mode"] == "SPECULATING"
    log2, lines2 = capturing_log()
    fsm2 = SpecFSM(log=log2)
    for it in range(100):
        fsm2.step(Observation(iteration=it, decode_bs=1))
    assert lines2 == []


def test_global_structlog_capture() -> None:
    """With no logger given, lines go through structlog's global config (capture_logs works)."""
    with capture_transitions() as entries:
        fsm = SpecFSM(initial=Mode.PLAIN)
        fsm.log.config(fsm.describe())
        fsm.process_event(Event.LOAD_LOW)
    assert [e["event"] for e in entries] == ["specfsm.config", "specfsm.transition"]
    assert entries[0]["policy"] == {"policy": "fixed", "speculate": True}
