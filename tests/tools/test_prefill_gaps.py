"""benchmarks/serving/prefill_gaps.py: each server's fixed host time per prefill, fitted from
the per-iteration traces of a results folder: the slope is the prefill's GPU time per prompt
token, shared by the servers of one driver; a specfsm run counts its PLAIN prefills only, and
only the trace's busiest phases, where no prefill waits for an arrival."""

from __future__ import annotations

import io
import json
import random
import sys
import tarfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "serving"))

import prefill_gaps

SLOPE_MS = 0.023  # per prompt token
PHASE_S = 4.0


def _prefills(t0: float, fixed_ms: float, rng: random.Random, until: float) -> list[list[Any]]:
    """A string of prefills from ``t0``: each gap is the GPU time of the prefill two launches
    back (overlap on) plus the fixed time, with some noise."""
    toks = [rng.randint(1000, 8000) for _ in range(200)]
    rows: list[list[Any]] = []
    t = t0
    for i, n in enumerate(toks):
        if t >= until:
            break
        rows.append([t, "E", 4, n, 0, 100, 50_000])
        prev = toks[i - 1] if i else 4000
        t += (SLOPE_MS * prev + fixed_ms + rng.uniform(-0.2, 0.2)) / 1e3
    return rows


def _folder(tmp: Path, plain_from: float) -> Path:
    """One driver: a no-spec run (fixed 3.0 ms) and a specfsm run (3.5 ms while PLAIN, 20 ms
    while SPECULATING, until `plain_from` seconds into its busy phase) of a two-phase trace,
    with a lull of widely spaced prefills first."""
    rng = random.Random(7)
    runs: list[dict[str, Any]] = [
        {"traces": {"bursty": ["rps2", "rps40"]}, "phase_s": PHASE_S, "bed": "gpu"},
    ]
    rows: dict[str, list[list[Any]]] = {"nospec": [], "specfsm": []}
    for server, t0 in (("nospec", 1000.0), ("specfsm_goodput", 2000.0)):
        key = "specfsm" if server.startswith("specfsm") else server
        # the lull: prefills seconds apart (idle between; not fitted)
        rows[key] += [[t0 + 0.5 * k, "E", 1, 2000, 0, 1, 90_000] for k in range(6)]
        busy = t0 + PHASE_S
        if key == "specfsm":
            rows[key] += _prefills(busy, 20.0, rng, busy + plain_from)
            rows[key] += _prefills(busy + plain_from, 3.5, rng, busy + PHASE_S)
        else:
            rows[key] += _prefills(busy, 3.0, rng, busy + PHASE_S)
        runs.append({"server": server, "trace": "bursty", "rep": 0, "t0": t0})
    trans = [
        {"event": "specfsm.transition", "ts": 2000.0 + PHASE_S + plain_from, "dst": "PLAIN"},
    ]
    drv = tmp / "machine1"
    drv.mkdir()
    (drv / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in runs))
    files = {
        "iters/nospec/iter-1.jsonl": rows["nospec"],
        "iters/specfsm/iter-2.jsonl": rows["specfsm"],
        "specfsm/transitions-rank0.jsonl": trans,
    }
    with tarfile.open(drv / "traces_logs_machine1.tgz", "w:gz") as tf:
        for name, recs in files.items():
            data = "".join(json.dumps(r) + "\n" for r in recs).encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return tmp


def test_fit_recovers_the_slope_and_each_servers_fixed_time(tmp_path: Path) -> None:
    folder = _folder(tmp_path, plain_from=1.0)
    drv = prefill_gaps.load_driver(folder / "machine1" / "traces_logs_machine1.tgz", "bursty")
    got = prefill_gaps.fit(drv)
    assert got is not None
    assert abs(got.slope_us - 1e3 * SLOPE_MS) < 0.2
    assert abs(got.fixed_ms["nospec:0"] - 3.0) < 0.15
    # the SPECULATING prefills (20 ms) before the switch and the lull's are left out
    assert abs(got.fixed_ms["specfsm_goodput:0"] - 3.5) < 0.15
    lines = prefill_gaps.report([got])
    assert lines[0] == f"machine1: slope {got.slope_us:.2f} us per prompt token"
    pooled = [x for x in lines if x.startswith("prefill_fixed_vs_nospec[specfsm_goodput]")]
    assert len(pooled) == 1
    diff = got.fixed_ms["specfsm_goodput:0"] - got.fixed_ms["nospec:0"]
    assert pooled[0].split(": ")[1].startswith(f"{diff:+.2f} ms a prefill (runs 1;")
    assert abs(diff - 0.5) < 0.2


