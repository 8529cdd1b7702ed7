"""`specfsm logs`: another program's file is named as not a specfsm log; the summary counts the
transitions per deciding rule when the lines carry a decision (and says nothing without)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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
