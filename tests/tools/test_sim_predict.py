"""The simulator's prediction beside the measured serving run (benchmarks/serving/sim_predict.py):
every server predicts on both measured traces, the prefill-bound heavy trace ranks the server
without a draft above pinned SPECULATING, and the committed runs.jsonl turns into its lines."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "serving"))

import sim_lines
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
    prompt, out = sim_predict.mean_lengths(tr)
    reqs = [traces.request(tr, k) for k in range(len(traces.arrivals(tr)))]
    assert prompt == sum(len(r.prompt) for r in reqs) / len(reqs)
    wl = sim_predict._workload(tr)
    assert abs((wl.prompt_len[0] + wl.prompt_len[1]) / 2 - prompt) <= 1
    assert abs((wl.output_len[0] + wl.output_len[1]) / 2 - out) <= 1


def test_sim_lines_parse_the_committed_run() -> None:
    runs = sim_predict.RESULTS / "runs.jsonl"
    lines = sim_lines.sim_lines(runs, {k: TRACES[k] for k in MEASURED}, seeds=1)
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


def test_adaptive_runs_the_served_release_and_graph_sizes() -> None:
    """The simulated adaptive server is 0.5.17's, as served: its default config (no 5 steps at
    bs 1) and the served CUDA-graph sizes, to which a batch pads before its slot is chosen (25
    requests pad to 32: 0 or 1 draft steps; 49 pad to 64: none)."""
    import servers

    assert list(sim_predict.GPU_GRAPH_BS) == servers.GPU_GRAPH_BS
    ctl = sim_predict.controller("adaptive", "h200_sglang0517_llama8b", 2.4)
    assert ctl.candidate_steps(1) == [1, 3, 7]  # type: ignore[attr-defined]
    assert ctl.candidate_steps(24) == [0, 1, 3]  # type: ignore[attr-defined]
    assert ctl.candidate_steps(25) == [0, 1]  # type: ignore[attr-defined]
    assert ctl.candidate_steps(48) == [0, 1]  # type: ignore[attr-defined]
    assert ctl.candidate_steps(49) == [0]  # type: ignore[attr-defined]


def test_a_decode_miss_is_named_with_its_phase() -> None:
    """A miss whose worst phase's measured TPOT is far from the simulator's is a decode miss:
    the line names the phase, both TPOTs and what the server runs there; a miss without such
    a phase falls back to the prefill explanation."""
    import sim_miss

    light = traces.builtin("gpu", 7.0)["light"]
    phases = [
        {"tok_s": t, "tpot_p50_ms": tp}
        for t, tp in ((224.0, 3.9), (1089.0, 6.4), (961.0, 28.0), (943.0, 5.4))
    ]
    rec = {"phases": phases, "iters": {"prefill": {"ms_mean": 44.0, "extend_tokens_mean": 1469.0}}}
    sim = [212.0, 1043.0, 1993.0, 897.0]
    kw = {"prompt_mean": 1200.0, "prefill_us": (23.17, 1.55), "arrivals": []}
    line = sim_miss.why(
        light, [rec], "adaptive", 1.289, sim, [4.0, 6.0, 14.3, 5.5], ran={2: "1 draft step"}, **kw
    )
    assert line.startswith("# miss[light][adaptive]: over by 29%")
    assert "decode, not prefill: in c32" in line and "28.0 ms" in line and "14.3 ms" in line
    assert line.endswith("; 1 draft step")
    near = sim_miss.why(light, [rec], "adaptive", 1.289, sim, [4.0, 6.0, 25.0, 5.5], **kw)
    assert "host time between prefills" in near


def test_the_simulator_reports_tpot_per_phase() -> None:
    """`simulate` gives a TPOT per phase beside its tok/s: at 32 requests a decode step is
    shared by more requests than at 1, so a request waits longer per token."""
    tok, tpot = sim_predict.simulate(traces.builtin("gpu", 7.0)["light"], "nospec", seeds=1)
    assert len(tok) == len(tpot) == 4
    assert all(t > 0 for t in tpot) and tpot[2] > tpot[0]


def test_runs_of_another_card_than_the_tables_are_said_so(tmp_path: Path) -> None:
    """The runs' header names their card; the simulator's lines say when its table is of
    another card (its decode steps are then priced from that card), and the summary's header
    names the card."""
    import json

    import summary

    recs = [json.loads(x) for x in (sim_predict.RESULTS / "runs.jsonl").read_text().splitlines()]
    for card, said in (("NVIDIA H100 80GB HBM3", True), ("NVIDIA H200", False)):
        runs = tmp_path / card.replace(" ", "_") / "runs.jsonl"
        runs.parent.mkdir()
        runs.write_text(
            "".join(json.dumps({**r, "device": card} if "started" in r else r) + "\n" for r in recs)
        )
        lines = sim_lines.sim_lines(
            runs, {"bursty": TRACES["bursty"]}, table="h200_sglang0517_llama8b", seeds=1
        )
        note = "# the table's card is the H200; these runs' is NVIDIA H100 80GB HBM3"
        assert any(x.startswith(note) for x in lines) is said, card
        head = runs.parent / "head" / "runs.jsonl"
        head.parent.mkdir()
        head.write_text(json.dumps({"started": "x", "bed": "gpu", "device": card}) + "\n")
        assert f"# device: {card}" in summary.summarize(head, {})


def test_the_shapes_example_is_simulated_as_its_drivers_served_it() -> None:
    """``specfsm_shapes`` is simulated as ``--shapes-set`` set it on its server (its server
    record) and launched at its policy's shape, as the benchmark launches it
    (launch.shapes_launch); servers of one folder started with different keys are refused
    (their runs were different servers), a merge's own header is no server."""
    import json

    import launch
    import pytest

    table = "h200_sglang0517_llama8b"
    shipped = sim_predict.controller("specfsm_shapes", table, 3.0)
    assert shipped.shape == sim_predict.SHAPES_LAUNCH  # chain 7
    policy = json.loads(sim_predict.SHAPES_EXAMPLE.read_text())["policy"]
    three = {"shapes": ["chain1", "chain2"], "policy": {**policy, "shape": "chain3"}}
    started = {"server": "specfsm_shapes", "start_s": 120.0, "kv_tokens": 1}
    run = {"server": "specfsm_shapes", "trace": "bursty", "start_s": 1.0}
    merged = [{"argv": ["merge.py"]}, {**started, "shapes_set": three}, run]
    assert launch.shapes_set_of([*merged, {**started, "shapes_set": three}]) == three
    assert launch.shapes_set_of([started, {"server": "nospec", "start_s": 1.0}]) == {}
    with pytest.raises(ValueError, match="different --shapes-set"):
        launch.shapes_set_of([{**started, "shapes_set": three}, started])
    ctl = sim_predict.controller("specfsm_shapes", table, 3.0, three)
    assert ctl.shape == sim_predict.SHAPE  # chain 3
    v = sim_predict.predict(TRACES["bursty"], "specfsm_shapes", seeds=1, shapes_set=three)
    assert math.isfinite(v) and v > 0


