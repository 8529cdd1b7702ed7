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
