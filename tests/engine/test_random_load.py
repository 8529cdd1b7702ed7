"""A hypothesis-driven random load trace (arrivals, finishes, aborts, bursts) through the real
engine under switching policies: at least 2,000 engine iterations per run, every request's
tokens checked against no speculation, and SGLang's KV invariant checked when idle. Runs on the
random EAGLE-3 draft and on the test bed's agreeing ``mid`` EAGLE draft (~2.3 tokens per
verify; a shorter top-up there: tests/engine/test_long_trace.py runs 10,000 forwards on it)."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from specfsm_testbed import engine as E
from specfsm_testbed import fsm as F

pytestmark = pytest.mark.engine
#: name -> (make_fsm_engine arguments, decode forwards to top up to)
DRAFTS: dict[str, tuple[dict[str, Any], int]] = {
    "eagle3": ({"spec": "EAGLE3"}, 2000),
    "agree-mid": ({"spec": "EAGLE", "agree": "mid"}, 600),
}
POLICIES = [
    {"name": "threshold", "high": 3, "low": 1, "debounce": 1, "min_dwell": 2},
    {"name": "threshold", "high": 5, "low": 2, "debounce": 2, "min_dwell": 4},
    {"name": "random", "seed": 11, "p": 0.5},
    {"name": "every", "k": 1},
]


@pytest.fixture(scope="module", params=list(DRAFTS))
def eng(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Any:
    """One overlap engine with specfsm per draft."""
    d = tmp_path_factory.mktemp(f"random-load-{request.param}")
    kwargs, e_min = DRAFTS[request.param]
    e = F.make_fsm_engine(d, overlap=True, max_running_requests=8, **kwargs)
    e.test_dir = d
    e.min_iterations = e_min
    e.agree = kwargs.get("agree")
    yield e
    e.shutdown()


@pytest.fixture
def want(eng: Any, request: pytest.FixtureRequest) -> Any:
    """No-speculation outputs: the session's reference engine, or the agreeing bigram's chain."""
    return E.AgreeReference() if eng.agree else request.getfixturevalue("reference")


def check_trace(eng: Any, reference: Any, seed: int, policy: dict[str, Any], n: int) -> None:
    rng = random.Random(seed)
    trace = F.random_trace(rng, n, max_new=(4, 64), p_abort=0.15)
    F.set_policy(eng.test_dir, policy)
    got = F.run_trace(eng, trace)
    want = reference([r["prompt"] for r in trace], [r["max_new"] for r in trace])
    for req, ref in zip(trace, want, strict=True):
        # upstream: an abort in a request's finishing step can return extra (correct) tokens
        out = got[req["rid"]]["output_ids"][: req["max_new"]]
        if len(out) < req["max_new"]:
            assert req["abort_after"] is not None, f"{req['rid']} ended early without an abort"
        assert out == ref[: len(out)], f"{req['rid']}: tokens differ from no speculation"


@settings(
    max_examples=8,
    deadline=None,
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
    suppress_health_check=list(HealthCheck),
)
@given(seed=st.integers(0, 2**31 - 1), policy=st.sampled_from(POLICIES), n=st.integers(6, 20))
def test_random_trace(eng: Any, want: Any, seed: int, policy: dict[str, Any], n: int) -> None:
    """A random trace under a random policy: identical tokens (prefixes for aborted ones)."""
    check_trace(eng, want, seed, policy, n)


def test_enough_iterations_and_no_leak(eng: Any, want: Any) -> None:
    """Top up to the draft's iteration count, then SGLang's idle invariant check runs."""
    from specfsm_sglang import hooks

    hooks.ensure_tokenizer_side()
    seed = 1000
    while F.counters(eng.test_dir, wait_s=5)["decode_forwards"] < eng.min_iterations:
        check_trace(eng, want, seed, POLICIES[seed % len(POLICIES)], 20)
        seed += 1
    F.set_policy(eng.test_dir, {"name": "fixed", "speculate": True})
    prompts = E.default_prompts(4, seed=seed)
    outs = E.generate(eng, prompts, 24)
    assert [o["output_ids"] for o in outs] == want(prompts, 24)
    accept = E.accept_length([o["meta_info"] for o in outs])
    c = F.counters(eng.test_dir, wait_s=5)
    n0 = c["idle_checks"]
    deadline = time.time() + 20
    while time.time() < deadline and F.counters(eng.test_dir)["idle_checks"] <= n0:
        eng.generate(input_ids=[5, 6, 7], sampling_params={"max_new_tokens": 1})
        time.sleep(0.5)
    c = F.counters(eng.test_dir)
    print(
        f"random load ({'agree-' + eng.agree if eng.agree else 'eagle3'}): "
        f"{c['decode_forwards']} decode forwards, transitions {c['transitions']}, accept "
        f"length {accept:.2f} (pinned SPECULATING)"
    )
    assert c["decode_forwards"] >= eng.min_iterations
    assert c["idle_checks"] > n0 and not c["failed"]
    assert all(
        c["transitions"].get(k, 0) > 0 for k in ("SPECULATING->DRAINING", "PLAIN->RESYNCING")
    )
    if eng.agree:
        assert accept > 1.8, f"the accepting draft accepted {accept:.2f} tokens per verify"
