"""specfsm inside the real SGLang engine: forced and load-driven switching, chain and tree,
overlap on and off; greedy outputs token-identical to no speculation. The EAGLE-3 draft has
random weights (accepts ~1 token per verify); ``chain-overlap-agree`` runs the same tests on the
test bed's agreeing bigram target with the ``mid`` EAGLE draft (~2.3 tokens per verify), whose
no-speculation output is known exactly (``AgreeReference``)."""

from __future__ import annotations

from typing import Any

import pytest
from specfsm_testbed import engine as E
from specfsm_testbed import fsm as F

pytestmark = pytest.mark.engine

# A test that runs on a subset names it with `on(...)` (only those tests are generated). The
# subsets are prefixes of CONFIGS: pytest groups a module-scoped fixture's tests by the param's
# INDEX, so a subset's i-th entry must be CONFIGS' i-th for its tests to share that engine.
CONFIGS: dict[str, dict[str, Any]] = {
    "chain-overlap-agree": {"tree": False, "overlap": True, "spec": "EAGLE", "agree": "mid"},
    "chain-overlap": {"tree": False, "overlap": True},
    "tree-sync": {"tree": True, "overlap": False},
    "chain-sync": {"tree": False, "overlap": False},
    "tree-overlap": {"tree": True, "overlap": True},
}
#: Configurations the fault-injection test runs on (8 actions each: the suite's time).
FAULT_CONFIGS = ("chain-overlap-agree", "chain-overlap", "tree-sync")
#: Configurations on the agreeing target (a draft that accepts, a computed reference).
AGREE_CONFIGS = ("chain-overlap-agree",)
PROMPTS = E.default_prompts(6, seed=11)
ACTIONS = [
    f"{k}_{m}" for m in ("speculating", "draining", "plain", "resyncing") for k in ("enter", "exit")
]


def on(configs: tuple[str, ...]) -> pytest.MarkDecorator:
    """Run the test on these configurations only (a prefix of CONFIGS, see above)."""
    assert tuple(CONFIGS)[: len(configs)] == configs, configs
    return pytest.mark.parametrize("spec", configs, indirect=True)


