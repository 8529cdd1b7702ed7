"""The serving benchmark's server-side parts: the start-up profile kept with a run, the shapes
example as a server of its own, a server that starts again on another port when its port was
taken, a merge that refers to its sources' requests and keeps a failed start, the host probe
beside the servers and the goal ratios over runs on a host of one speed, the GPU bed's memory
fraction and the shapes example's overrides."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "serving"))

import summary
import traces


def test_the_start_up_profile_rows_are_kept_with_the_run(tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import argparse
    import json

    import serving_bench

    args = argparse.Namespace(goodput=json.dumps({"name": "goodput"}), profile=None)
    assert "profile" not in serving_bench.fsm_config(args, tmp_path)
    args.profile = json.dumps({"bs": [1, 4]})
    cfg = serving_bench.fsm_config(args, tmp_path)
    assert cfg["profile"] == {
        "bs": [1, 4],
        "save": str(tmp_path / "specfsm" / "profile-{rank}.csv"),
    }
    args.profile = json.dumps({"bs": [1], "save": "/elsewhere/p-{rank}.csv"})
    assert serving_bench.fsm_config(args, tmp_path)["profile"]["save"] == "/elsewhere/p-{rank}.csv"


def test_the_shapes_example_is_a_server_of_its_own(tmp_path: Path) -> None:
    """``specfsm_shapes``: EAGLE launched at chain 7 with the plugin and the shapes example as
    shipped (its own log, the bench's control file), or at the shape its policy names; the
    summary judges it like the other configurations and sets its KV pool beside the stock
    server's."""
    import gzip
    import json

    import launch
    import servers

    cfg = launch.shapes_config(Path("/x"))
    shipped = json.loads(launch.SHAPES_EXAMPLE.read_text())
    assert cfg["policy"] == shipped["policy"] and cfg["shapes"] == shipped["shapes"]
    # the example prices serving as the served goodput configuration does: a key changed in
    # one and not the other would serve two different policies under one name
    for key in ("table", "price_queued", "prefill_ms_per_token", "reversal_window"):
        assert shipped["policy"][key] == launch.GPU_GOODPUT[key], key
    assert cfg["log"] == "/x/transitions-rank{rank}.jsonl" and "control_file" not in cfg
    # the shipped start-up profile, its rows kept beside the log (not the specfsm server's file)
    assert cfg["profile"] == {**shipped["profile"], "save": "/x/profile_shapes-{rank}.csv"}
    small = launch.shapes_config(Path("/x"), "cpu")["profile"]
    assert small == {**launch.CPU_SHAPES_PROFILE, "save": "/x/profile_shapes-{rank}.csv"}
    # --shapes-set: keys set on the example as shipped, the rest kept
    capped = launch.shapes_config(Path("/x"), "gpu", {"shape_graph_max_bs": 64})
    assert capped["shape_graph_max_bs"] == 64 and capped["shapes"] == shipped["shapes"]
    bed = servers.Bed("gpu", tmp_path)
    assert bed.engine_args("specfsm_shapes")["speculative_num_steps"] == 7
    assert bed.engine_args("specfsm_shapes")["speculative_num_draft_tokens"] == 8
    assert bed.engine_args("specfsm")["speculative_num_steps"] == 3
    # the launch follows the config's policy shape: a chain-3 candidate is set by keys alone
    assert launch.shapes_launch(cfg) == launch.CHAIN7
    three = {"shapes": ["chain1", "chain2"], "policy": {**shipped["policy"], "shape": "chain3"}}
    server = servers.Server(
        bed, "specfsm_shapes", tmp_path / "s.log", launch.shapes_config(tmp_path, "gpu", three)
    )
    argv = " ".join(server.argv())
    assert "--speculative-num-steps 3 " in argv and "--speculative-num-draft-tokens 4 " in argv
    assert launch.launch_args("4,2,16") == {
        "speculative_num_steps": 2,
        "speculative_eagle_topk": 4,
        "speculative_num_draft_tokens": 16,
    }
    with pytest.raises(ValueError, match="expected chainN or K,S,N"):
        launch.launch_args("chain0")
    assert bed.server_env("specfsm_shapes")["SGLANG_PLUGINS"] == "specfsm"
    assert "SGLANG_PLUGINS" not in bed.server_env("eagle") or (
        "specfsm" not in bed.server_env("eagle")["SGLANG_PLUGINS"]
    )

    light = traces.builtin("gpu", 7.0)["light"]
    (tmp_path / "requests").mkdir()
    recs: list[dict[str, object]] = []
    for lab, tok, kv in (
        ("nospec", 100.0, 110),
        ("eagle", 90.0, 100),
        ("specfsm_shapes", 105.0, 99),
    ):
        phases = [{"phase": p.label(), "tok_s": tok} for p in light.phases]
        recs.append({"server": lab, "start_s": 1.0, "kv_tokens": kv})
        recs.append(
            {"server": lab, "trace": "light", "rep": 0, "tok_s": tok, "lost": 0, "phases": phases}
        )
        with gzip.open(tmp_path / "requests" / f"{lab}_light_rep0.jsonl.gz", "wt") as fh:
            fh.write(json.dumps({"k": 0, "status": "done", "ids_sha": "a"}) + "\n")
    (tmp_path / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    lines = summary.summarize(tmp_path / "runs.jsonl", {"light": light})
    assert any(x.startswith("serve_specfsm_shapes_vs_best_static[light]: 1.050") for x in lines)
    assert any(x.startswith("serve_specfsm_shapes_vs_phase_oracle[light]: 1.050") for x in lines)
    kv_line = next(x for x in lines if x.startswith("serve_kv_tokens_shapes_vs_stock_server"))
    assert kv_line.startswith("serve_kv_tokens_shapes_vs_stock_server: 0.990")
    assert "launched at chain7 with its example's extra shapes" in kv_line
    # a candidate launch (--shapes-set) is named by its own shape and extra shapes
    recs[4]["shapes_set"] = {"shapes": ["chain1", "chain2"], "policy": {"shape": "chain3"}}
    (tmp_path / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    lines = summary.summarize(tmp_path / "runs.jsonl", {"light": light})
    assert any("launched at chain3 with extra shapes chain1,chain2" in x for x in lines)


_STAND_IN = """
import http.server, socket, sys, time
port = int(sys.argv[1])
s = socket.socket()
try:
    s.bind(("127.0.0.1", port))
except OSError:
    # what uvicorn prints when its port was taken; the process then waits without serving
    print(f"ERROR: [Errno 98] error while attempting to bind on address "
          f"('127.0.0.1', {port}): address already in use", flush=True)
    time.sleep(60)
s.close()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def test_a_server_whose_port_was_taken_starts_again_on_another(tmp_path: Path) -> None:
    """A port taken between the draw and the bind (uvicorn logs it and waits without serving)
    is drawn again at once instead of waiting out the start-up timeout."""
    import socket
    import time

    import servers

    class StandIn(servers.Server):
        def argv(self) -> list[str]:
            return [sys.executable, "-c", _STAND_IN, str(self.port)]

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    srv = StandIn(servers.Bed("gpu", tmp_path), "nospec", tmp_path / "server.log")
    srv.port = taken.getsockname()[1]
    said: list[str] = []
    t0 = time.monotonic()
    try:
        srv.start(60.0, said.append)
        assert srv.port != taken.getsockname()[1]
        assert servers.PORT_RANGE[0] <= srv.port < servers.PORT_RANGE[1]
        assert time.monotonic() - t0 < 30.0
        assert len(said) == 1 and "was taken" in said[0] and str(srv.port) in said[0]
    finally:
        srv.stop()
        taken.close()


def test_a_merge_that_refers_reads_the_sources_requests(tmp_path: Path) -> None:
    """``merge.py --refer``: no copy of the sources' request files, each run names its own
    (relative to the merged folder), and the summary's readers find them there."""
    import gzip
    import json

    import merge

    src = tmp_path / "machine"
    (src / "requests").mkdir(parents=True)
    run = {"server": "nospec", "trace": "light", "rep": 1, "tok_s": 10.0}
    (src / "runs.jsonl").write_text(
        json.dumps({"started": "x", "bed": "gpu"}) + "\n" + json.dumps(run) + "\n"
    )
    with gzip.open(src / "requests" / "nospec_light_rep1.jsonl.gz", "wt") as fh:
        fh.write(json.dumps({"rid": "a", "output_ids": [1, 2]}) + "\n")
    out = tmp_path / "merged"
    merge.merge([(src, 4, set())], out, ["merge.py"], refer=True)
    assert not (out / "requests").exists()
    recs = [json.loads(x) for x in (out / "runs.jsonl").read_text().splitlines()]
    (merged,) = [r for r in recs if "trace" in r]
    assert (
        merged["rep"] == 5
        and merged["requests_file"] == "../machine/requests/nospec_light_rep1.jsonl.gz"
    )
    assert summary._requests(out, merged) == [{"rid": "a", "output_ids": [1, 2]}]
    assert summary._requests(out, {**run, "rep": 5}) == []  # no copy under out/requests/


def test_the_host_probe_samples_beside_the_servers(tmp_path: Path) -> None:
    """The host sampler runs as a process of its own, a line per period; a run's seconds
    reduce to its loop time, steal and pressure, printed per run in the summary; a run
    outside its samples gets none, and a half-written line is skipped."""
    import time

    import host_probe

    path = tmp_path / "host" / "probe.jsonl"
    t0 = time.time()
    proc = host_probe.start(path)
    deadline = time.time() + 60  # a loaded machine starts the interpreter late
    while time.time() < deadline and (not path.exists() or len(path.read_text().splitlines()) < 6):
        time.sleep(0.2)
    host_probe.stop(proc)
    t1 = time.time()
    assert proc.returncode is not None
    with open(path, "a") as fh:
        fh.write("[1796454264.2, 0.9")  # cut mid-line
    w = host_probe.window(path, t0, t1)
    assert w is not None and w["samples"] >= 5
    assert 0 < w["loop_ms_p50"] <= w["loop_ms_p90"] and 0 <= w["steal_max"] <= 1
    assert host_probe.window(path, t1 + 10, t1 + 20) is None
    text = host_probe.line("light", "nospec", [{"rep": 3, "host": w}, {"rep": 4}])
    assert text is not None and text.startswith("serve_host_probe[light][nospec]: rep 3 loop ")
    assert "rep 4" not in text
    # against its machine: a run whose loop took 1.3x the median of the machine's runs says so
    slow = {**w, "loop_ms_p50": 1.3 * w["loop_ms_p50"]}
    runs = [{"rep": i, "host": w} for i in range(3)] + [{"rep": 3, "host": slow}]
    base = host_probe.baselines(runs)
    assert base == {"": w["loop_ms_p50"]}
    text = host_probe.line("light", "nospec", runs, base)
    assert text is not None and "rep 3 loop" in text and "(1.30x the machine's)" in text
    assert host_probe.line("light", "nospec", [{"rep": 4}]) is None


def test_a_goal_ratio_over_the_repetitions_run_on_a_host_of_one_speed() -> None:
    """Where a pair's two runs found the host's loop more than 5% apart, the goal's ratio is
    also given over the other pairs (info); where every pair matches, no such line."""
    import host_probe

    def run(server: str, rep: int, tok_s: float, loop: float) -> dict[str, object]:
        return {"server": server, "rep": rep, "tok_s": tok_s, "host": {"loop_ms_p50": loop}}

    spec = [run("specfsm_spec", 0, 785.0, 2.35), run("specfsm_spec", 1, 815.0, 2.30)]
    stock = [run("eagle", 0, 862.0, 1.99), run("eagle", 1, 839.0, 2.34)]
    assert host_probe.matched_reps(spec, stock) == {1}
    (line,) = summary._host_matched_line(
        "serve_spec_vs_stock_server_host_matched[light]", spec, stock
    )
    assert line.startswith("serve_spec_vs_stock_server_host_matched[light]: 0.971 (reps 0.971;")
    assert line.endswith("(goal none: info) (reps [1] of [0, 1]: host loops within 5%)")
    assert summary._host_matched_line("x", spec[1:], stock[1:]) == []
    assert summary._host_matched_line("x", [{**r, "host": None} for r in spec], stock) == []


def test_a_merge_keeps_a_server_that_failed_to_start(tmp_path: Path) -> None:
    """A server that never came up has no runs; the merged summary still counts its failure and
    names the folder it failed in, and a label filter that leaves it out drops it."""
    import json

    import merge

    src = tmp_path / "machine"
    src.mkdir()
    failed = {"server": "specfsm_shapes", "start_failed": "CUDA out of memory"}
    (src / "runs.jsonl").write_text(
        "\n".join(json.dumps(r) for r in ({"started": "x", "bed": "gpu"}, failed)) + "\n"
    )
    out = tmp_path / "merged"
    merge.merge([(src, 0, set())], out, ["merge.py"], refer=True)
    _, _, servers = summary._load(out / "runs.jsonl")
    assert servers == [{**failed, "source": "machine"}]
    merge.merge([(src, 0, {"nospec"})], tmp_path / "only", ["merge.py"], refer=True)
    assert summary._load(tmp_path / "only" / "runs.jsonl")[2] == []


def test_the_gpu_beds_memory_fraction_can_differ_for_one_server(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``MEM_FRACTION`` sets every GPU-bed server's pool, ``MEM_FRACTION_<SERVER>`` one
    server's (``MEM_FRACTION_SHAPES`` the shapes example's: extra states need room beside the
    pool on an 80 GiB card); a fraction outside (0, 1), or not a number, is refused before any
    server starts."""
    import gpu_bed
    import servers

    monkeypatch.delenv("MEM_FRACTION", raising=False)
    monkeypatch.setenv("MEM_FRACTION_SHAPES", "0.7")
    assert servers.Bed("gpu", tmp_path).engine_args("eagle")["mem_fraction_static"] == 0.8
    assert servers.Bed("gpu", tmp_path).engine_args("specfsm_shapes")["mem_fraction_static"] == 0.7
    monkeypatch.setenv("MEM_FRACTION", "0.75")
    monkeypatch.delenv("MEM_FRACTION_SHAPES")
    assert gpu_bed.mem_fraction("specfsm_shapes") == 0.75
    monkeypatch.setenv("MEM_FRACTION_ADAPTIVE", "0.72")
    assert gpu_bed.mem_fraction("adaptive") == 0.72
    assert gpu_bed.mem_fraction("eagle") == 0.75
    monkeypatch.setenv("MEM_FRACTION", "80")
    with pytest.raises(ValueError, match="not in"):
        gpu_bed.mem_fraction("nospec")
    monkeypatch.setenv("MEM_FRACTION_ADAPTIVE", "most")
    with pytest.raises(ValueError, match="not a number"):
        gpu_bed.mem_fraction("adaptive")


def test_a_server_that_exits_at_start_is_named_with_its_cause() -> None:
    """A server whose process ended before ``/health`` answered is reported with the last
    exception its log names (an 80 GiB card out of memory for SGLang's adaptive states), at
    the memory fraction it was started with; a log that names none gives the server alone."""
    import start_errors

    log = "\n".join(
        [
            "[10:05:20] Scheduler hit an exception: Traceback (most recent call last):",
            '  File "flashinfer_backend.py", line 2344, in init_cuda_graph_state',
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB. GPU 0 "
            "has a total capacity of 79.18 GiB of which 837.38 MiB is free.",
            "",
            "[10:05:20] Received sigquit from a child process.",
        ]
    )
    cause = "OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB."
    assert start_errors.exit_cause(log) == cause
    assert start_errors.exit_cause("[10:05:20] kill_process_tree called") == ""
    rec = {"server": "adaptive", "start_failed": log, "mem_fraction_static": 0.8}
    assert start_errors.failed_label(rec) == f"adaptive: {cause} (--mem-fraction-static 0.8)"
    rec = {"server": "adaptive", "start_failed": "exited with -9", "source": "machine28"}
    assert start_errors.failed_label(rec) == "adaptive in machine28"


_DIES = """
import sys
print("Traceback (most recent call last):", flush=True)
print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB. More.")
sys.exit(1)
"""


def test_a_server_process_that_dies_at_start_says_why_in_its_first_line(tmp_path: Path) -> None:
    """The start's error, whose first line the driver prints, carries the log's exception."""
    import servers
    import start_errors

    class Dies(servers.Server):
        def argv(self) -> list[str]:
            return [sys.executable, "-c", _DIES]

    srv = Dies(servers.Bed("gpu", tmp_path), "adaptive", tmp_path / "server.log")
    with pytest.raises(start_errors.ExitedAtStart) as got:
        srv.start(60.0, lambda _line: None)
    assert got.value.cause == "OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB."
    first = str(got.value).splitlines()[0]
    assert first == (
        "adaptive: server exited with 1 (OutOfMemoryError: CUDA out of memory. "
        "Tried to allocate 896.00 MiB.)"
    )


def test_oom_retry_lowers_the_fraction_only_for_running_out_of_memory() -> None:
    """``--oom-retry STEP:FLOOR``: the next fraction is STEP lower, to two places, while it
    stays at or above FLOOR, and only after a start that ran out of GPU memory; a spec that
    is not STEP:FLOOR is refused before any server starts."""
    import gpu_bed

    oom = "OutOfMemoryError: CUDA out of memory. Tried to allocate 1024.00 MiB."
    retry = gpu_bed.parse_oom_retry("0.05:0.7")
    assert retry == (0.05, 0.7)
    assert gpu_bed.oom_retry(oom, 0.8, retry) == 0.75
    assert gpu_bed.oom_retry(oom, 0.75, retry) == 0.7
    assert gpu_bed.oom_retry(oom, 0.7, retry) is None
    assert gpu_bed.oom_retry("RuntimeError: port taken", 0.8, retry) is None
    assert gpu_bed.oom_retry(oom, 0.8, None) is None
    assert gpu_bed.parse_oom_retry("") is None
    for bad in ("0.05", "a:b", "0.6:0.05:1", "0:0.6", "0.05:1.5"):
        with pytest.raises(ValueError, match="--oom-retry"):
            gpu_bed.parse_oom_retry(bad)


def test_a_server_out_of_memory_at_start_is_started_again_lower_down_to_the_floor(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With ``--oom-retry 0.05:0.7`` a server whose every start runs out of GPU memory is
    started at 0.8, 0.75 and 0.7, each failed start a record with its fraction, and then left
    (no runs, the driver goes on)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import argparse
    import io
    import json

    import servers
    import serving_bench

    class Dies(servers.Server):
        def argv(self) -> list[str]:
            return [sys.executable, "-c", _DIES]

    monkeypatch.setattr(serving_bench, "Server", Dies)
    monkeypatch.delenv("MEM_FRACTION", raising=False)
    monkeypatch.delenv("MEM_FRACTION_ADAPTIVE", raising=False)
    args = argparse.Namespace(
        bracket="",
        rep_base=0,
        start_timeout=60.0,
        oom_retry=(0.05, 0.7),
        iter_trace=False,
        sync_debug=False,
        bed="gpu",
    )
    log = io.StringIO()
    bed = servers.Bed("gpu", tmp_path)
    serving_bench.run_server("adaptive", args, bed, {}, tmp_path, log, range(1))
    recs = [json.loads(line) for line in log.getvalue().splitlines()]
    assert [r["mem_fraction_static"] for r in recs] == [0.8, 0.75, 0.7]
    assert all(r["server"] == "adaptive" and "start_failed" in r for r in recs)
    assert "MEM_FRACTION_ADAPTIVE" not in os.environ  # the bed's own, not the driver's


def test_shapes_set_that_is_not_an_object_is_refused_before_any_server(tmp_path: Path) -> None:
    """``--shapes-set`` takes a JSON object whose policy shape (the shapes server's launch) is
    a shape; anything else ends the command with a usage error, before a server starts."""
    import subprocess

    bench = Path(__file__).resolve().parents[2] / "benchmarks" / "serving_bench.py"
    for value, said in (
        ("[64]", "--shapes-set: expected a JSON object"),
        ('{"policy":{"name":"goodput","shape":"chain0"}}', "--shapes-set: draft shape 'chain0'"),
    ):
        got = subprocess.run(
            [sys.executable, str(bench), "--shapes-set", value, "--out", str(tmp_path / "o")],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert got.returncode == 2 and said in got.stderr, got.stderr[-500:]
        assert not (tmp_path / "o" / "runs.jsonl").exists()
