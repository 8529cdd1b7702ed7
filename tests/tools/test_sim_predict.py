"""The simulator's prediction beside the measured serving run (benchmarks/serving/sim_predict.py):
every server predicts on both measured traces, the prefill-bound heavy trace ranks the server
without a draft above pinned SPECULATING, and the committed runs.jsonl turns into its lines."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "serving"))

import sim_predict
import traces

TRACES = traces.builtin("gpu", 8.0)
MEASURED = ("heavy", "bursty")
LINE = re.compile(
    r"^serve_sim_vs_measured\[(\w+)\]\[(\w+)\]: (\d+\.\d{3}) \(predicted (\d+) tok/s, "
    r"measured (\d+); goal 0\.9-1\.1\)$"
)


def test_predict_every_server_on_both_traces() -> None:
    for name in MEASURED:
        for server in sim_predict.SERVERS:
            v = sim_predict.predict(TRACES[name], server, seeds=1)
            assert math.isfinite(v) and v > 0, (name, server, v)


def test_prefill_bound_heavy_ranks_nospec_above_spec() -> None:
    heavy = TRACES["heavy"]
    assert sim_predict.predict(heavy, "nospec", seeds=2) > sim_predict.predict(
        heavy, "specfsm_spec", seeds=2
    )


def test_mean_lengths_are_the_traces_own() -> None:
    tr = TRACES["bursty"]
    prompt, out = sim_predict._mean_lengths(tr)
    reqs = [traces.request(tr, k) for k in range(len(traces.arrivals(tr)))]
    assert prompt == sum(len(r.prompt) for r in reqs) / len(reqs)
    wl = sim_predict._workload(tr)
    assert abs((wl.prompt_len[0] + wl.prompt_len[1]) / 2 - prompt) <= 1
    assert abs((wl.output_len[0] + wl.output_len[1]) / 2 - out) <= 1


def test_sim_lines_parse_the_committed_run() -> None:
    runs = sim_predict.RESULTS / "runs.jsonl"
    lines = sim_predict.sim_lines(runs, {k: TRACES[k] for k in MEASURED}, seeds=1)
    rows = [m for m in map(LINE.match, lines) if m]
    got = {(m.group(1), m.group(2)) for m in rows}
    assert ("heavy", "nospec") in got and ("bursty", "specfsm_goodput") in got
    assert len(got) == 11  # 6 servers measured on heavy, 5 on bursty
    for m in rows:
        ratio, pred, meas = float(m.group(3)), int(m.group(4)), int(m.group(5))
        assert abs(ratio - pred / meas) < 0.01
    for i, line in enumerate(lines):  # a miss beyond the goal has its comment line next
        hit = LINE.match(line)
        if hit and not 0.9 <= float(hit.group(3)) <= 1.1:
            assert lines[i + 1].startswith("# miss[")
    assert any("PARTLY FITTED" in line for line in lines if line.startswith("#"))
