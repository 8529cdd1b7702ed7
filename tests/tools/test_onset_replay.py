"""benchmarks/serving/onset_replay.py: a served run's iterations, rebuilt from its iteration trace
and transition log, through a policy of today's code: the logged spec reproduces the recorded
switch, a variant moves it, and a replayed switch the run did not make is counted."""

from __future__ import annotations

import io
import json
import sys
import tarfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "serving"))

import onset_replay

T0 = 1_000.0
THRESHOLD = {"name": "threshold", "high": 18, "low": 17, "debounce": 4, "min_dwell": 0}


def _iter_rows() -> list[list[Any]]:
    """Decodes at bs 4 (10 ms apart), then a burst: 3000-token prefills 80 ms apart, each
    adding two requests (decode_bs 20 after the first)."""
    rows: list[list[Any]] = [[T0 + 0.01 * i, "D", 4, 0, 0, 4, 9000] for i in range(100)]
    t = T0 + 1.0
    for k in range(8):
        rows.append([t, "E", 2, 3000, 1, 18 + 2 * k, 8000])
        t += 0.08
    return rows


def _log(switch_at: float | None) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = [
        {"event": "specfsm.config", "ts": T0 - 5.0, "iteration": 0, "policy": {"policy": "fixed"}},
        {"event": "specfsm.config", "ts": T0 - 1.0, "request": {"policy": THRESHOLD}},
    ]
    if switch_at is not None:
        lines.append(
            {
                "event": "specfsm.transition",
                "ts": switch_at,
                "src": "SPECULATING",
                "dst": "DRAINING",
                "trigger": "LOAD_HIGH",
                "bs": 26,
            }
        )
    return lines


def _tgz(path: Path, log: list[dict[str, Any]]) -> Path:
    files = {
        "./specfsm/transitions-rank0.jsonl": "".join(json.dumps(x) + "\n" for x in log),
        "./iters/specfsm/iter-7.jsonl": "".join(json.dumps(r) + "\n" for r in _iter_rows()),
    }
    with tarfile.open(path, "w:gz") as tf:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def _runs(path: Path) -> Path:
    run = {"server": "specfsm_example", "trace": "bursty", "rep": 0, "t0": T0, "tok_s": 100.0}
    path.write_text(json.dumps({"started": "x"}) + "\n" + json.dumps(run) + "\n")
    return path


def test_the_logged_spec_reproduces_the_switch_and_a_variant_moves_it(
    tmp_path: Path, capsys: Any
) -> None:
    # the recorded switch: decided inside the iteration of the 4th prefill past high (decode_bs
    # 24, launched at 1.24 s), before its forward
    tgz = _tgz(tmp_path / "t.tgz", _log(T0 + 1.2401))
    argv = ["--runs", str(_runs(tmp_path / "runs.jsonl")), "--tgz", str(tgz), "--window-s", "3"]
    onset_replay.main(
        [
            *argv,
            "--variant",
            "prefill_debounce=false",
            "--variant",
            "threshold:prefill_debounce=true",
        ]
    )
    out = capsys.readouterr().out
    line = next(s for s in out.splitlines() if s.startswith("  SPECULATING->DRAINING"))
    assert "at 1.24 s (bs 26)" in line
    # counted one iteration each, the 4th prefill past high=18; counted as its ~12 decode
    # steps, the 1st: 0.24 s earlier, the 2nd and 3rd prompts not prefilled while SPECULATING
    assert "prefill_debounce=false 1.24 (+0.00 s, 0 prompt tokens)" in line
    assert "prefill_debounce=true 1.00 (-0.24 s, 6000 prompt tokens)" in line
    summary = "summary[threshold][prefill_debounce=true]: 1 of 1 recorded switches replayed"
    assert f"{summary}, 0.24 s earlier" in out
    assert "0 switches the runs did not make" in out


def test_a_switch_the_run_did_not_make_is_counted(tmp_path: Path, capsys: Any) -> None:
    tgz = _tgz(tmp_path / "t.tgz", _log(None))
    runs = _runs(tmp_path / "runs.jsonl")
    onset_replay.main(["--runs", str(runs), "--tgz", str(tgz), "--window-s", "3"])
    out = capsys.readouterr().out
    assert "switches the run did not make: this code at 1.00" in out
    assert "summary[threshold][this code]: 0 of 0 recorded switches replayed" in out
    assert "1 switches the runs did not make" in out


def test_pins_and_unpins_pick_the_policy_in_force() -> None:
    log = [
        {
            "event": "specfsm.config",
            "ts": 1.0,
            "policy": {"policy": "threshold", "high": 8, "low": 4},
        },
        {"event": "specfsm.config", "ts": 2.0, "request": {"pin": "PLAIN"}},
        {"event": "specfsm.config", "ts": 3.0, "request": {"pin": None}},
    ]
    b = onset_replay.Bundle(log, [[0.5, "D", 1, 0, 0, 1, 1]], None)
    assert b.policy_at(2.5) is None
    found = b.policy_at(4.0)
    assert found is not None
    spec, periods = found
    assert spec == {"name": "threshold", "high": 8, "low": 4}
    assert periods == [(1.0, 2.0), (3.0, 4.0)]


RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "results"


def test_machine_9s_served_runs_replay_their_switches_and_this_code_drops_the_stalls(
    capsys: Any,
) -> None:
    """The committed H200 records of machine 9 (2026-12-04): with the code they were served
    with, the threshold policy's switches replay to the iteration and the goodput policy's
    switch at 2 requests (a warm-up stall in its calibration) at its time; with this code
    the goodput policy makes none at 2 requests."""
    folder = RESULTS / "2026-12-04_serving"
    served = "threshold:prefill_step_tokens=0,prefill_debounce=false;"
    served += "goodput:prefill_debounce=false,cal_clip=0,change_skip=false,debt=false"
    onset_replay.main(
        [
            "--runs",
            str(folder / "runs.jsonl"),
            "--tgz",
            str(folder / "2026-12-04_machine9" / "traces_logs_machine9.tgz"),
            "--trace",
            "bursty",
            "--variant",
            served,
            "--variant",
            "none",
        ]
    )
    out = capsys.readouterr().out
    threshold = "summary[threshold][prefill_step_tokens=0,prefill_debounce=false]: 8 of 8"
    assert f"{threshold} recorded switches replayed, 0.00 s earlier" in out
    at_two = [s for s in out.splitlines() if s.startswith("  SPECULATING->DRAINING at 2.13 s")]
    assert len(at_two) == 2  # the two goodput runs
    served_cell = "prefill_debounce=false,cal_clip=0,change_skip=false,debt=false 2.13 (+0.00 s"
    assert served_cell in at_two[0]
    assert all(s.endswith("this code none") for s in at_two)


def _plain_log(anchor: tuple[float, int] | None) -> list[dict[str, Any]]:
    """PLAIN from 0.5 s; an observation line at `anchor` (ts, its draft debt) when given."""
    lines: list[dict[str, Any]] = [
        {"event": "specfsm.transition", "ts": 0.5, "src": "DRAINING", "dst": "PLAIN"},
    ]
    if anchor is not None:
        lines.append({"event": "specfsm.observation", "ts": anchor[0], "draft_debt": anchor[1]})
    return lines


def test_the_draft_debt_is_rebuilt_as_the_adapter_tells_it() -> None:
    # a prefill while SPECULATING adds nothing, one while PLAIN its prompts; a batch shrunk by
    # less than a sixteenth keeps the figure, by half it halves it at the observation after
    # (the adapter judges a shrink one observation late); the next prefill's prompts add
    rows: list[list[Any]] = [
        [0.1, "E", 2, 1000, 0, 0, 1],
        [0.6, "E", 30, 3000, 0, 2, 1],
        [0.7, "D", 32, 0, 0, 32, 1],
        [0.8, "D", 31, 0, 0, 31, 1],
        [0.9, "D", 16, 0, 0, 16, 1],
        [1.0, "E", 1, 500, 0, 16, 1],
        [1.1, "D", 17, 0, 0, 17, 1],
    ]
    b = onset_replay.Bundle(_plain_log(None), rows, None)
    told = [o[2].draft_debt for o in onset_replay.observations(b, 0.0, 2.0, 2.0)]
    assert told == [0, 0, 3000, 3000, 3000, 1500, 2000]
    off = [o[2].draft_debt for o in onset_replay.observations(b, 0.0, 2.0, 2.0, debt=False)]
    assert off == [0] * len(rows)
    # the debt a log's observation line carries (an adapter's of its time) is not used
    b = onset_replay.Bundle(_plain_log((0.85, 6000)), rows, None)
    again = [o[2].draft_debt for o in onset_replay.observations(b, 0.0, 2.0, 2.0)]
    assert again == told


def test_machine_26s_lull_returns_replay_with_the_draft_debt(capsys: Any) -> None:
    """The committed H100 records of machine 26 (2026-12-07), served by the code that prices
    the draft debt: told none, the goodput policy's replay leaves PLAIN in the lull 0.9 s and
    2.2 s before the runs did; told the debt rebuilt as this code's adapter keeps it, at the
    recorded time in one run and 0.25 s before it in the other."""
    folder = RESULTS / "2026-12-07_serving_h100_debt"
    onset_replay.main(
        [
            "--runs",
            str(folder / "runs.jsonl"),
            "--tgz",
            str(folder / "machine26" / "traces_logs_machine26.tgz"),
            "--trace",
            "bursty",
            "--variant",
            "none",
            "--variant",
            "debt=false",
        ]
    )
    out = capsys.readouterr().out
    lull = [s for s in out.splitlines() if s.startswith("  PLAIN->RESYNCING at 17.6")]
    goodput = [s for s in lull if "debt=false 16.73" in s or "debt=false 15.48" in s]
    assert len(goodput) == 2
    rebuilt = sorted(line.split(" | ")[1] for line in goodput)
    assert rebuilt[0].startswith("this code 17.40 (-0.25 s")
    assert rebuilt[1].startswith("this code 17.63 (+0.00 s")
