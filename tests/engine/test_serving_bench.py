"""benchmarks/serving_bench.py on the CPU bed (so the serving benchmark cannot rot): real HTTP
servers (``python -m sglang.launch_server``: no speculation; EAGLE with specfsm in its
pinned-PLAIN, goodput and pinned-per-phase variants; the shapes example as shipped) under the
same closed-loop trace, every request accounted for, greedy outputs equal across servers, the
summary's lines present, a sync-debug window reported."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "serving_bench.py"


def _value(lines: list[str], key: str) -> str:
    for ln in lines:
        if ln.startswith(key + ": "):
            return ln[len(key) + 2 :]
    raise AssertionError(f"no {key!r} line in:\n" + "\n".join(lines))


def test_serving_bench_cpu_quick(tmp_path: Path) -> None:
    out = tmp_path / "serving"
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--bed",
            "cpu",
            "--quick",
            "--traces",
            "light",
            "--servers",
            "nospec,specfsm,specfsm_shapes",
            "--variants",
            "plain,goodput,phases",
            "--phase-pins",
            "light=SPECULATING,PLAIN,SPECULATING",
            "--sync-debug",
            "2",
            "--sync-of",
            "specfsm_plain",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=SCRIPT.parents[1],
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = (out / "serving_summary.txt").read_text().splitlines()
    assert _value(lines, "serve_servers_failed") == "0", lines
    assert _value(lines, "serve_lost_requests") == "0", lines
    assert _value(lines, "serve_greedy_mismatches") == "0", lines
    assert int(_value(lines, "serve_greedy_compared_requests")) > 0, lines
    assert _value(lines, "serve_memory_leaks_reported") == "0", lines
    for key in (
        "serve_tok_s[light][nospec]",
        "serve_tok_s[light][specfsm_plain]",
        "serve_plain_vs_nospec_server[light]",
        "serve_specfsm_vs_best_static[light]",
        "serve_specfsm_vs_best_static_tokens[light]",
        "serve_drained_tok_s[light][nospec]",
        "serve_plain_vs_nospec_server_drained[light]",
        "serve_switches[light][specfsm_goodput]",
        "serve_tok_s[light][specfsm_shapes]",
        "serve_host_probe[light][nospec]",
    ):
        _value(lines, key)
    # the shapes example as shipped started priced by its start-up profile: every shape it
    # lists and PLAIN measured (its rows beside the specfsm server's, not over them)
    rows = (out / "specfsm" / "profile_shapes-0.csv").read_text()
    for model in ("plain_step,", "spec_step_1x1x2,", "spec_step_1x2x3,", "spec_step_1x3x4,"):
        assert model in rows, rows
    assert "spec_step_1x7x8," in rows, rows
    # the sync-debug window ran on the pinned-PLAIN server and reported its waits
    assert _value(lines, "serve_sync_waits[specfsm_plain]").split()[0].isdigit(), lines
    # the phases variant flipped the pin at both inner phase boundaries, in order, and its
    # outputs equal the no-spec server's (serve_greedy_mismatches above)
    import json

    run = next(
        r
        for r in map(json.loads, (out / "runs.jsonl").read_text().splitlines())
        if r.get("server") == "specfsm_phases"
    )
    assert [m for _, m in run["pin_flips"]] == ["PLAIN", "SPECULATING"], run["pin_flips"]
    # the run's record keeps the client's tokens per 0.1 s bin: every token its requests got
    import gzip

    with gzip.open(out / "requests" / "specfsm_phases_light_rep0.jsonl.gz", "rt") as fh:
        got = [json.loads(x) for x in fh]
    assert sum(run["tok_bins"]) == sum(int(r["tokens"]) for r in got) > 0, run["tok_bins"]
    _value(lines, "serve_specfsm_vs_phase_pinned[light]")
    # specfsm's transition log shows the variants took effect: PLAIN was entered
    log = (out / "specfsm" / "transitions-rank0.jsonl").read_text()
    assert '"dst":"PLAIN"' in log.replace(" ", ""), log[-2000:]
    # the goodput variant is an unpin: the launched policy resumed with what it learned
    controls = [json.loads(x) for x in log.splitlines() if '"control"' in x]
    assert any(c.get("resumed") is True for c in controls), controls
    # a second driver into the same folder numbers its runs after the first's: nothing of the
    # first is hidden or overwritten, and the summary shows both
    again = subprocess.run(
        [sys.executable, str(SCRIPT), "--bed", "cpu", "--quick", "--traces", "light",
         "--servers", "nospec", "--freeze-gc", "--out", str(out)],
        capture_output=True, text=True, timeout=600, cwd=SCRIPT.parents[1],
    )  # fmt: skip
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "has repetitions 0-0: numbering from 1" in again.stdout
    assert "nospec: /freeze_gc: ok" in again.stdout, again.stdout[-3000:]
    reps = [
        r["rep"]
        for r in map(json.loads, (out / "runs.jsonl").read_text().splitlines())
        if r.get("server") == "nospec" and "trace" in r
    ]
    assert reps == [0, 1], reps
    assert {p.name for p in (out / "requests").glob("nospec_light_rep*")} == {
        "nospec_light_rep0.jsonl.gz",
        "nospec_light_rep1.jsonl.gz",
    }
    lines = (out / "serving_summary.txt").read_text().splitlines()
    assert _value(lines, "serve_tok_s[light][nospec]").count(",") == 1  # "(reps a, b; ...)"
    assert _value(lines, "serve_greedy_mismatches") == "0", lines


def test_bracketed_server_started_twice(tmp_path: Path) -> None:
    """``--bracket``: the server's repetitions split over two starts, both recorded, both
    summarized as one server, its log kept whole (appended, not overwritten); with
    ``--windows-first`` its sync-debug window runs once, at the first start, before any run."""
    import json

    out = tmp_path / "serving"
    argv = ["--bed", "cpu", "--quick", "--traces", "light", "--servers", "nospec", "--reps", "2"]
    argv += ["--phase-s", "4", "--bracket", "nospec", "--iter-trace", "--out", str(out)]
    argv += ["--sync-debug", "1", "--windows-first"]
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *argv],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=SCRIPT.parents[1],
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "nospec: starting for repetitions 0-0" in proc.stdout, proc.stdout[-3000:]
    assert "nospec: starting for repetitions 1-1" in proc.stdout, proc.stdout[-3000:]
    said = [ln for ln in proc.stdout.splitlines() if ln.startswith("[serving")]
    window = [i for i, ln in enumerate(said) if "serve_sync_waits[nospec]: " in ln]
    first_run = next(i for i, ln in enumerate(said) if "nospec light rep0" in ln)
    assert len(window) == 1 and window[0] < first_run, said
    recs = [json.loads(x) for x in (out / "runs.jsonl").read_text().splitlines()]
    starts = [r for r in recs if r.get("server") == "nospec" and "kv_tokens" in r]
    runs = [r["rep"] for r in recs if r.get("server") == "nospec" and "trace" in r]
    assert len(starts) == 2 and runs == [0, 1], recs
    # each start's scheduler wrote its iterations to the end of its last run, though it was
    # stopped right after it (the trace's idle flush, not the next iteration, wrote the tail)
    ran = [r for r in recs if r.get("server") == "nospec" and "trace" in r]
    ends = [r["t0"] + 4.0 * len(r["phases"]) + r["drain_s"] for r in ran]
    files = sorted((out / "iters" / "nospec").glob("iter-*.jsonl"), key=lambda p: p.stat().st_mtime)
    assert len(files) == 2, files
    for path, end in zip(files, ends, strict=True):
        last = json.loads(path.read_text().splitlines()[-1])[0]
        assert last >= end - 0.3, (path, last, end)
    log = (out / "logs" / "server_nospec.log").read_text()
    assert log.count("server_args=") == 2
    lines = (out / "serving_summary.txt").read_text().splitlines()
    assert _value(lines, "serve_lost_requests") == "0", lines
    assert _value(lines, "serve_servers_failed") == "0", lines
    assert "(reps " in _value(lines, "serve_tok_s[light][nospec]"), lines