def test_a_tables_nodraft_step_prices_the_server_without_a_draft(tmp_path: Path) -> None:
    """A served table's ``nodraft_step`` rows (`served_steps.py --nodraft`) price the no-spec
    server's decode steps: twice the step, fewer tokens; the packaged H100 served table prices
    it and, merged over the H200's forwards, names both cards, so runs on an H100 are not
    said to be priced from another card; the summary picks it for runs on an H100."""
    import json

    served = tmp_path / "slow_served.csv"
    rows = ["model,bs,q,ctx,ms_per_step"]
    rows += [f"nodraft_step,{bs},1,1183,{ms}" for bs, ms in ((1, 12.0), (32, 18.0), (256, 42.0))]
    served.write_text("\n".join(rows) + "\n")
    light = traces.builtin("gpu", 7.0)["light"]
    base = sum(sim_predict.simulate(light, "nospec", seeds=1)[0])
    slow = sum(
        sim_predict.simulate(light, "nospec", f"h200_sglang0517_llama8b+{served}", seeds=1)[0]
    )
    assert slow < 0.8 * base
    table = "h200_sglang0517_llama8b+h100_sglang0517_llama8b_served"
    h100 = sum(sim_predict.simulate(light, "nospec", table, seeds=1)[0])
    assert slow < h100 < base
    recs = [json.loads(x) for x in (sim_predict.RESULTS / "runs.jsonl").read_text().splitlines()]
    runs = tmp_path / "runs.jsonl"
    card = "NVIDIA H100 80GB HBM3"
    runs.write_text(
        "".join(json.dumps({**r, "device": card} if "started" in r else r) + "\n" for r in recs)
    )
    # the table the summary picks for runs on an H100 by itself ("auto"), named in its header
    assert sim_lines.table_for([card]) == table
    assert sim_lines.table_for(["NVIDIA H200", card]) == "h200_sglang0517_llama8b"
    assert sim_lines.table_for([]) == "h200_sglang0517_llama8b"
    lines = sim_lines.sim_lines(runs, {"bursty": TRACES["bursty"]}, seeds=1)
    assert not any(x.startswith("# the table's card is") for x in lines)
    assert f"table {table}," in lines[0]
