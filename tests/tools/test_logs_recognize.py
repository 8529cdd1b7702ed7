"""`specfsm logs`: another program's file is named as not a specfsm log; malformed and truncated
lines are named and counted; the summary counts the transitions per deciding rule when the lines
carry a decision (and says nothing without), failed actions and policy faults, and catch-ups."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from _log_lines import flap_lines, line, run_cli, trans

from specfsm.cli.main import main
from specfsm.logtools.reader import read_logs
from specfsm.logtools.summary import format_summary, summarize, summary_json


def test_foreign_file_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "server.log"
    f.write_text('[2026-12-01 10:00:00] INFO started\n{"level": "info", "msg": "x"}\n\n')
    for cmd in (["logs", "summary"], ["logs", "replay", "--policy", "fixed:speculate=true"]):
        assert main([*cmd, str(f)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].endswith(
            f"{f}: not a specfsm log (no line is a specfsm.* event; specfsm writes its log "
            "where the config key log or SPECFSM_LOG says)"
        ), err


def _line(it: int, src: str, dst: str, trigger: str, **extra: object) -> str:
    return json.dumps(
        {
            "event": "specfsm.transition",
            "rank": 0,
            "iteration": it,
            "ts": float(it),
            "src": src,
            "dst": dst,
            "trigger": trigger,
            "reason": "r",
            "bs": 4,
            **extra,
        }
    )


def test_verdicts_by_rule(tmp_path: Path) -> None:
    f = tmp_path / "t.jsonl"
    lines = [
        _line(
            5,
            "SPECULATING",
            "DRAINING",
            "LOAD_HIGH",
            decision={"rule": "goodput", "event": "LOAD_HIGH", "margin": 0.02},
        ),
        _line(5, "DRAINING", "PLAIN", "DRAINED"),
        _line(9, "PLAIN", "RESYNCING", "LOAD_LOW", decision={"rule": "probe"}),
        _line(10, "RESYNCING", "SPECULATING", "RESYNCED"),
        _line(20, "SPECULATING", "DRAINING", "LOAD_HIGH", decision={"rule": "goodput"}),
    ]
    f.write_text("\n".join(lines) + "\n")
    s = summarize(read_logs([str(f)]))
    text = format_summary(s)
    assert "verdicts by rule (3 transitions with a decision): goodput 2, probe 1" in text
    assert summary_json(s)["overall"]["verdicts_by_rule"] == {"goodput": 2, "probe": 1}
    f.write_text("\n".join(_line(i, "SPECULATING", "DRAINING", "LOAD_HIGH") for i in (1, 2)))
    assert "verdicts by rule" not in format_summary(summarize(read_logs([str(f)])))


#: A real engine's log: the specfsm server of an H200 serving run (SGLang 0.5.17, the goodput
#: policy and the threshold policy of the GPU example, switched through the control file)
H200_LOG = (
    Path(__file__).resolve().parents[2]
    / "benchmarks/gpu/results/2026-12-02_serving_prefill/specfsm_transitions-rank0.jsonl"
)


def test_verdicts_by_rule_on_a_real_engine_log() -> None:
    """The summary counts the H200 server's transitions by deciding rule, and a decision line
    carries the numbers it was taken on (the burst met before a prefill, priced at bs 256)."""
    rank = summary_json(summarize(read_logs([str(H200_LOG)])))["ranks"][0]
    assert rank["verdicts_by_rule"] == {
        "goodput.onoff-plain": 10,
        "goodput.onoff-speculate": 10,
        "threshold.high_bs": 9,
        "threshold.low_bs": 9,
    }
    text = format_summary(summarize(read_logs([str(H200_LOG)])))
    assert "verdicts by rule (38 transitions with a decision): goodput.onoff-plain 10" in text
    first = next(
        json.loads(line)
        for line in H200_LOG.read_text().splitlines()
        if '"decision"' in line and '"iteration":332,' in line
    )
    assert first["prefill_tokens"] == 8192 and first["queued"] == 199
    decision = first["decision"]
    assert decision["rule"] == "goodput.onoff-plain" and decision["bs"] == 256
    assert decision["predicted_tok_s"] == {"plain": 14041.6, "chain3": 8784.2}


def test_malformed_named_and_counted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Bad lines are named by file and line and fail the run unless --lenient; none is lost."""
    f = tmp_path / "bad.jsonl"
    good = flap_lines(0)
    bad = [
        good[0],
        "{not json",
        good[1],
        json.dumps(
            {
                "event": "specfsm.transition",
                "rank": 0,
                "iteration": 4,
                "src": "FAST",
                "dst": "PLAIN",
                "trigger": "LOAD_HIGH",
            }
        ),
        "[1, 2]",
        good[2],
        json.dumps({"event": "specfsm.something_new", "rank": 0, "iteration": 4}),
        *good[3:],
    ]
    f.write_text("\n".join(bad) + "\n")
    rc, out, err = run_cli(capsys, "logs", "summary", str(f))
    assert rc == 1
    assert f"{f}:2: not JSON" in out and f"{f}:4: specfsm.transition: 'src' is not a mode" in out
    assert f"{f}:5: not a JSON object" in out
    assert "skipped: 3 (malformed 3," in out and "unknown events ignored: 1" in out
    assert f"3 malformed line(s), first: {f}:2: not JSON" in err
    rc, out, err = run_cli(capsys, "logs", "summary", "--lenient", str(f))
    assert rc == 0 and "transitions: 2 (" in out
    png = tmp_path / "x.png"
    rc, _, err = run_cli(capsys, "logs", "timeline", str(f), "-o", str(png))
    assert rc == 2 and err.count("\n") == 1 and f"{f}:2: not JSON" in err


