"""The torch-profiler window's report (`torch_profile`) on small synthetic chrome traces (plain
and gzipped): steps found from the scheduler's spans, graph vs non-graph kernels, busy and idle
per step, the host calls, the comparison of two reports; and the window's HTTP side
(`torch_profile_window`) against a fake server (no SGLang)."""

from __future__ import annotations

import gzip
import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "serving"))

import client
import torch_profile
import torch_profile_window
import traces


def x(cat: str, name: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "ts": ts,
        "dur": dur,
        "pid": 1,
        "tid": 7,
        "args": args,
    }


def decode_iter(k: int, extra_us: float = 0.0, by_args: bool = False) -> list[dict[str, Any]]:
    """One DECODE iteration at CPU time 1000k: a graph (gemm 400 us + attn 300 us), an
    argmax outside it, a device-to-host copy, and optionally one more outside kernel."""
    t, g, o, m = 1000.0 * k, 100 + k, 500 + k, 900 + k
    ev = [
        x("user_annotation", "scheduler.run_batch", t, 200),
        x("user_annotation", "step[DECODE bs=1]", t + 10, 100),
        x("gpu_user_annotation", "step[DECODE bs=1]", t + 30, 700),  # not a CPU span
        x("cuda_runtime", "cudaGraphLaunch", t + 20, 8, correlation=g),
        x("cuda_runtime", "cudaLaunchKernel", t + 50, 4, correlation=o),
        x("cuda_runtime", "cudaMemcpyAsync", t + 60, 4, correlation=m),
        x("kernel", "gemm", t + 30, 400, correlation=g, stream=7),
        x("kernel", "attn", t + 430, 300, correlation=g, stream=7),
        x("kernel", "argmax", t + 740, 50, correlation=o, stream=7),
        x("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", t + 800, 10, correlation=m, stream=7),
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "ts": t + 20, "id": g, "pid": 1, "tid": 7},
    ]
    if extra_us:
        c = 300 + k
        ev.append(x("cuda_driver", "cuLaunchKernel", t + 65, 4, correlation=c))
        extra = {"graph id": 3} if by_args else {}
        ev.append(x("kernel", "copy_hidden", t + 810, extra_us, correlation=c, **extra))
    return ev


def trace_events(extra_us: float = 0.0, by_args: bool = False) -> list[dict[str, Any]]:
    """Five DECODE iterations, then one EXTEND (a 2000 us kernel outside any graph)."""
    ev = [e for k in range(5) for e in decode_iter(k, extra_us, by_args)]
    ev += [
        x("user_annotation", "scheduler.run_batch", 5000, 300),
        x("user_annotation", "step[EXTEND bs=1 toks=100]", 5010, 200),
        x("cuda_runtime", "cudaLaunchKernel", 5020, 4, correlation=700),
        x("kernel", "prefill_gemm", 5030, 2000, correlation=700, stream=7),
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
    ]
    return ev


def write(d: Path, events: list[dict[str, Any]], gz: bool) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"schemaVersion": 1, "traceEvents": events})
    if gz:
        p = d / "lab-1.0-TP-0.trace.json.gz"
        with gzip.open(p, "wt") as fh:
            fh.write(text)
    else:
        p = d / "lab-1.0-TP-0.trace.json"
        p.write_text(text)
    return p


@pytest.mark.parametrize("gz", [False, True])
def test_report_steps_busy_idle_and_graph_split(tmp_path: Path, gz: bool) -> None:
    write(tmp_path, trace_events(), gz)
    rep = torch_profile.report(tmp_path)
    json.dumps(rep)  # serializable as it is
    assert rep["rule"] == "scheduler.run_batch spans"
    assert rep["modes"] == {"DECODE": 5, "EXTEND": 1} and rep["steps"] == 5
    assert rep["graph_launches"] == 5
    d = rep["decode"]
    assert d["n"] == 4  # the fifth decode is followed by the prefill
    assert d["period"] == d["median"] == d["cpu"] == 1000.0
    assert d["busy"] == 760.0 and d["idle"] == 240.0
    assert d["launch_lead"] == 10.0  # graph launched at +20, its first kernel at +30
    assert rep["ops"] == {
        "in_graph_n": 2.0,
        "in_graph_us": 700.0,
        "memcpy_n": 1.0,
        "memcpy_us": 10.0,
        "outside_n": 1.0,
        "outside_us": 50.0,
    }
    assert rep["kernels"]["gemm"] == [1.0, 400.0, 0.0, 0.0]
    assert rep["kernels"]["argmax"] == [0.0, 0.0, 1.0, 50.0]
    assert "prefill_gemm" not in rep["kernels"]  # not a steady decode step
    assert next(iter(rep["kernels"])) == "gemm"  # by time per step
    # the whole trace: 30 .. 7030 us, busy 5 x 760 + 2000, over 5 steps
    assert rep["window"] == {"span": 1400.0, "busy": 1160.0, "idle": 240.0}
    text = "\n".join(torch_profile.lines("nospec", rep))
    assert "serve_torch_profile[nospec]: steps=5 (DECODE;" in text
    assert "period=1000.0" in text and "idle=240.0" in text


