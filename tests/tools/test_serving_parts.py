"""The serving benchmark's pure parts: requests are a function of (trace, index) alone,
Poisson arrivals of the seed alone, and a driver log's run lines parse back into runs."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "serving"))

import summary
import traces


def test_requests_and_arrivals_are_fixed_by_the_seed() -> None:
    a, b = traces.builtin("gpu", 3.0), traces.builtin("gpu", 3.0)
    for name in a:
        assert [traces.request(a[name], k) for k in range(20)] == [
            traces.request(b[name], k) for k in range(20)
        ]
        assert traces.arrivals(a[name]) == traces.arrivals(b[name])
    r = traces.request(a["heavy"], 5)
    ln = a["heavy"].lengths
    assert ln.prompt_min <= len(r.prompt) <= ln.prompt_max
    assert ln.output_min <= r.max_new_tokens <= ln.output_max
    day = a["day"]
    counts = [sum(1 for i, _ in traces.arrivals(day) if i == j) for j in range(len(day.phases))]
    assert counts[2] > counts[0]  # the 40 req/s phase gets more arrivals than the 2 req/s one


def test_runs_from_log() -> None:
    text = (
        "[serving +288s] specfsm: up in 287.9 s, KV pool 745188 tokens\n"
        "[serving +303s] specfsm_plain light rep0: 933.6 tok/s, 112/115 finished, lost 0, "
        "c1=192 c8=759 c32=1693 c4=1090\n"
    )
    runs = summary.runs_from_log(text)
    assert runs[0] == {"server": "specfsm", "start_s": 287.9, "kv_tokens": 745188}
    assert runs[1]["server"] == "specfsm_plain" and runs[1]["tok_s"] == 933.6
    assert [p["phase"] for p in runs[1]["phases"]] == ["c1", "c8", "c32", "c4"]
    assert runs[1]["lost"] == 0 and runs[1]["finished"] == 112
