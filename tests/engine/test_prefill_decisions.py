"""Decisions before prefill forwards inside the real SGLang engine (CPU): a policy that sees
prefills switches right before a prefill, a burst that arrives in SPECULATING is prefilled in
PLAIN, and greedy outputs stay token-identical to no speculation with arrivals and aborts
(chain with overlap on the agreeing bigram target, whose no-speculation output is known; tree
without overlap against the reference engine)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from specfsm_testbed import engine as E
from specfsm_testbed import fsm as F

pytestmark = pytest.mark.engine

CONFIGS: dict[str, dict[str, Any]] = {
    "chain-overlap-agree": {"tree": False, "overlap": True, "spec": "EAGLE", "agree": "mid"},
    "tree-sync": {"tree": True, "overlap": False},
}
PROMPTS = E.default_prompts(6, seed=23)


@pytest.fixture(scope="module", params=list(CONFIGS))
def spec(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    d = tmp_path_factory.mktemp(request.param)
    eng = F.make_fsm_engine(d, **{"spec": "EAGLE3", **CONFIGS[request.param]})
    eng.test_dir = d
    eng.agree = CONFIGS[request.param].get("agree")
    eng.shape = "4,2,8" if CONFIGS[request.param]["tree"] else "chain3"
    yield eng
    eng.shutdown()


@pytest.fixture
def want(spec: Any, request: pytest.FixtureRequest) -> Any:
    if spec.agree:
        return E.AgreeReference()
    return request.getfixturevalue("reference")


def prefill_transitions(test_dir: Any) -> list[dict[str, Any]]:
    return [
        x
        for x in F.transitions(test_dir)
        if x.get("event") == "specfsm.transition" and x.get("prefill_tokens")
    ]


BURST_LENS = [4, 8, 12, 16, 28, 40]


def burst_under(spec: Any, want: Any, policy: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """Settle in SPECULATING, set ``policy`` (a short request so the control file is read),
    then six prompts at once, their outputs checked against no speculation: the number of
    prefill transitions before the burst and the counters before it."""
    F.set_policy(spec.test_dir, {"name": "fixed", "speculate": True})
    E.generate_greedy(spec, PROMPTS[:1], 2)
    F.set_policy(spec.test_dir, policy)
    E.generate_greedy(spec, PROMPTS[:1], 2)  # the control file is read on iterations
    before = F.counters(spec.test_dir, wait_s=5)
    seen_before = len(prefill_transitions(spec.test_dir))
    params = [E.sampling_params(n) for n in BURST_LENS]
    out = [o["output_ids"] for o in spec.generate(input_ids=PROMPTS, sampling_params=params)]
    assert out == want(PROMPTS, BURST_LENS)
    return seen_before, before


def test_burst_is_prefilled_in_plain(spec: Any, want: Any) -> None:
    """Six prompts arrive at once while SPECULATING with nothing running: the threshold sees
    the prefill (6 requests to decode > high), leaves SPECULATING and, nothing K-wide being in
    flight, drains at once, so the six are prefilled in PLAIN; the batch then shrinks and
    speculation resumes. Outputs identical to no speculation."""
    threshold = {"name": "threshold", "high": 3, "low": 2, "debounce": 1, "min_dwell": 0}
    seen_before, before = burst_under(spec, want, threshold)
    after = F.counters(spec.test_dir, wait_s=5)
    assert not after["failed"]
    plain = after["arrivals_by_mode"]["PLAIN"] - before["arrivals_by_mode"]["PLAIN"]
    assert plain == len(PROMPTS), after["arrivals_by_mode"]
    new = prefill_transitions(spec.test_dir)[seen_before:]
    pairs = [(x["src"], x["dst"]) for x in new]
    assert pairs[:2] == [("SPECULATING", "DRAINING"), ("DRAINING", "PLAIN")], new
    assert new[0]["bs"] == len(PROMPTS) and new[0]["prefill_tokens"] > 0
    log = F.transitions(spec.test_dir)
    assert any(x.get("dst") == "SPECULATING" for x in log[-6:]), "speculation did not resume"


def test_goodput_prefill_pressure_leaves_speculating_before_a_burst(spec: Any, want: Any) -> None:
    """The goodput policy with the prefill pressure on, through the real adapter: with
    ``prefill_ema`` 1 a prefill observation alone sets the share (1.0), so every speculative
    price is x 1000 and the policy leaves SPECULATING right before the burst's prefill, saying
    the share in its reason. Outputs identical to no speculation."""
    policy = {
        "name": "goodput",
        "shape": spec.shape,
        "accept_len": 2.4,
        "calibrate": False,
        "debounce": 1,
        "min_dwell": 0,
        "prefill_ms_per_token": 1.0,
        "prefill_ema": 1.0,
    }
    seen_before, _ = burst_under(spec, want, policy)
    assert not F.counters(spec.test_dir, wait_s=5)["failed"]
    new = prefill_transitions(spec.test_dir)[seen_before:]
    left = [x for x in new if x["src"] == "SPECULATING" and "prefill share 1.00" in x["reason"]]
    assert left, new
    assert "speculative prices x 1000.000" in left[0]["reason"]


def test_random_flips_on_prefills_keep_outputs(spec: Any, want: Any) -> None:
    """Arrivals, finishes and aborts while a random policy also flips right before prefills:
    every request that was not aborted equals no speculation, an aborted one is a prefix."""
    F.set_policy(spec.test_dir, {"name": "random", "seed": 7, "p": 0.5, "prefills": True})
    seen_before = len(prefill_transitions(spec.test_dir))
    trace = F.random_trace(random.Random(17), 16, p_abort=0.25)
    got = F.run_trace(spec, trace)
    ref = want([r["prompt"] for r in trace], [r["max_new"] for r in trace])
    F.check_trace_outputs(trace, got, ref)
    c = F.counters(spec.test_dir, wait_s=5)
    assert not c["failed"]
    assert len(prefill_transitions(spec.test_dir)) > seen_before, "no transition at a prefill"