def test_graph_launch_calls_when_no_scheduler_spans(tmp_path: Path) -> None:
    keep = ("scheduler.run_batch", "step[")
    write(tmp_path, [e for e in trace_events() if not e["name"].startswith(keep)], True)
    rep = torch_profile.report(tmp_path)
    assert rep["rule"] == "cudaGraphLaunch calls"
    assert rep["modes"] == {"GRAPH": 5} and rep["steps"] == 5
    # the prefill kernel launches inside the last graph iteration: four steady steps remain
    assert rep["decode"]["n"] == 4 and rep["decode"]["period"] == 1000.0


def test_diff_lines_name_the_extra_kernel(tmp_path: Path) -> None:
    write(tmp_path / "a", trace_events(extra_us=40.0), True)
    write(tmp_path / "b", trace_events(), False)
    write(tmp_path / "c", trace_events(extra_us=40.0, by_args=True), False)
    a, b = torch_profile.report(tmp_path / "a"), torch_profile.report(tmp_path / "b")
    assert a["ops"]["outside_n"] == 2.0 and a["ops"]["outside_us"] == 90.0
    assert a["decode"]["busy"] == 800.0 and a["decode"]["idle"] == 200.0
    c = torch_profile.report(tmp_path / "c")  # the graph id in its args puts it in a graph
    assert c["kernels"]["copy_hidden"] == [1.0, 40.0, 0.0, 0.0]
    out = torch_profile.diff_lines("specfsm_plain", a, "nospec", b, top=2)
    assert out[0] == "serve_torch_profile_diff[specfsm_plain-nospec]: steps 5 vs 5"
    assert any(line.startswith("serve_torch_profile_diff_decode[") for line in out)
    assert "busy 800.0 vs 760.0 (+40.0)" in out[1]
    assert "outside_us 90.0 vs 50.0 (+40.0)" in out[3]
    assert out[4].split()[1:3] == ["+40.0", "us"] and out[4].endswith("copy_hidden")
    assert "out/-" in out[4]
    # no prefill in a's and b's windows is followed by a decode: only the decode host calls
    assert out[6] == "# host calls per steady decode step, specfsm_plain - nospec, top 2 by time:"
    assert out[7].split()[1] == "+4.0" and out[7].endswith("cuLaunchKernel")
    assert len(out) == 9


def prefill_then_decodes(store_us: float, malloc_us: float = 0.0) -> list[dict[str, Any]]:
    """Two decodes, an EXTEND at CPU time 2000 (a 2000 us prefill kernel and, with
    `store_us`, one more kernel: a store's copy; with `malloc_us`, a host allocation of that
    long), then three decodes."""
    ev = [e for k in (0, 1) for e in decode_iter(k)]
    ev += [
        x("user_annotation", "scheduler.run_batch", 2000, 300),
        x("user_annotation", "step[EXTEND bs=1 toks=100]", 2010, 200),
        x("cuda_runtime", "cudaLaunchKernel", 2020, 4, correlation=700),
        x("kernel", "prefill_gemm", 2030, 2000, correlation=700, stream=7),
    ]
    if store_us:
        ev.append(x("cuda_runtime", "cudaLaunchKernel", 2040, 4, correlation=701))
        ev.append(x("kernel", "store_clone", 4040, store_us, correlation=701, stream=7))
    if malloc_us:
        ev.append(x("cuda_runtime", "cudaMalloc", 2050, malloc_us))
    for k in (3, 4, 5):  # the decodes after it
        ev += decode_iter(k)
    return ev


def test_prefill_and_the_decode_after_it_are_one_unit(tmp_path: Path) -> None:
    write(tmp_path / "a", prefill_then_decodes(300.0), False)
    write(tmp_path / "b", prefill_then_decodes(0.0), False)
    a, b = torch_profile.report(tmp_path / "a"), torch_profile.report(tmp_path / "b")
    # one prefill: its ops (2000 + 300) and the next decode's (700 + 50 + 10)
    assert a["prefill"]["n"] == 1 and a["prefill"]["gpu_us"] == 3060.0
    assert b["prefill"]["gpu_us"] == 2760.0 and a["prefill"]["cpu"] == 4000.0 - 2000.0
    assert a["prefill_kernels"]["store_clone"] == [1.0, 300.0]
    assert any("serve_torch_profile_prefill[p]: n=1" in ln for ln in torch_profile.lines("p", a))
    out = torch_profile.diff_lines("specfsm_plain", a, "nospec", b, top=2)
    assert any("gpu_us 3060.0 vs 2760.0 (+300.0)" in ln for ln in out)
    i = out.index("# per prefill + next decode, specfsm_plain - nospec, top 2 by time:")
    assert out[i + 1].split()[1] == "+300.0" and out[i + 1].endswith("store_clone")


