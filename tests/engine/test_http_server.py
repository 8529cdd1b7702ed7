"""The real HTTP server (``python -m sglang.launch_server``) on CPU with the specfsm plugin:
started as a subprocess on a free port, served over HTTP with token ids, steered by the
operator's control file (pin PLAIN, unpin), and shut down with SIGTERM: no process left, port
free. The target is the test bed's agreeing bigram with the ``mid`` EAGLE draft, so every
greedy output is known without a reference engine (:class:`AgreeReference`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from specfsm_testbed import engine as E
from specfsm_testbed import fsm as F
from specfsm_testbed.server import HttpServer, port_free

pytestmark = pytest.mark.engine
PROMPTS = E.default_prompts(4, length=10, seed=31)
MAX_NEW = 24


def _pairs(test_dir: Path) -> list[tuple[str, str]]:
    return [
        (x["src"], x["dst"])
        for x in F.transitions(test_dir)
        if x.get("event") == "specfsm.transition"
    ]


def _wait_for(test_dir: Path, pair: tuple[str, str], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pair in _pairs(test_dir):
            return True
        time.sleep(0.1)
    return False


def test_http_server_serves_switches_and_stops_cleanly(tmp_path: Path) -> None:
    """launch_server + specfsm on CPU: /health, /generate equal to no speculation while
    speculating, pinned PLAIN and unpinned; SIGTERM leaves no process and a free port."""
    ref = E.AgreeReference()
    env = F.fsm_env(tmp_path, {"name": "fixed", "speculate": True}, {"control_every": 1})
    srv = HttpServer(env=env, log_path=tmp_path / "server.log", spec="EAGLE", agree="mid")
    t0 = time.monotonic()
    srv.start()
    started = time.monotonic() - t0
    try:
        assert srv.get("/health")[0] == 200
        info: dict[str, Any] = srv.post("/generate", {"input_ids": [5], "sampling_params": {}})
        assert "output_ids" in info
        spec = srv.generate(PROMPTS, MAX_NEW)
        assert [o["output_ids"] for o in spec] == ref(PROMPTS, MAX_NEW)
        accept = E.accept_length([o["meta_info"] for o in spec])
        assert accept > 1.8, f"the mid draft should accept: {accept:.2f}"

        F.write_control(tmp_path, {"pin": "PLAIN"})
        plain = srv.generate(PROMPTS[::-1], [MAX_NEW + i for i in range(len(PROMPTS))])
        want = ref(PROMPTS[::-1], [MAX_NEW + i for i in range(len(PROMPTS))])
        assert [o["output_ids"] for o in plain] == want
        assert _wait_for(tmp_path, ("DRAINING", "PLAIN")), _pairs(tmp_path)

        F.write_control(tmp_path, {"pin": None})
        back = srv.generate(PROMPTS, 2 * MAX_NEW)
        assert [o["output_ids"] for o in back] == ref(PROMPTS, 2 * MAX_NEW)
        assert _wait_for(tmp_path, ("RESYNCING", "SPECULATING")), _pairs(tmp_path)
        assert srv.proc is not None and srv.proc.poll() is None
    finally:
        stopped = srv.stop()
    print(
        f"http server: healthy after {started:.1f} s, accept length {accept:.2f} while "
        f"speculating, transitions {_pairs(tmp_path)}, down {stopped:.1f} s after SIGTERM"
    )
    assert not srv.alive() and port_free(srv.port)
    assert "Traceback" not in srv.log_tail(400)
