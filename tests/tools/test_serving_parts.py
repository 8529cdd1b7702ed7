"""The serving benchmark's pure parts: requests are a function of (trace, index) alone,
Poisson arrivals of the seed alone, and a driver log's run lines parse back into runs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "serving"))

import driver_log
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
    runs = driver_log.runs_from_log(text)
    assert runs[0] == {"server": "specfsm", "start_s": 287.9, "kv_tokens": 745188}
    assert runs[1]["server"] == "specfsm_plain" and runs[1]["tok_s"] == 933.6
    assert [p["phase"] for p in runs[1]["phases"]] == ["c1", "c8", "c32", "c4"]
    assert runs[1]["lost"] == 0 and runs[1]["finished"] == 112


def test_served_steps_keep_only_clean_decode_gaps(tmp_path: Path, capsys: object) -> None:
    """served_steps.py: a decode gap counts only after two decode iterations (a prefill, and
    under overlap the decode after it, would be inside); runs split at idle gaps; the rows
    parse as a cost table, a no-spec server's (``--nodraft``) among them."""
    import json

    import served_steps

    from specfsm.model.tables import parse_table

    recs, t = [], 0.0
    for run in range(2):
        for i in range(40):
            kind = "E" if i % 10 == 0 else "D"
            step = 0.050 if kind == "E" else 0.005 * (run + 1)
            recs.append([t, kind, 16, 0, 0, 16, 1000])
            t += step
        t += 5.0  # idle: the next run
    path = tmp_path / "iter-1.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    segs = served_steps.segments(path, 1.5)
    assert len(segs) == 2
    by = served_steps.served_steps(segs[:1])
    assert sorted(by) == [16] and {round(ms, 3) for _, ms in by[16]} == {5.0}
    assert (
        served_steps.main(
            [
                "--traces",
                str(path),
                "--plain",
                "0",
                "--spec",
                "1",
                "--ctx",
                "1000",
                "--min-samples",
                "5",
                # a server without a draft: its runs numbered across its files in order
                "--nodraft-traces",
                str(path),
                "--nodraft-traces",
                str(path),
                "--nodraft",
                "3",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    table = parse_table(out, "served")
    assert table.ms("plain_step", 16, 1) == 5.0 and table.ms("spec_step_1x3x4", 16, 4) == 10.0
    assert table.ms("nodraft_step", 16, 1) == 10.0


def _source(folder: Path, runs: list[tuple[str, int, float]], started: str) -> None:
    """A results folder as the benchmark writes it: a header, one server record per server,
    one run per (label, rep, tok/s) on the heavy trace, each with its requests file."""
    import gzip
    import json

    (folder / "requests").mkdir(parents=True)
    recs: list[dict[str, object]] = [{"started": started, "argv": ["x"], "bed": "gpu"}]
    for base in sorted({lab.split("_")[0] for lab, _, _ in runs}):
        recs.append({"server": base, "start_s": 1.0, "kv_tokens": 100})
    for lab, rep, tok in runs:
        phases = [{"phase": p, "tok_s": tok} for p in ("c16", "c256", "c64", "c256")]
        recs.append(
            {"server": lab, "trace": "heavy", "rep": rep, "tok_s": tok, "lost": 0, "phases": phases}
        )
        with gzip.open(folder / "requests" / f"{lab}_heavy_rep{rep}.jsonl.gz", "wt") as fh:
            fh.write(json.dumps({"k": 0, "status": "done", "ids_sha": "a"}) + "\n")
    (folder / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


def test_merged_folders_pair_only_repetitions_measured_together(tmp_path: Path) -> None:
    """merge.py renumbers each folder's repetitions apart; the summary divides runs of the
    same repetition only, and says so where two servers share none."""
    import merge

    a, b, out = tmp_path / "a", tmp_path / "b", tmp_path / "out"
    _source(a, [("nospec", 0, 100.0), ("eagle", 0, 80.0), ("specfsm_goodput", 0, 110.0)], "A")
    _source(b, [("nospec", 0, 200.0), ("specfsm_plain", 0, 190.0), ("adaptive", 0, 50.0)], "B")
    said = merge.merge([(a, 0, set()), (b, 1, {"nospec", "specfsm_plain"})], out, ["m"])
    assert said[1].endswith("2 runs, repetitions +1, only nospec,specfsm_plain")
    assert (out / "requests" / "specfsm_plain_heavy_rep1.jsonl.gz").exists()
    lines = summary.summarize(out / "runs.jsonl", {"heavy": traces.builtin("gpu", 7.0)["heavy"]})
    text = "\n".join(lines)
    assert "# command: m" in text and "# runs of b (repetitions +1), started B" in text
    assert "adaptive" not in text  # left out by the label filter, server record too
    # goodput (rep 0) against the best static server of rep 0 only: 110 / 100
    assert "serve_specfsm_vs_best_static[heavy]: 1.100 (reps 1.100;" in text
    # PLAIN (rep 1) shares rep 1 with the no-spec server of folder b: 190 / 200
    assert "serve_plain_vs_nospec_server[heavy]: 0.950 (reps 0.950;" in text
    assert "serve_greedy_mismatches: 0" in text
    assert (
        "serve_greedy_reference: heavy=nospec (info: outputs compared with its first run)" in text
    )
    merge.merge([(a, 0, set()), (b, 1, set())], tmp_path / "out2", ["m"])
    lines = summary.summarize(
        tmp_path / "out2" / "runs.jsonl", {"heavy": traces.builtin("gpu", 7.0)["heavy"]}
    )
    # goodput (rep 0) and the adaptive server (rep 1) share no repetition: ratio of means
    assert any(
        x.startswith("serve_specfsm_vs_sglang_adaptive[heavy]: 2.200 (ratio of means")
        for x in lines
    )


def test_a_merge_keeps_the_shapes_servers_record(tmp_path: Path) -> None:
    """``specfsm_shapes`` is a server's name, not the specfsm server's variant: its record (KV
    pool, memory fraction) survives a merge, and the summary compares its pool with the stock
    server's."""
    import json

    import merge

    a = tmp_path / "a"
    _source(a, [("nospec", 0, 100.0), ("eagle", 0, 80.0), ("specfsm_shapes", 0, 101.0)], "A")
    recs = [json.loads(x) for x in (a / "runs.jsonl").read_text().splitlines()]
    recs = [r for r in recs if r.get("server") != "specfsm" or "trace" in r]
    shapes = {"server": "specfsm_shapes", "start_s": 1.0, "kv_tokens": 99}
    recs.insert(1, {**shapes, "mem_fraction_static": 0.7})
    (a / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    merge.merge([(a, 0, set())], tmp_path / "out", ["m"])
    lines = summary.summarize(
        tmp_path / "out" / "runs.jsonl", {"heavy": traces.builtin("gpu", 7.0)["heavy"]}
    )
    assert "serve_kv_tokens[specfsm_shapes]: 99 (--mem-fraction-static 0.7)" in lines
    assert any(x.startswith("serve_kv_tokens_shapes_vs_stock_server: 0.990") for x in lines)


def test_a_merge_keeps_a_server_started_for_its_kv_pool_alone(tmp_path: Path) -> None:
    """A stock server started with no run (``--reps-of eagle=0``: its KV pool is the figure)
    keeps its record through a merge without labels, so the merged summary still compares
    the specfsm server's pool with it; a label filter that leaves it out drops it."""
    import json

    import merge

    a = tmp_path / "a"
    _source(a, [("nospec", 0, 100.0), ("specfsm_goodput", 0, 99.0)], "A")
    recs = [json.loads(x) for x in (a / "runs.jsonl").read_text().splitlines()]
    recs.insert(1, {"server": "eagle", "start_s": 1.0, "kv_tokens": 100})
    (a / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    merge.merge([(a, 0, set())], tmp_path / "out", ["m"])
    lines = summary.summarize(
        tmp_path / "out" / "runs.jsonl", {"heavy": traces.builtin("gpu", 7.0)["heavy"]}
    )
    assert "serve_kv_tokens[eagle]: 100" in "\n".join(lines)
    assert any(x.startswith("serve_kv_tokens_vs_stock_server: 1.000") for x in lines)
    merge.merge([(a, 0, {"nospec"})], tmp_path / "out2", ["m"])
    kept = (tmp_path / "out2" / "runs.jsonl").read_text()
    assert '"server": "eagle"' not in kept


def test_phase_pins_from_arguments_and_from_static_runs(tmp_path: Path) -> None:
    """The phases variant's pins: given per trace, or the better static server's mode per
    phase from runs already recorded; a clear error where neither gives them."""
    import phase_pins
    import pytest

    assert phase_pins.parse("light=plain,SPECULATING; heavy=PLAIN") == {
        "light": ["PLAIN", "SPECULATING"],
        "heavy": ["PLAIN"],
    }
    for bad in ("light", "light=", "light=FAST", "=PLAIN"):
        with pytest.raises(ValueError, match="TRACE=MODE"):
            phase_pins.parse(bad)
    _source(tmp_path / "a", [("nospec", 0, 100.0), ("eagle", 0, 80.0)], "A")
    runs = tmp_path / "a" / "runs.jsonl"
    # every phase of the fake runs has the run's tok/s: no-spec wins all four
    assert phase_pins.pins_for("heavy", 4, {}, runs) == ["PLAIN"] * 4
    assert phase_pins.pins_for("heavy", 4, {"heavy": ["SPECULATING"] * 4}, runs)[0] == (
        "SPECULATING"
    )
    with pytest.raises(ValueError, match="2 pins for 4 phases"):
        phase_pins.pins_for("heavy", 4, {"heavy": ["PLAIN", "PLAIN"]}, runs)
    with pytest.raises(ValueError, match="run the nospec and eagle servers on it first"):
        phase_pins.pins_for("bursty", 4, {}, runs)


def test_phase_switcher_flips_at_the_boundaries() -> None:
    """The switcher writes a pin only where the mode changes, at the phase's start."""
    import time

    import phase_pins

    wrote: list[str] = []
    bounds = [(0.0, 0.1), (0.1, 0.2), (0.2, 0.3), (0.3, 0.4)]
    sw = phase_pins.Switcher(["PLAIN", "PLAIN", "SPECULATING", "PLAIN"], bounds, wrote.append)
    sw.start(time.time())
    time.sleep(0.6)
    sw.stop()
    assert wrote == ["SPECULATING", "PLAIN"]
    assert [m for _, m in sw.flips] == wrote
    assert 0.15 < sw.flips[0][0] < 0.5 and sw.flips[1][0] >= sw.flips[0][0]


def test_repetitions_per_server_and_per_trace() -> None:
    reps = traces.repetitions("eagle@day=1,plain=0,plain@light=2, spec=3", 2)
    assert reps("eagle", "day") == 1
    assert reps("eagle", "light") == 2
    assert reps("plain", "bursty") == 0
    assert reps("plain", "light") == 2
    assert reps("spec", "day") == 3
    assert reps("nospec", "day") == 2
    for bad in ("spec", "spec=x", "=2", "spec@day="):
        with pytest.raises(ValueError, match="reps-of"):
            traces.repetitions(bad, 2)


def test_bracketed_server_runs_before_and_after_the_others() -> None:
    """``--bracket nospec``: the no-spec server's first half of the repetitions before the
    others, the rest after them; without it each server runs all of its repetitions once."""
    servers = ["nospec", "specfsm", "specfsm_shapes"]
    assert traces.server_order(servers, "", 4) == [(s, range(4)) for s in servers]
    assert traces.server_order(servers, "nospec", 4) == [
        ("nospec", range(2)),
        ("specfsm", range(4)),
        ("specfsm_shapes", range(4)),
        ("nospec", range(2, 4)),
    ]
    assert traces.server_order(servers, "specfsm", 3)[0] == ("specfsm", range(1))
    assert traces.server_order(servers, "specfsm", 3)[-1] == ("specfsm", range(1, 3))
    with pytest.raises(ValueError, match="not one of --servers"):
        traces.server_order(servers, "eagle", 4)
    with pytest.raises(ValueError, match="--reps 2 or more"):
        traces.server_order(servers, "nospec", 1)


@pytest.mark.parametrize("eagle_first", [10.0, 30.0])
def test_phase_oracle_against_the_tokens_an_open_loop_trace_asks(
    tmp_path: Path, eagle_first: float
) -> None:
    """On a Poisson trace the summary says what share of the requests' tokens the per-phase
    oracle adds up (a cut request asks for the tokens before its cut); where that is above 1,
    each configuration's phase-oracle goal line says the oracle is unreachable."""
    import gzip
    import json

    day = traces.builtin("gpu", 7.0)["day"]
    (tmp_path / "requests").mkdir()
    recs: list[dict[str, object]] = []
    every = (
        ("nospec", [1.0] * 5),
        ("eagle", [eagle_first, 0.0, 0.0, 0.0, 0.0]),
        ("specfsm_goodput", [1.0] * 5),
    )
    for lab, per_phase in every:
        phases = [
            {"phase": p, "tok_s": v}
            for p, v in zip((p.label() for p in day.phases), per_phase, strict=True)
        ]
        recs.append({"server": lab, "start_s": 1.0, "kv_tokens": 100})
        recs.append(
            {"server": lab, "trace": "day", "rep": 0, "tok_s": 1.0, "lost": 0, "phases": phases}
        )
        asked = [
            {"k": 0, "status": "done", "ids_sha": "a", "max_new_tokens": 100, "abort_after": None},
            {"k": 1, "status": "cut", "ids_sha": "b", "max_new_tokens": 50, "abort_after": 10},
        ]
        with gzip.open(tmp_path / "requests" / f"{lab}_day_rep0.jsonl.gz", "wt") as fh:
            fh.write("".join(json.dumps(r) + "\n" for r in asked))
    (tmp_path / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    lines = summary.summarize(tmp_path / "runs.jsonl", {"day": day})
    (goal,) = [x for x in lines if x.startswith("serve_specfsm_vs_phase_oracle[day]")]
    if eagle_first == 10.0:
        # the oracle: 7 s x 10 + 4 x 7 s x 1 = 98 tokens of the 110 asked
        assert any(x.startswith("serve_phase_oracle_vs_trace_tokens[day]: 0.891") for x in lines)
        assert "unreachable" not in goal
    else:
        # 7 s x 30 + 4 x 7 s x 1 = 238 tokens of the 110 asked
        assert goal.endswith(
            " (unreachable: the oracle adds up 2.164x the tokens the trace's requests ask)"
        )
    heavy = traces.builtin("gpu", 7.0)["heavy"]  # closed loop: its requests hang on the server
    assert not summary._asked_tokens(tmp_path, [recs[1]], heavy)


def test_step_compare_puts_a_per_prefill_cost_after_the_prefill(tmp_path: Path) -> None:
    """step_compare.py: a server that adds 2 ms to the decode after each prefill shows it in
    the around-prefill table (gap 1, +2.00) and not in the decode table (ratio 1.000)."""
    import json

    import step_compare

    def trace(name: str, extra_ms: float) -> Path:
        recs, t = [], 0.0
        for i in range(400):
            kind = "E" if i % 8 == 0 else "D"
            recs.append([t, kind, 4, 600 if kind == "E" else 0, 0, 4, 1000])
            t += 0.020 if kind == "E" else 0.005 + (extra_ms / 1000.0 if i % 8 == 1 else 0.0)
        path = tmp_path / f"iter-{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in recs))
        return path

    a = step_compare.pick([f"{trace('a', 2.0)}:0"], 1.5)
    b = step_compare.pick([str(trace("b", 0.0))], 1.5)
    assert step_compare.decode_table(a, b, 20)[1].endswith(" 1.000")
    (line,) = step_compare.prefill_table(a, b, 20)[1:]
    assert line.startswith("prefill[tokens=300-999]: n 50/50")
    assert "g1 7.00/5.00 (+2.00)" in line and "g0-g2 32.00/30.00 (+2.00)" in line


def test_step_compare_takes_windows_of_recorded_runs_and_weighs_binned_rows(
    tmp_path: Path,
) -> None:
    """``FILE=SERVER/TRACE@S-E`` keeps each recorded run's iterations inside the window (one
    stretch per run and window); ``--bin`` pools batch sizes, and the weighted line averages
    the rows' A / B by their smaller step count."""
    import json

    import step_compare

    recs = [[100.0 + 0.01 * i, "D", 8 + i % 2, 0, 0, 8, 1000] for i in range(300)]
    recs += [[200.0 + 0.011 * i, "D", 8 + i % 2, 0, 0, 8, 1000] for i in range(300)]
    it = tmp_path / "iter-1.jsonl"
    it.write_text("".join(json.dumps(r) + "\n" for r in recs))
    runs = tmp_path / "runs.jsonl"
    rows = [
        {"server": "s_a", "trace": "t", "t0": 100.0},
        {"server": "s_b", "trace": "t", "t0": 200.0},
    ]
    runs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    a = step_compare.pick([f"{it}=s_a/t@0-1,2-2.5"], 1.5, runs)
    b = step_compare.pick([f"{it}=s_b/t@0-3"], 1.5, runs)
    assert [len(x) for x in a] == [100, 50] and [len(x) for x in b] == [273]
    table = step_compare.decode_table(a, b, 20, bin_bs=8)
    assert table[1] == "decode[bs=8-15]: 10.000 (144) 11.000 (270) 0.909"
    assert table[-1] == "decode[weighted]: A / B 0.909 over 1 rows"
    with pytest.raises(SystemExit, match="need --runs"):
        step_compare.pick([f"{it}=s_a/t@0-1"], 1.5)
    with pytest.raises(SystemExit, match="no run of s_c on t"):
        step_compare.pick([f"{it}=s_c/t@0-1"], 1.5, runs)
    with pytest.raises(SystemExit, match="START-END in seconds"):
        step_compare.pick([f"{it}=s_a/t@8"], 1.5, runs)
    # a server started twice writes one file per start: a run the file does not hold is left out
    rows.append({"server": "s_a", "trace": "t", "t0": 900.0})
    runs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [len(x) for x in step_compare.pick([f"{it}=s_a/t@0-1"], 1.5, runs)] == [100]
    with pytest.raises(SystemExit, match="no iteration inside those windows"):
        step_compare.pick([f"{it}=s_a/t@50-60"], 1.5, runs)


def test_next_rep_numbers_a_second_driver_after_the_first(tmp_path: Path) -> None:
    """A driver into a folder that holds runs numbers its repetitions after theirs (the
    summary pairs runs by repetition, and request records are named by it)."""
    import json

    path = tmp_path / "runs.jsonl"
    assert summary.next_rep(path) == 0
    recs = [
        {"started": "2026-12-03 14:00:00 UTC", "argv": []},
        {"server": "nospec", "start_s": 1.0, "kv_tokens": 10},
        {"server": "nospec", "trace": "light", "rep": 0, "tok_s": 1.0},
        {"server": "nospec", "trace": "light", "rep": 1, "tok_s": 1.0},
        {"server": "nospec", "stopped": True},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs[:2]))
    assert summary.next_rep(path) == 0  # a header and a server record: no run yet
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert summary.next_rep(path) == 2


def test_drained_figures_count_every_token_to_the_last_request(tmp_path: Path) -> None:
    """Beside the window's figure, each server's finished tokens over the time to its last
    request's end, and the goal ratios on it, marked as information; a run without the figure
    (one read back from a driver log) leaves its server out."""
    import json

    recs: list[dict[str, object]] = []
    for lab, drained in (("nospec", 200.0), ("eagle", 150.0), ("specfsm_goodput", 198.0)):
        recs.append({"server": lab.split("_")[0], "start_s": 1.0, "kv_tokens": 100})
        phases = [{"phase": p, "tok_s": 1.0} for p in ("c16", "c256", "c64", "c256")]
        recs.append(
            {
                "server": lab,
                "trace": "heavy",
                "rep": 0,
                "tok_s": 1.0,
                "lost": 0,
                "phases": phases,
                "finished_tok_per_s_to_last": drained,
            }
        )
    recs.append(
        {
            "server": "specfsm_plain",
            "trace": "heavy",
            "rep": 0,
            "tok_s": 1.0,
            "lost": 0,
            "phases": recs[-1]["phases"],
        }
    )
    (tmp_path / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    lines = summary.summarize(
        tmp_path / "runs.jsonl", {"heavy": traces.builtin("gpu", 7.0)["heavy"]}
    )
    assert "serve_drained_tok_s[heavy][nospec]: 200.0 (reps 200.0; spread 0.0%)" in lines
    assert not any(x.startswith("serve_drained_tok_s[heavy][specfsm_plain]") for x in lines)
    assert (
        "serve_specfsm_vs_best_static_drained[heavy]: 0.990 (reps 0.990; spread 0.0%)"
        " (goal none: info)"
    ) in lines
    assert not any(x.startswith("serve_plain_vs_nospec_server_drained") for x in lines)
    # without a stock EAGLE run the drained best-static line says so, as the window's does
    kept = [r for r in recs if r["server"] != "eagle"]
    (tmp_path / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    lines = summary.summarize(
        tmp_path / "runs.jsonl", {"heavy": traces.builtin("gpu", 7.0)["heavy"]}
    )
    assert (
        "serve_specfsm_vs_best_static_drained[heavy]: 0.990 (reps 0.990; spread 0.0%)"
        " (goal none: info) (no eagle run: against nospec alone)"
    ) in lines


def test_switches_of_a_run_are_its_load_transitions_inside_its_window(tmp_path: Path) -> None:
    """The load switches a run's policy decided (LOAD_HIGH / LOAD_LOW inside its window) go
    into its record and, per server and trace, into the summary."""
    import json

    import iters

    log = tmp_path / "transitions-rank0.jsonl"
    lines = [
        {"event": "specfsm.config", "ts": 5.0},
        {"event": "specfsm.transition", "trigger": "LOAD_HIGH", "ts": 9.0},  # before the run
        {"event": "specfsm.transition", "trigger": "LOAD_HIGH", "ts": 10.0},
        {"event": "specfsm.transition", "trigger": "DRAINED", "ts": 10.1},
        {"event": "specfsm.transition", "trigger": "LOAD_LOW", "ts": 12.5},
        {"event": "specfsm.transition", "trigger": "LOAD_HIGH", "ts": 20.0},  # after it
    ]
    log.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert iters.switches(log, 10.0, 20.0) == 2
    phases = [{"phase": p, "tok_s": 1.0} for p in ("c16", "c256", "c64", "c256")]
    recs = [
        {"server": "specfsm_goodput", "trace": "heavy", "rep": r, "tok_s": 1.0, "lost": 0,
         "phases": phases, "switches": n}
        for r, n in ((0, 13), (1, 9))
    ]  # fmt: skip
    (tmp_path / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    out = summary.summarize(tmp_path / "runs.jsonl", {"heavy": traces.builtin("gpu", 7.0)["heavy"]})
    assert (
        "serve_switches[heavy][specfsm_goodput]: 11.0 (reps 13.0, 9.0; spread 36.4%)"
        " (load switches per run)"
    ) in out


def test_phase_iterations_split_a_run_by_phase_and_summarize_as_one_line() -> None:
    """Each phase's prefill seconds, decode iterations and batch come from the iterations
    launched inside it; the summary line gives the fewest-most decode iterations over runs."""
    import iters

    # [t, kind, bs, extend tokens, queued, running, free KV tokens]; an iteration lasts to the
    # next one's launch
    recs = [
        [100.0, "E", 2, 2000, 3, 2, 900],
        [100.5, "D", 4, 0, 0, 4, 880],
        [100.6, "D", 4, 0, 0, 4, 870],
        [101.0, "D", 8, 0, 1, 8, 850],
        [101.2, "E", 1, 500, 0, 8, 800],
        [101.4, "D", 8, 0, 0, 8, 790],
        [102.0, "D", 8, 0, 0, 8, 790],
    ]
    ph = iters.phase_windows(recs, 100.0, [(0.0, 1.0), (1.0, 2.0)])
    assert ph[0]["prefill_s"] == pytest.approx(0.5)
    assert ph[0]["decode_n"] == 1 and ph[0]["decode_bs"] == 4
    assert ph[0]["queue_max"] == 3 and ph[0]["free_kv_min"] == 870
    # no decode in either phase comes after two decodes: no steady step
    assert ph[0]["decode_steady_ms"] is None and ph[1]["decode_steady_ms"] is None
    assert ph[1]["prefill_s"] == pytest.approx(0.2)
    assert ph[1]["decode_n"] == 1 and ph[1]["running_max"] == 8
    other = [dict(p, decode_n=p["decode_n"] + 2) for p in ph]
    line = iters.phase_line(
        "bursty",
        "nospec",
        ["rps2", "rps40"],
        [{"phase_iters": ph}, {"phase_iters": other}, {"tok_s": 1.0}],
    )
    assert line is not None
    assert line.startswith("serve_phase_iters[bursty][nospec]: rps2=prefill 0.5s decode 1-3x bs4 ")
    assert "2 runs" in line
    assert " at " not in line.split(" (info")[0]
    # the decode at 101.0 ran with a request waiting: admission was blocked 1.0 s into phase 0
    assert ph[0]["blocked_at"] is None and ph[0]["blocked_n"] == 0
    assert ph[1]["blocked_at"] == pytest.approx(0.0) and ph[1]["blocked_n"] == 1
    assert "blocked" not in line.split("rps40=")[0]
    assert "rps40=prefill 0.2s decode 1-3x bs8 blocked from 0.000s (1x) (" in line


def test_a_phase_s_first_blocked_decode_is_read_over_runs_earliest_to_latest() -> None:
    """Decodes launched while requests wait (admission blocked): the first one's time into the
    phase and how many, earliest-latest over the runs; a run with none adds no time."""
    import iters

    def run(first: float, n: int) -> dict[str, Any]:
        recs = [[10.0, "E", 8, 8000, 0, 8, 500]]
        recs += [[10.0 + first + 0.01 * i, "D", 256, 0, 3, 256, 0] for i in range(n)]
        recs += [[10.9, "D", 256, 0, 0, 256, 0]]
        return {"phase_iters": iters.phase_windows(recs, 10.0, [(0.0, 1.0)])}

    runs = [run(0.729, 11), run(0.742, 10)]
    assert runs[0]["phase_iters"][0]["blocked_at"] == pytest.approx(0.729)
    quiet = {"phase_iters": [dict(runs[0]["phase_iters"][0], blocked_at=None, blocked_n=0)]}
    line = iters.phase_line("bursty", "nospec", ["rps40"], [*runs, quiet])
    assert line is not None
    assert " blocked from 0.729-0.742s (0-11x) (" in line


def test_a_phase_s_steady_decode_step_is_a_decode_launched_after_two_decodes() -> None:
    """The gap after a decode that two decodes preceded (served_steps.py's clean step): the
    decodes right after a prefill carry its time with overlap on, so they are left out."""
    import iters

    recs = [[10.0, "E", 2, 900, 0, 2, 500]]
    recs += [[10.5 + 0.01 * i, "D", 2, 0, 0, 2, 500] for i in range(4)]  # 10 ms apart
    recs += [[10.54, "E", 1, 100, 0, 3, 400], [10.7, "D", 3, 0, 0, 3, 400]]
    (ph,) = iters.phase_windows(recs, 10.0, [(0.0, 1.0)])
    assert ph["decode_steady_ms"] == pytest.approx(10.0)  # 10.52 -> 10.53 and 10.53 -> 10.54
    line = iters.phase_line("light", "eagle", ["c1"], [{"phase_iters": [ph]}])
    assert line is not None and "c1=prefill" in line and " at 10.00 ms " in line
    assert iters.phase_line("bursty", "nospec", ["rps2"], [{"phase_iters": ph}]) is None


def test_runs_recorded_without_phase_iterations_get_them_from_an_unpacked_folder(
    tmp_path: Path,
) -> None:
    """A results folder's iteration traces, unpacked into ``iters/``, give older runs their
    per-phase figures; a specfsm variant reads the ``specfsm`` server's traces."""
    import json

    import iters

    d = tmp_path / "iters" / "specfsm"
    d.mkdir(parents=True)
    rows = [[10.0, "E", 1, 100, 0, 1, 50], [10.4, "D", 2, 0, 0, 2, 40], [10.6, "D", 2, 0, 0, 2, 40]]
    (d / "iter-1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    runs = [
        {"server": "specfsm_goodput", "trace": "bursty", "t0": 10.0},
        {"server": "nospec", "trace": "bursty", "t0": 10.0},  # no traces of its own here
        {"server": "specfsm_example", "trace": "bursty", "t0": 10.0, "phase_iters": []},
        # recorded before the steady decode step was: filled again
        {"server": "specfsm_spec", "trace": "bursty", "t0": 10.0, "phase_iters": [{"x": 1}]},
    ]
    iters.fill_phase_iters(tmp_path, runs, {"bursty": [(0.0, 1.0)]})
    assert runs[0]["phase_iters"][0]["prefill_s"] == pytest.approx(0.4)
    assert runs[0]["phase_iters"][0]["decode_n"] == 1
    assert "decode_steady_ms" in runs[0]["phase_iters"][0]
    assert "phase_iters" not in runs[1] and runs[2]["phase_iters"] == []
    assert runs[3]["phase_iters"] == runs[0]["phase_iters"]


def test_a_ratio_of_two_or_more_repetitions_carries_the_95_percent_interval_of_its_mean() -> None:
    """Three repetitions 0.999 / 0.952 / 0.963: mean 0.971, and with t(2) = 4.303 the interval
    reaches past 1.00, so such a miss is within the runs' own scatter; one repetition has no
    interval."""
    from ratios import interval95, ratio_line

    lo, hi = interval95([0.999, 0.952, 0.963]) or (0.0, 0.0)
    assert (round(lo, 3), round(hi, 3)) == (0.910, 1.032)
    line = ratio_line("x[bursty]", {0: 0.999, 1: 0.952, 2: 0.963}, {0: 1, 1: 1, 2: 1}, ">= 1.00")
    assert line == (
        "x[bursty]: 0.971 (reps 0.999, 0.952, 0.963; spread 4.8%; 95% interval 0.910-1.032)"
        " (goal >= 1.00)"
    )
    assert ratio_line("y", {0: 0.99}, {0: 1.0}, ">= 1.00") == (
        "y: 0.990 (reps 0.990; spread 0.0%) (goal >= 1.00)"
    )
    assert interval95([1.0]) is None


def test_a_miss_is_also_told_in_tokens_beside_one_decode_iteration_at_the_largest_batch() -> None:
    """Two bursty repetitions 5.8 and 6.3 tok/s short of the better static server over a 28 s
    window: 162 and 176 tokens a run, under the 256 one decode iteration at the cap makes."""
    from ratios import tokens_line

    line = tokens_line("x[bursty]", {0: 1158.1, 1: 1149.1}, {0: 1163.9, 1: 1155.4}, 28.0, 256)
    assert line == (
        "x[bursty]: -169 tokens a run (reps -162, -176) (info: the window's tokens beside the "
        "reference's; one decode iteration at the runs' largest batch makes 256)"
    )
    assert tokens_line("y", {0: 1.0}, {1: 1.0}, 28.0, 256) is None  # no repetition in common
    assert tokens_line("z", {0: 2.0}, {0: 1.0}, 10.0, 0) == (
        "z: +10 tokens a run (reps +10) (info: the window's tokens beside the reference's)"
    )


def test_runs_of_another_trace_are_refused() -> None:
    """A summary of runs whose driver measured other phases than the trace given refuses, and
    names both: their ratios would compare unlike loads."""
    bursty = traces.builtin("gpu", 7.0)["bursty"]
    labels = [p.label() for p in bursty.phases]
    traces.check_measured([{"traces": {"bursty": labels}, "phase_s": 7.0}], {"bursty": bursty}, "x")
    traces.check_measured([{"traces": {"other": ["c1"]}, "phase_s": 3.0}], {"bursty": bursty}, "x")
    with pytest.raises(
        ValueError, match=r"^sim_lines: trace bursty is .* x 7 s, the runs measured"
    ):
        traces.check_measured(
            [{"traces": {"bursty": labels}, "phase_s": 8.0}], {"bursty": bursty}, "sim_lines"
        )


def test_a_runs_record_keeps_the_clients_tokens_per_bin() -> None:
    """The run's record keeps the tokens the client received per 0.1 s bin (summed over its
    requests, bin 0 at the trace's start), so the window's tokens can be read again from it:
    the bins inside the window add up to its tok/s."""
    import client

    recs: list[dict[str, Any]] = [{"bins": {"0": 3, "2": 1}}, {"bins": {"2": 2, "5": 4}}, {}]
    assert client.token_bins(recs) == [3, 0, 3, 0, 0, 4]
    assert client.token_bins([]) == []
    light = traces.builtin("cpu", 0.2)["light"]  # four phases of 0.2 s: bins 0-7
    done = {"status": "done", "phase": 0, "tokens": 4, "max_new_tokens": 4, "t_end": 0.9}
    recs = [{**done, "bins": {"1": 2, "7": 1, "8": 1}}, {**done, "bins": {"3": 4}}]
    m = summary.metrics(light, recs)
    assert m["tok_bins"] == [0, 2, 0, 4, 0, 0, 0, 1, 1]
    assert sum(m["tok_bins"][: round(light.seconds / client.BIN_S)]) == round(
        m["tok_s"] * light.seconds
    )
