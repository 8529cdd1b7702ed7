"""The per-phase oracle and its choice per pair of phases (benchmarks/serving/oracle.py): on
an open-loop trace a server slower in a burst serves the same requests in the lull after it,
so picking phases from different servers counts those tokens twice; per pair it does not."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "serving"))

import oracle
import traces


def _run(tok_s: list[float]) -> dict[str, object]:
    return {"phases": [{"tok_s": x} for x in tok_s]}


def test_carried_over_tokens_count_once_per_pair() -> None:
    bursty = traces.builtin("gpu", 7.0)["bursty"]
    # machine 10's repetition 0 (H200, 2026-12-05): the burst + lull sums agree
    run_of = {
        ("nospec", 0): _run([146, 491, 3474, 800]),
        ("eagle", 0): _run([147, 334, 3631, 365]),
    }
    per_phase = oracle.phase_oracle(bursty, ["nospec", "eagle"], run_of, [0])[0]
    pairs = oracle.pair_oracle(bursty, ["nospec", "eagle"], run_of, [0])
    assert pairs is not None
    assert per_phase == (147 + 491 + 3631 + 800) / 4
    assert pairs[0] == (146 + 491 + 3474 + 800) / 4  # the no-spec server, the best static one
    lines = oracle.pair_lines(
        "bursty",
        bursty,
        ["nospec", "eagle"],
        run_of,
        {0: pairs[0]},
        {"specfsm_example": {0: 1239.5}},
        {"specfsm_example": "serve_specfsm_example"},
    )
    assert lines[0].startswith("serve_phase_pair_oracle_vs_best_static[bursty]: 1.000 (reps")
    assert lines[1].startswith("serve_specfsm_example_vs_phase_pair_oracle[bursty]: 1.010")


def test_a_closed_loop_has_no_pair_oracle() -> None:
    light = traces.builtin("gpu", 7.0)["light"]
    run_of = {("nospec", 0): _run([1, 2, 3, 4])}
    assert oracle.pair_oracle(light, ["nospec"], run_of, [0]) is None


def test_open_loop_notes_say_what_no_schedule_can_change() -> None:
    """Against the tokens an open-loop trace's requests ask: an oracle above them is
    unreachable, and a better static server whose window holds them all served the trace
    whole (a ratio to it says where each run's window ends); a closed loop gets nothing."""

    def fmt(xs: list[float]) -> str:
        return ", ".join(f"{x:.3f}" for x in xs)

    # machine 17's day (H100, 2026-12-06): 1.289x and 1.001x the tokens asked
    notes = oracle.open_loop_notes("day", {0: 1957.9}, {0: 1522.5}, {0: 53_158}, 35.0, fmt)
    assert notes.lines[0].startswith("serve_phase_oracle_vs_trace_tokens[day]: 1.289 ")
    assert notes.lines[1].startswith("serve_best_static_vs_trace_tokens[day]: 1.002 ")
    assert notes.oracle.startswith(" (unreachable: the oracle adds up 1.289x")
    assert notes.best.startswith(" (served whole: the better static server's window holds 1.002x")
    # bursty on the H200 (2026-12-05): the window ends with the last burst's backlog unserved
    bursty = oracle.open_loop_notes("bursty", {0: 1300.0}, {0: 1228.0}, {0: 56_000}, 28.0, fmt)
    assert (bursty.best, bursty.oracle) == ("", "")
    assert oracle.open_loop_notes("heavy", {0: 1.0}, {0: 1.0}, {}, 28.0, fmt) == ([], "", "")
