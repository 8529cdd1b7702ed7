"""A hypothesis-driven random load trace (arrivals, finishes, aborts, bursts) through the real
engine under switching policies: at least 2,000 engine iterations per run, every request's
tokens checked against no speculation, and SGLang's KV invariant checked when idle."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from specfsm_sglang.testbed import fsm as F

pytestmark = pytest.mark.engine
MIN_ITERATIONS = 2000
POLICIES = [
    {"name": "threshold", "high": 3, "low": 1, "debounce": 1, "min_dwell": 2},
    {"name": "threshold", "high": 5, "low": 2, "debounce": 2, "min_dwell": 4},
    {"name": "random", "seed": 11, "p": 0.5},
    {"name": "every", "k": 1},
]


@pytest.fixture(scope="module")
def eng(tmp_path_factory: pytest.TempPathFactory) -> Any:
    d = tmp_path_factory.mktemp("random-load")
    e = F.make_fsm_engine(d, spec="EAGLE3", overlap=True, max_running_requests=8)
    e.test_dir = d
    yield e
    e.shutdown()


def check_trace(eng: Any, reference: Any, seed: int, policy: dict[str, Any], n: int) -> None:
    rng = random.Random(seed)
    trace = F.random_trace(rng, n, max_new=(4, 64), p_abort=0.15)
    F.set_policy(eng.test_dir, policy)
    got = F.run_trace(eng, trace)
    want = reference([r["prompt"] for r in trace], [r["max_new"] for r in trace])
    for req, ref in zip(trace, want, strict=True):
        out = got[req["rid"]]["output_ids"]
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
def test_random_trace(eng: Any, reference: Any, seed: int, policy: dict[str, Any], n: int) -> None:
    """A random trace under a random policy: identical tokens (prefixes for aborted ones)."""
    check_trace(eng, reference, seed, policy, n)


def test_enough_iterations_and_no_leak(eng: Any, reference: Any) -> None:
    """Top up to MIN_ITERATIONS engine iterations, then SGLang's idle invariant check runs."""
    seed = 1000
    while F.counters(eng.test_dir, wait_s=5)["decode_forwards"] < MIN_ITERATIONS:
        check_trace(eng, reference, seed, POLICIES[seed % len(POLICIES)], 20)
        seed += 1
    c = F.counters(eng.test_dir, wait_s=5)
    n0 = c["idle_checks"]
    deadline = time.time() + 20
    while time.time() < deadline and F.counters(eng.test_dir)["idle_checks"] <= n0:
        eng.generate(input_ids=[5, 6, 7], sampling_params={"max_new_tokens": 1})
        time.sleep(0.5)
    c = F.counters(eng.test_dir)
    print(f"random load: {c['decode_forwards']} decode forwards, transitions {c['transitions']}")
    assert c["decode_forwards"] >= MIN_ITERATIONS
    assert c["idle_checks"] > n0 and not c["failed"]
    assert all(
        c["transitions"].get(k, 0) > 0 for k in ("SPECULATING->DRAINING", "PLAIN->RESYNCING")
    )