def test_host_calls_per_prefill_and_per_decode_step(tmp_path: Path) -> None:
    write(tmp_path / "a", prefill_then_decodes(0.0, malloc_us=4000.0), False)
    write(tmp_path / "b", prefill_then_decodes(0.0), False)
    a, b = torch_profile.report(tmp_path / "a"), torch_profile.report(tmp_path / "b")
    # the prefill's two calls, the next decode's three; a steady step's three
    assert a["prefill_host"]["cudaMalloc"] == [1.0, 4000.0]
    assert b["prefill_host"] == {
        "cudaGraphLaunch": [1.0, 8.0],
        "cudaLaunchKernel": [2.0, 8.0],
        "cudaMemcpyAsync": [1.0, 4.0],
    }
    assert (
        a["decode_host"]["cudaGraphLaunch"] == [1.0, 8.0] and "cudaMalloc" not in a["decode_host"]
    )
    out = torch_profile.diff_lines("specfsm_plain", a, "nospec", b, top=1)
    i = out.index("# host calls per prefill + next decode, specfsm_plain - nospec, top 1 by time:")
    assert out[i + 1].split()[1] == "+4000.0" and out[i + 1].endswith("cudaMalloc")
    assert "# host calls per steady decode step, specfsm_plain - nospec, top 1 by time:" in out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_window_returns_none_when_the_server_refuses(tmp_path: Path) -> None:
    tr = traces.builtin("cpu", 1.0)["light"]
    t = time.monotonic()
    url = f"http://127.0.0.1:{free_port()}"
    assert torch_profile_window.window(url, tmp_path, "nospec", tr, 1, 1.0, 5, 1) is None
    assert time.monotonic() - t < 5.0


class FakeServer(BaseHTTPRequestHandler):
    """/health, and /start_profile writing a trace into the directory it is sent, as SGLang's
    scheduler does once its steps ran."""

    bodies: ClassVar[list[dict[str, Any]]] = []

    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.bodies.append(body)
        if self.path == "/start_profile":
            extra = 40.0 if body["profile_prefix"] == "specfsm_plain" else 0.0
            write(Path(body["output_dir"]), trace_events(extra_us=extra), True)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_windows_against_a_fake_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    played: list[traces.Trace] = []

    def play(tr: traces.Trace, url: str, out_dir: Path, procs: int, on_start: Any) -> Any:
        played.append(tr)
        on_start(time.time() - 60.0)  # as if the load had long been steady
        return 0.0, []

    monkeypatch.setattr(client, "play", play)
    srv = ThreadingHTTPServer(("127.0.0.1", 0), FakeServer)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        args = SimpleNamespace(torch_profile=7, torch_profile_of="", torch_profile_level=1, procs=4)
        tr = {"light": traces.builtin("cpu", 1.0)["light"]}
        calls: list[str] = []
        prep = lambda s, var, a: calls.append(f"prepare {var}")  # noqa: E731
        mirror = lambda a, out: calls.append("mirror")  # noqa: E731
        box = SimpleNamespace(url=url)
        windows = torch_profile_window.run_windows
        windows(args, box, "nospec", [""], tr, tmp_path, prep, mirror)
        windows(args, box, "specfsm", ["plain"], tr, tmp_path, prep, mirror)
    finally:
        srv.shutdown()
    assert calls == ["prepare ", "mirror", "prepare plain", "mirror"]
    body = FakeServer.bodies[0]
    assert body["num_steps"] == 7 and body["activities"] == ["CPU", "GPU"]
    assert body["output_dir"] == str((tmp_path / "torch_profile" / "nospec").resolve())
    assert body["with_stack"] is False and body["record_shapes"] is False
    (phase,) = played[0].phases
    assert (phase.kind, phase.level) == ("closed", 1) and phase.seconds == pytest.approx(6.21)
    assert played[0].lengths.abort_share == 0.0
    root = tmp_path / "torch_profile"
    assert {p.name for p in root.glob("*.report.json")} == {
        "nospec.report.json",
        "specfsm_plain.report.json",
    }
    out = torch_profile.summary(root)
    assert out[0].startswith("serve_torch_profile[nospec]: steps=5")
    assert any(line.startswith("serve_torch_profile_diff[specfsm_plain-nospec]") for line in out)
    assert not any("specfsm_spec-eagle" in line for line in out)
    # pinned SPECULATING is compared with stock EAGLE as pinned PLAIN is with no-spec
    for label, like in (("eagle", "nospec"), ("specfsm_spec", "specfsm_plain")):
        (root / f"{label}.report.json").write_bytes((root / f"{like}.report.json").read_bytes())
    out = torch_profile.summary(root)
    assert any(line.startswith("serve_torch_profile_diff[specfsm_spec-eagle]") for line in out)
