"""specfsm's Prometheus series on SGLang's own /metrics, scraped from a live server.

The real HTTP server (``python -m sglang.launch_server``) on CPU with the plugin and
``--enable-metrics``; specfsm pinned to PLAIN and unpinned through the control file; /metrics
scraped over HTTP and parsed with prometheus_client's parser. ``LIVE_SERIES`` (asserted
present here) is what tests/test_dashboard.py lets the example Grafana dashboard name."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from specfsm_testbed import engine as E
from specfsm_testbed import fsm as F
from specfsm_testbed.server import HttpServer

pytestmark = pytest.mark.engine
PROMPTS = E.default_prompts(3, length=10, seed=41)
MAX_NEW = 16
#: SGLang's scheduler label set (observability/metrics_collector.py, init_new), no DP here
SGLANG_LABELS = {"model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"}
OWN = {"mode", "src", "dst", "policy"}  # specfsm's own labels on top of SGLang's
#: sample names this test finds on the live server's /metrics
LIVE_SERIES = frozenset(
    {
        "specfsm_mode",
        "specfsm_transitions_total",
        "specfsm_time_in_mode_seconds_total",
        "specfsm_current_mode_seconds",
        "specfsm_policy_faults_total",
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:spec_accept_length",
        "sglang:gen_throughput",
    }
)


def scrape(
    srv: HttpServer, keep: Path | None = None
) -> dict[str, list[tuple[dict[str, str], float]]]:
    """/metrics parsed: sample name -> [(labels, value)] (the text kept in `keep`)."""
    from prometheus_client.parser import text_string_to_metric_families

    status, text = srv.get("/metrics")
    assert status == 200, text[:300]
    if keep is not None:
        keep.write_text(text)
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
    return out


def value(m: dict[str, Any], name: str, **labels: str) -> float:
    """The one sample of `name` whose labels include `labels`."""
    hits = [v for lab, v in m.get(name, []) if all(lab.get(k) == x for k, x in labels.items())]
    assert len(hits) == 1, (name, labels, m.get(name))
    return float(hits[0])


def _wait_for(test_dir: Path, pair: tuple[str, str], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = [
            (x["src"], x["dst"])
            for x in F.transitions(test_dir)
            if x.get("event") == "specfsm.transition"
        ]
        if pair in got:
            return True
        time.sleep(0.1)
    return False


def test_metrics_on_sglang_endpoint_with_its_labels(tmp_path: Path) -> None:
    """Pin PLAIN then unpin on a live server: specfsm series on /metrics carry SGLang's label
    set with the values of its sglang: series, the mode gauge follows, each transition is
    counted, time in the current mode grows without a transition; observation lines name
    their accept lengths' round and mark them stale in PLAIN."""
    env = F.fsm_env(
        tmp_path,
        {"name": "fixed", "speculate": True},
        {"control_every": 1, "observe_every": 1},
    )
    srv = HttpServer(
        env=env,
        log_path=tmp_path / "server.log",
        spec="EAGLE",
        agree="mid",
        enable_metrics=True,
    )
    srv.start()
    try:
        srv.generate(PROMPTS, MAX_NEW)
        m0 = scrape(srv)
        assert value(m0, "specfsm_mode", mode="SPECULATING") == 1.0

        F.write_control(tmp_path, {"pin": "PLAIN"})
        srv.generate(PROMPTS, MAX_NEW)
        assert _wait_for(tmp_path, ("DRAINING", "PLAIN"))
        m1 = scrape(srv)
        time.sleep(2.5)  # no request, no forward, no transition: only the clock moves
        m2 = scrape(srv)

        F.write_control(tmp_path, {"pin": None})
        srv.generate(PROMPTS, MAX_NEW)
        assert _wait_for(tmp_path, ("RESYNCING", "SPECULATING"))
        time.sleep(1.2)
        m3 = scrape(srv, tmp_path / "metrics.txt")
    finally:
        srv.stop()
    assert "Traceback" not in srv.log_tail(400)

    # SGLang's label set, with the same values as its own scheduler series (joinable)
    (sg_labels,) = [lab for lab, _ in m3["sglang:num_running_reqs"]]
    assert set(sg_labels) >= SGLANG_LABELS, sg_labels
    names = [n for n in m3 if n.startswith("specfsm_")]
    assert set(m3) >= LIVE_SERIES, sorted(LIVE_SERIES - set(m3))
    for name in names:
        for lab, _ in m3[name]:
            assert {k: v for k, v in lab.items() if k not in OWN} == sg_labels, (name, lab)

    # the mode gauge follows; PLAIN with no transition: its time and dwell still grow
    assert value(m1, "specfsm_mode", mode="PLAIN") == 1.0
    assert value(m1, "specfsm_mode", mode="SPECULATING") == 0.0
    t1 = value(m1, "specfsm_time_in_mode_seconds_total", mode="PLAIN")
    t2 = value(m2, "specfsm_time_in_mode_seconds_total", mode="PLAIN")
    assert t2 > 0 and t2 - t1 >= 1.0, (t1, t2)
    # the live gauge grew across the 2.5 s sleep (by >= 1 s: the time thread ticks every
    # second and a shared CPU can delay a tick; same slack as the counter above)
    c1 = value(m1, "specfsm_current_mode_seconds")
    c2 = value(m2, "specfsm_current_mode_seconds")
    assert c2 - c1 >= 1.0 and c2 >= t2 - t1, (c1, c2)
    tr = "specfsm_transitions_total"
    assert value(m2, tr, src="PLAIN", dst="RESYNCING") == 0.0
    for src, dst in [("SPECULATING", "DRAINING"), ("DRAINING", "PLAIN")]:
        assert value(m2, tr, src=src, dst=dst) == 1.0

    assert value(m3, "specfsm_mode", mode="SPECULATING") == 1.0
    for src, dst in [("PLAIN", "RESYNCING"), ("RESYNCING", "SPECULATING")]:
        assert value(m3, tr, src=src, dst=dst) == 1.0
    assert value(m3, "specfsm_time_in_mode_seconds_total", mode="SPECULATING") > 0
    assert value(m3, "specfsm_policy_faults_total", policy="fixed") == 0.0

    # observation lines: the round of the accept lengths, stale in PLAIN, no unmeasured ctx
    obs = [x for x in F.transitions(tmp_path) if x.get("event") == "specfsm.observation"]
    with_lens = [x for x in obs if x["accept_lens"]]
    assert with_lens and all("mean_ctx" not in x for x in obs)
    for x in with_lens:
        assert x["accept_lens_iteration"] < x["iteration"]
        assert x["accept_lens_stale"] is (x["mode"] != "SPECULATING"), x
    controls = [x for x in F.transitions(tmp_path) if x.get("control") == "applied"]
    assert len(controls) == 2 and all(c["iteration"] > 0 for c in controls), controls
    text = (tmp_path / "metrics.txt").read_text().splitlines()
    print("\n".join(x for x in text if x.startswith(("specfsm_", "sglang:spec_accept_length"))))