@pytest.fixture(scope="module", params=list(CONFIGS))
def spec(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One engine with specfsm per configuration (EAGLE-3 unless the configuration says)."""
    d = tmp_path_factory.mktemp(request.param)
    eng = F.make_fsm_engine(d, **{"spec": "EAGLE3", **CONFIGS[request.param]})
    eng.test_dir = d
    eng.config_name = request.param
    eng.agree = CONFIGS[request.param].get("agree")
    yield eng
    eng.shutdown()


@pytest.fixture
def want(spec: Any, request: pytest.FixtureRequest) -> Any:
    """No-speculation greedy outputs for the configuration's target: the session's reference
    engine, or the agreeing bigram's known chain."""
    if spec.agree:
        return E.AgreeReference()
    return request.getfixturevalue("reference")


def total(c: dict[str, Any]) -> int:
    return sum(c["transitions"].values())


@pytest.mark.parametrize(
    "policy",
    [
        {"name": "every", "k": 1},
        {"name": "every", "k": 3},
        {"name": "random", "seed": 1, "p": 0.5},
        {"name": "random", "seed": 2, "p": 0.3, "hold": 4},
        {"name": "fixed", "speculate": False},
        {"name": "fixed", "speculate": True},
    ],
    ids=lambda p: "-".join(str(v) for v in p.values()),
)
def test_forced_schedules_equal_nospec(spec: Any, want: Any, policy: dict[str, Any]) -> None:
    """Scripted switching (every k, random, flapping, pinned) keeps greedy outputs identical."""
    F.set_policy(spec.test_dir, policy)
    before = (
        F.counters(spec.test_dir, wait_s=5)
        if (spec.test_dir / "counters-rank0.json").exists()
        else None
    )
    out = E.generate_greedy(spec, PROMPTS, 24)
    assert out == want(PROMPTS, 24)
    after = F.counters(spec.test_dir, wait_s=5)
    assert not after["failed"]
    if policy["name"] == "every" and before is not None:
        assert total(after) > total(before), "flapping policy made no transition"


def test_threshold_load_driven(spec: Any, want: Any) -> None:
    """ThresholdPolicy on a shrinking batch: all four modes, outputs identical."""
    F.set_policy(spec.test_dir, {"name": "fixed", "speculate": True})
    E.generate_greedy(spec, PROMPTS[:1], 2)  # settle in SPECULATING
    F.set_policy(
        spec.test_dir, {"name": "threshold", "high": 3, "low": 2, "debounce": 1, "min_dwell": 1}
    )
    lens = [4, 8, 12, 16, 28, 40]  # the batch shrinks as requests finish: 6 -> 1
    out = [
        o["output_ids"]
        for o in spec.generate(
            input_ids=PROMPTS, sampling_params=[E.sampling_params(n) for n in lens]
        )
    ]
    assert out == want(PROMPTS, lens)
    log = F.transitions(spec.test_dir)
    seen = {(x["src"], x["dst"]) for x in log if x.get("event") == "specfsm.transition"}
    assert {("SPECULATING", "DRAINING"), ("DRAINING", "PLAIN")} <= seen


def test_non_greedy_across_switches(spec: Any) -> None:
    """Sampled requests run across switches without error and produce full-length outputs."""
    F.set_policy(spec.test_dir, {"name": "every", "k": 2})
    params = {
        "max_new_tokens": 20,
        "temperature": 0.9,
        "top_p": 0.9,
        "top_k": 50,
        "ignore_eos": True,
    }
    outs = spec.generate(input_ids=PROMPTS, sampling_params=params)
    assert [len(o["output_ids"]) for o in outs] == [20] * len(PROMPTS)
    assert not F.counters(spec.test_dir, wait_s=5)["failed"]


@on(FAULT_CONFIGS)
@pytest.mark.parametrize("action", ACTIONS)
def test_fault_in_each_action_keeps_serving(spec: Any, want: Any, action: str) -> None:
    """An exception in any entry/exit action: logged, FAULT to PLAIN, serving continues with
    correct tokens. (Three of the five configurations, to keep the suite's time in budget.)"""
    # every k=2 visits all four modes (k=1 flips PLAIN <-> RESYNCING, abandoning each resync)
    F.set_policy(spec.test_dir, {"name": "every", "k": 2})
    before = F.counters(spec.test_dir, wait_s=5)["action_failures"]
    F.inject(spec.test_dir, fail={action: 1}, control={"policy": {"name": "every", "k": 2}})
    out = E.generate_greedy(spec, PROMPTS[:4], 20)
    assert out == want(PROMPTS[:4], 20)
    c = F.counters(spec.test_dir, wait_s=5)
    assert c["action_failures"] == before + 1 and not c["failed"]
    failed = [x for x in F.transitions(spec.test_dir) if x.get("event") == "specfsm.action_failed"]
    assert failed and failed[-1]["action"] == action and "injected failure" in failed[-1]["error"]


def test_arrivals_finishes_aborts_in_every_mode(spec: Any, want: Any) -> None:
    """Requests arrive, finish and are aborted while the engine flips through all modes."""
    import random

    F.set_policy(spec.test_dir, {"name": "every", "k": 2})
    trace = F.random_trace(random.Random(5), 14, p_abort=0.3)
    got = F.run_trace(spec, trace)
    ref = want([r["prompt"] for r in trace], [r["max_new"] for r in trace])
    F.check_trace_outputs(trace, got, ref)
    c = F.counters(spec.test_dir, wait_s=5)
    arrivals = c.get("arrivals_by_mode", {})
    assert sum(1 for m in ("SPECULATING", "PLAIN", "RESYNCING", "DRAINING") if arrivals.get(m)) >= 2


def test_no_kv_leak_and_still_serving(spec: Any, want: Any) -> None:
    """After everything, SGLang's own idle pool-invariant check has run (it raises on a leak)
    and the engine still serves: no KV slot leaked, radix cache on."""
    import time

    F.set_policy(spec.test_dir, {"name": "every", "k": 2})
    E.generate_greedy(spec, PROMPTS[:2], 8)
    n0 = F.counters(spec.test_dir, wait_s=5)["idle_checks"]
    time.sleep(1.5)
    assert spec.generate(input_ids=PROMPTS[0], sampling_params=E.sampling_params(4))["output_ids"]
    F.inject(spec.test_dir, control={"policy": {"name": "every", "k": 2}})
    deadline = time.time() + 20
    while time.time() < deadline and F.counters(spec.test_dir)["idle_checks"] <= n0 + 1:
        time.sleep(0.5)
    assert F.counters(spec.test_dir)["idle_checks"] > n0
    info = spec.get_server_info()
    assert not info.get("disable_radix_cache", False)


def test_per_request_spec_metrics_count_k_wide_rounds(spec: Any) -> None:
    """With 1-wide rounds mixed in, SGLang's per-request spec metrics describe the K-wide
    rounds only: proposed drafts = verify rounds x (K - 1), accept length = 1 + correct /
    verify rounds, and the 1-wide rounds are not counted as verify rounds."""
    from specfsm_sglang import hooks

    # The accept-length fix lives in the tokenizer process, i.e. this one; SGLang loads plugins
    # once per process, so when an engine without specfsm started here first, apply it now.
    hooks.ensure_tokenizer_side()
    F.set_policy(spec.test_dir, {"name": "every", "k": 2})
    k = E.TREE["speculative_num_draft_tokens"] if "tree" in spec.config_name else 4
    outs = E.generate(spec, PROMPTS[:3], 32)
    for o in outs:
        m = o["meta_info"]
        assert m.get("spec_verify_ct"), m
        verify = m["spec_verify_ct"]
        assert m["spec_num_proposed_drafts"] == verify * (k - 1)
        assert m["spec_accept_length"] == pytest.approx(1 + m["spec_num_correct_drafts"] / verify)
        # every-2 spends about half of the decode rounds 1-wide; counted, they would be ~31
        assert verify <= 0.75 * (m["completion_tokens"] - 1), m


@on(AGREE_CONFIGS)  # the random EAGLE-3 draft accepts ~1 token per verify
def test_accepting_draft_accepts(spec: Any, want: Any) -> None:
    """On the agreeing draft, pinned SPECULATING: outputs equal and the accept length per
    verify (reported) is above 1.8; under flapping the K-wide rounds still accept as much."""
    from specfsm_sglang import hooks

    hooks.ensure_tokenizer_side()
    lengths = {}
    for name, policy in (("pinned", {"name": "fixed", "speculate": True}), ("every-2", None)):
        F.set_policy(spec.test_dir, policy or {"name": "every", "k": 2})
        outs = E.generate(spec, PROMPTS, 32)
        assert [o["output_ids"] for o in outs] == want(PROMPTS, 32)
        lengths[name] = E.accept_length([o["meta_info"] for o in outs])
    print(f"{spec.config_name}: accept length per verify {lengths}")
    assert min(lengths.values()) > 1.8


@on(AGREE_CONFIGS)  # only the agreeing target has a computed reference
def test_agree_reference_is_the_nospec_engine(spec: Any) -> None:
    """The agreeing target's known chain (AgreeReference) equals a real no-speculation engine's
    greedy output on it, batched, for prompts of several lengths."""
    from specfsm_testbed.refserver import ReferenceServer

    prompts = [*E.default_prompts(6, length=5, seed=41), [7], list(range(3, 200))]
    lens = [1, 7, 16, 33, 64, 9, 12, 40]
    server = ReferenceServer(agree=spec.agree)
    try:
        assert server(prompts, lens) == E.AgreeReference()(prompts, lens)
    finally:
        server.close()
