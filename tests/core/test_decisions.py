"""Every policy kind of the registry decides with a Verdict: each transition a policy made
carries a ``decision`` object on its log line (its rule, the numbers it compared), completion
lines carry none, and `specfsm logs summary` counts the decisions by rule."""

from __future__ import annotations

import json
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pytest
import structlog
from structlog.testing import LogCapture

from specfsm.fsm.log import TransitionLog, json_logger
from specfsm.fsm.machine import SpecFSM
from specfsm.fsm.observation import Observation
from specfsm.fsm.table import Event, Mode
from specfsm.logtools.reader import read_logs
from specfsm.logtools.summary import format_summary, summarize, summary_json
from specfsm.policy.registry import make_policy, with_test_policies

#: one description per registered kind; a kind added to the registry without one fails below
SPECS: dict[str, dict[str, Any]] = {
    "threshold": {"name": "threshold", "high": 32, "low": 8, "debounce": 2, "min_dwell": 4},
    "goodput": {
        "name": "goodput",
        "table": "h200_sglang0517_llama8b",
        "shape": "chain3",
        "accept_len": 2.5,
    },
    "fixed": {"name": "fixed", "speculate": False},
    "scripted": {"name": "scripted", "schedule": [[10, "PLAIN"], [60, "SPECULATING"]]},
    "every": {"name": "every", "k": 25},
    "random": {"name": "random", "seed": 3, "p": 0.5, "hold": 20},
}
#: the rule family each kind's verdicts name
FAMILY = {"every": "scripted", "random": "scripted"}
POLICY_EVENTS = {"LOAD_HIGH", "LOAD_LOW", "RESHAPE"}


def _ramp(n: int = 240, peak: int = 128) -> list[int]:
    half = n // 2
    return [max(1, round(peak * (i if i < half else n - i) / half)) for i in range(n)]


def _drive(fsm: SpecFSM) -> None:
    """The load ramp through the machine, the engine's completions played at once."""
    for it, bs in enumerate(_ramp()):
        fsm.step(Observation(iteration=it, decode_bs=bs, running=bs, accept_lens=(3,) * bs))
        if fsm.mode is Mode.DRAINING:
            fsm.process_event(Event.DRAINED, reason="drained")
        elif fsm.mode is Mode.RESYNCING:
            fsm.process_event(Event.RESYNCED, reason="resynced")


def _transition_lines(spec: dict[str, Any]) -> list[MutableMapping[str, Any]]:
    capture = LogCapture()
    log = TransitionLog(structlog.wrap_logger(None, processors=[capture]))
    _drive(SpecFSM(make_policy(spec, registry=with_test_policies()), log=log))
    return [e for e in capture.entries if e["event"] == "specfsm.transition"]


def test_every_registered_kind_has_a_spec_here() -> None:
    assert sorted(with_test_policies()) == sorted(SPECS)


@pytest.mark.parametrize("kind", sorted(SPECS))
def test_each_policy_transition_line_carries_a_decision(kind: str) -> None:
    """A line whose trigger a policy chose has ``decision`` naming that policy's rule, with
    the line's own event; DRAINED / RESYNCED lines have none."""
    lines = _transition_lines(SPECS[kind])
    decided = [e for e in lines if e["trigger"] in POLICY_EVENTS]
    assert decided, f"{kind}: the ramp made no decision"
    for e in decided:
        d = e.get("decision")
        assert isinstance(d, dict), e
        assert d["rule"].startswith(FAMILY.get(kind, kind) + "."), d
        assert d["event"] == e["trigger"] and d["bs"] == e["bs"]
        json.dumps(d)  # what the JSON renderer writes
    assert all("decision" not in e for e in lines if e["trigger"] not in POLICY_EVENTS)


def test_threshold_decision_object() -> None:
    """The threshold's decision names the signal, the observed value, the threshold it passed
    and by how much, next to the reason it always wrote."""
    lines = _transition_lines(SPECS["threshold"])
    high = next(e for e in lines if e["trigger"] == "LOAD_HIGH")
    assert high["reason"] == f"decode_bs={high['bs']} > high=32 for 2 iterations"
    d = high["decision"]
    assert (d["rule"], d["signal"], d["threshold"], d["bound"]) == (
        "threshold.high_bs",
        "decode_bs",
        32,
        "observed",
    )
    assert d["observed"] == high["bs"] and d["margin"] == high["bs"] - 32 > 0
    assert (d["chosen"], d["shape"], d["predicted_tok_s"]) == ("plain", None, {})
    low = next(e for e in lines if e["trigger"] == "LOAD_LOW")["decision"]
    assert (low["rule"], low["threshold"]) == ("threshold.low_bs", 8)
    assert low["margin"] == 8 - low["observed"] >= 0


def test_summary_counts_simple_decisions_by_rule(tmp_path: Path) -> None:
    """A threshold run's log, summarized: its transitions counted under their rules."""
    path = tmp_path / "threshold.jsonl"
    with path.open("w") as f:
        fsm = SpecFSM(make_policy(SPECS["threshold"]), log=TransitionLog(json_logger(f)))
        _drive(fsm)
    stats = summarize(read_logs([str(path)]))
    by_rule = summary_json(stats)["overall"]["verdicts_by_rule"]
    assert by_rule == {"threshold.high_bs": 1, "threshold.low_bs": 1}
    assert "threshold.high_bs 1, threshold.low_bs 1" in format_summary(stats)