def test_skip_s_leaves_out_each_busy_phases_first_seconds(tmp_path: Path) -> None:
    tgz = _folder(tmp_path, plain_from=1.0) / "machine1" / "traces_logs_machine1.tgz"
    whole = prefill_gaps.load_driver(tgz, "bursty")
    later = prefill_gaps.load_driver(tgz, "bursty", skip_s=2.0)
    assert 0 < len(later.points["nospec:0"]) < len(whole.points["nospec:0"])
    assert prefill_gaps.fit(prefill_gaps.load_driver(tgz, "bursty", skip_s=PHASE_S)) is None


def test_busiest_phases_are_the_top_level() -> None:
    assert prefill_gaps.busiest(["rps2", "rps40", "rps2", "rps40"], 7.0) == [
        (7.0, 14.0),
        (21.0, 28.0),
    ]
    assert prefill_gaps.busiest(["c1", "c8", "c32", "c4"], 2.0) == [(4.0, 6.0)]


def test_main_says_so_when_nothing_fits(tmp_path: Path, capsys: Any) -> None:
    assert prefill_gaps.main([str(tmp_path)]) == 1
    assert "no prefill strings of bursty" in capsys.readouterr().out


def test_phase_report_splits_each_gap_into_its_host_parts() -> None:
    # run, worker, target, plan, result, next (ms), then the gap: the specfsm server spends
    # 0.4 ms more in its model worker around the same target forward
    nospec = [[6.0, 4.0, 4.0, 2.5, 1.0, 0.5, 10.0]] * 3
    plain = [[6.4, 4.4, 4.0, 2.5, 1.0, 0.5, 10.4]] * 2
    drv = prefill_gaps.Driver("m1", phases={"nospec:0": nospec, "specfsm_goodput:1": plain})
    lines = prefill_gaps.phase_report([drv, prefill_gaps.Driver("m2")])
    assert lines[0] == "m1: host ms a gap in the prefill strings, by part"
    assert lines[1] == (
        "  prefill_phases[nospec]: sched 2.00 worker 0.00 target 1.50 plan 2.50 result 1.00 "
        "next 0.50 rest 2.50 gap 10.00 (3 gaps)"
    )
    assert "worker 0.40 (+0.40)" in lines[2] and "sched 2.00 (+0.00)" in lines[2]
    assert "gap 10.40 (+0.40) (2 gaps)" in lines[2]
    assert len(lines) == 3  # a driver without the fields says nothing


def test_size_report_gives_each_servers_own_slope_and_fixed_time_by_size(tmp_path: Path) -> None:
    tgz = _folder(tmp_path, plain_from=1.0) / "machine1" / "traces_logs_machine1.tgz"
    drv = prefill_gaps.load_driver(tgz, "bursty")
    got = prefill_gaps.fit(drv)
    assert got is not None
    lines = prefill_gaps.size_report([drv, prefill_gaps.Driver("unfitted")], [got])
    assert lines[0] == "machine1: by server, its own slope and the fixed ms by prompt tokens"
    assert len(lines) == 3  # a driver without a fit says nothing
    nospec = next(x for x in lines if "prefill_by_size[nospec]" in x)
    own = float(nospec.split("own slope ")[1].split(" ")[0])
    assert abs(own - 1e3 * SLOPE_MS) < 0.3
    # the synthetic prefills are 1,000-8,000 tokens, so the last bin is empty; in each other
    # bin the fixed time is the run's own, 3.0 ms
    cells = nospec.split("fixed ms by tokens: ")[1].split(", ")
    assert [c.split(" ")[0] for c in cells] == ["0-2000", "2000-5000", "5000-8000", "8000+"]
    assert cells[3] == "8000+ -"
    for c in cells[:3]:
        assert abs(float(c.split(" ")[1]) - 3.0) < 0.2