def test_truncated_last_line_tolerated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer killed mid-line: the last line is counted and named, exit 0; stdin works."""
    text = "\n".join(flap_lines(0)) + "\n" + trans(0, 9, "PLAIN", "RESYNCING", "LOAD_LOW")[:40]
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    rc, out, err = run_cli(capsys, "logs", "summary", "-")
    assert rc == 0, err
    assert "truncated last line 1" in out and "<stdin>:6: truncated last line (tolerated)" in out
    assert "transitions: 2 (" in out


def test_failures_from_a_real_machine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A log written by SpecFSM itself with a failing action and a faulting policy: the summary
    lists the failed action with its error and the policy faults with their counts."""
    from specfsm import Event, Observation, SpecFSM, TransitionLog, json_logger
    from specfsm.fsm.errors import ModeActionError
    from specfsm.fsm.testing import RecordingActions
    from specfsm.policy import FixedPolicy

    class Broken:
        last_reason = ""

        def decide(self, mode: Any, obs: Any) -> Any:
            raise ZeroDivisionError("division by zero")

        def describe(self) -> dict[str, object]:
            return {"policy": "broken"}

    path = tmp_path / "fsm.jsonl"
    log = TransitionLog(json_logger(path), rank=0)
    fsm = SpecFSM(FixedPolicy(True), RecordingActions(fail={"enter_draining": 1}), log=log)
    log.config(fsm.describe())
    with pytest.raises(ModeActionError):
        fsm.process_event(Event.LOAD_HIGH, Observation(iteration=1, decode_bs=4), "test")
    fsm.policy = FixedPolicy(True)
    fsm.step(Observation(iteration=2, decode_bs=4))  # PLAIN -> RESYNCING
    fsm.policy = Broken()
    for it in range(3, 6):
        fsm.step(Observation(iteration=it, decode_bs=4))
    rc, out, err = run_cli(capsys, "logs", "summary", str(path))
    assert rc == 0, err
    assert "failed actions: 1" in out
    assert "iteration 1 enter_draining: RuntimeError: injected failure in enter_draining" in out
    assert "policy faults: 3, replaced: 1" in out
    assert "broken (3/3): raised ZeroDivisionError: division by zero" in out
    assert "FAULT: policy broken failed: raised ZeroDivisionError: division by zero" in out
    # the failed SPECULATING->DRAINING is not logged; its FAULT (from DRAINING) reveals it
    assert "mode changes not in the log: 1 (1 at a failed action, 0 unexplained)" in out


def test_summary_counts_catchups(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Zero-tax RESYNCING's specfsm.catchup lines are known events, summed in the summary
    (count, lag tokens, requests, ms, requests past the lag buffer), text and JSON."""
    lines = [
        *flap_lines(0, extra=True),
        line(
            "specfsm.catchup", 0, 7, 107.0, rows=3, tokens=12, ms=1.5, overflow_rows=3, done=False
        ),
        line("specfsm.catchup", 0, 8, 108.0, rows=4, tokens=7, ms=2.0, overflow_rows=1, done=True),
        trans(0, 9, "RESYNCING", "SPECULATING", "RESYNCED"),
    ]
    log = tmp_path / "t.jsonl"
    log.write_text("\n".join(lines) + "\n")
    rc, out, _ = run_cli(capsys, "logs", "summary", str(log))
    assert rc == 0 and "unknown events ignored: 0" in out
    assert "catch-ups (zero-tax RESYNCING): 2, 19 lag tokens of 7 requests, 3.5 ms" in out
    rc, out, _ = run_cli(capsys, "logs", "summary", "--json", str(log))
    assert json.loads(out)["ranks"][0]["catchups"] == {
        "count": 2,
        "tokens": 19,
        "requests": 7,
        "ms_total": 3.5,
        "ms_max": 2.0,
        "overflow_requests": 4,
    }
