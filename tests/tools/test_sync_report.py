"""The sync-debug window's report: two servers' scheduler functions set side by side per loop
iteration, the loop's steps first, then the functions one server alone calls, then those that
differ most."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "serving"))

import sync_report

SCHED = "sglang/srt/managers/scheduler.py"


def _window(iters: int, rows: list[list[object]]) -> dict[str, object]:
    return {"wall_s": 2.0, "iters": {"D": iters - 1, "E": 1}, "profile_sched_cumtime": rows}


def test_sched_diff_puts_the_loop_steps_first_then_one_sided_calls_then_differences(
    tmp_path: Path,
) -> None:
    plain = _window(
        10,
        [
            [f"{SCHED}:10 run_batch", 10, 0.001, 0.010],
            [f"{SCHED}:20 process_batch_result", 10, 0.001, 0.004],
            [f"{SCHED}:30 merge_spec_state", 2, 0.002, 0.002],
            [f"{SCHED}:40 same_everywhere", 10, 0.001, 0.001],
        ],
    )
    nospec = _window(
        20,
        [
            [f"{SCHED}:10 run_batch", 20, 0.002, 0.020],
            [f"{SCHED}:20 process_batch_result", 20, 0.001, 0.004],
            [f"{SCHED}:40 same_everywhere", 20, 0.001, 0.002],
        ],
    )
    for label, rec in (("specfsm_plain", plain), ("nospec", nospec)):
        (tmp_path / f"{label}.json").write_text(json.dumps(rec))
    out = sync_report.report(tmp_path)
    head = [ln for ln in out if ln.startswith("serve_sync_sched_diff[")]
    assert head and head[0].startswith("serve_sync_sched_diff[specfsm_plain-nospec]: +200.0 us")
    rows = out[out.index(head[0]) + 1 :]
    # run_batch 1000 vs 1000 us per iteration; process_batch_result 400 vs 200
    assert rows[0].split()[1:2] == ["+0.0"] and rows[0].endswith("run_batch")
    assert rows[1].split()[1:2] == ["+200.0"] and rows[1].endswith("process_batch_result")
    # only on one side: 200 us per iteration against none, per call 1000 us against none
    assert rows[2].startswith("#   called by one server only (specfsm_plain vs nospec)")
    assert rows[3].endswith("merge_spec_state") and "-" in rows[3].split("per call")[1]
    assert rows[4] == "#   called by both, the largest differences:"
    assert rows[5].split()[1:2] == ["+0.0"] and rows[5].endswith("same_everywhere")


def test_a_window_recorded_without_the_scheduler_profile_gives_no_side_by_side(
    tmp_path: Path,
) -> None:
    for label in ("specfsm_plain", "nospec"):
        (tmp_path / f"{label}.json").write_text(json.dumps({"iters": {"D": 3}, "stacks": []}))
    out = sync_report.report(tmp_path)
    assert not [ln for ln in out if ln.startswith("serve_sync_sched_diff")]
    assert [ln for ln in out if ln.startswith("serve_sync_waits[nospec]")]


def test_the_policies_windows_are_set_beside_the_no_spec_servers_and_each_others(
    tmp_path: Path,
) -> None:
    rows = [[f"{SCHED}:10 run_batch", 10, 0.001, 0.010]]
    for label in ("specfsm_goodput", "specfsm_example", "nospec"):
        (tmp_path / f"{label}.json").write_text(json.dumps(_window(10, rows)))
    heads = [
        ln.split(":")[0] for ln in sync_report.report(tmp_path) if ln.startswith("serve_sync_sched")
    ]
    assert heads == [
        "serve_sync_sched_diff[specfsm_goodput-nospec]",
        "serve_sync_sched_diff[specfsm_example-nospec]",
        "serve_sync_sched_diff[specfsm_example-specfsm_goodput]",
    ]
