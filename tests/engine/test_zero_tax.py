"""Zero-tax PLAIN in the real engine: no draft work while PLAIN, and a batched catch-up in
RESYNCING that leaves the draft exactly where a draft kept warm every step would be.

Each case runs the same requests through three engines with the same scripted schedule
(SPECULATING, then PLAIN for 14 decode forwards, then SPECULATING): warm PLAIN (upstream's
steps=0, the draft sees every token), zero-tax PLAIN, and zero-tax PLAIN whose catch-up is
switched off by the test channel (the draft re-enters cold, as SGLang's skip flag leaves it).
The target is the test bed's agreeing bigram model with the ``mid`` EAGLE draft (~2.3 tokens
per verify), so accept lengths depend on the draft's state: equal accept lengths round by round
after re-entry mean equal draft proposals.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from specfsm_testbed import engine as E
from specfsm_testbed import fsm as F
from specfsm_testbed.channel import SKIP_CATCHUP_ENV

pytestmark = pytest.mark.engine

PROMPTS = E.default_prompts(4, seed=5)
NEW_TOKENS = 48
SCHEDULE = {"name": "scripted", "schedule": [[6, "PLAIN"], [20, "SPECULATING"]]}
# The cold cases are a prefix of CASES (pytest groups a module-scoped fixture's tests by the
# param's index; see test_switching.on).
CASES = {
    "chain-overlap": {"tree": False, "overlap": True},
    "tree-sync": {"tree": True, "overlap": False},
    "chain-sync": {"tree": False, "overlap": False},
    "tree-overlap": {"tree": True, "overlap": True},
}
#: the cold (no catch-up) engine runs on these cases only (the suite's time)
COLD_CASES = ("chain-overlap", "tree-sync")


def _run(
    d: Path,
    plain: str,
    case: dict[str, Any],
    cold: bool = False,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One engine: greedy outputs, accept lengths per K-wide round, transitions, catch-up log
    lines, counters."""
    env = {SKIP_CATCHUP_ENV: "1"} if cold else {}
    with F.temporary_env(env):
        eng = F.make_fsm_engine(
            d,
            policy=SCHEDULE,
            config={"plain": plain, "observe_every": 1, **(extra or {})},
            spec="EAGLE",
            agree="mid",
            **case,
        )
    try:
        out = E.generate_greedy(eng, PROMPTS, NEW_TOKENS)
        counters = F.counters(d, wait_s=5)
    finally:
        eng.shutdown()
    lines = F.transitions(d)
    rounds: dict[int, tuple[int, ...]] = {}
    for ln in lines:
        if ln.get("event") == "specfsm.observation" and ln.get("accept_lens"):
            rounds[ln["accept_lens_iteration"]] = tuple(ln["accept_lens"])
    moves = [(ln["src"], ln["dst"]) for ln in lines if ln.get("event") == "specfsm.transition"]
    catchups = [ln for ln in lines if ln.get("event") == "specfsm.catchup"]
    return {
        "out": out,
        "rounds": rounds,
        "moves": moves,
        "catchups": catchups,
        "counters": counters,
    }


@pytest.fixture(scope="module", params=list(CASES))
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Warm, zero-tax (and on COLD_CASES the cold zero-tax) runs of one case."""
    name = request.param
    case = CASES[name]
    res = {
        "name": name,
        "warm": _run(tmp_path_factory.mktemp(f"{name}-warm"), "warm", case),
        "zero_tax": _run(tmp_path_factory.mktemp(f"{name}-zt"), "zero_tax", case),
    }
    if name in COLD_CASES:  # the teeth test's engines
        res["cold"] = _run(tmp_path_factory.mktemp(f"{name}-cold"), "zero_tax", case, cold=True)
    return res


def test_greedy_equal_to_no_speculation(runs: Any) -> None:
    """Warm, zero-tax and cold re-entry all give the no-speculation greedy outputs."""
    want = E.AgreeReference()(PROMPTS, NEW_TOKENS)
    for kind in ("warm", "zero_tax", "cold"):
        if kind in runs:
            assert runs[kind]["out"] == want, kind


def test_schedule_went_through_every_mode(runs: Any) -> None:
    """The schedule really left speculation and came back through RESYNCING."""
    want = [
        ("SPECULATING", "DRAINING"),
        ("DRAINING", "PLAIN"),
        ("PLAIN", "RESYNCING"),
        ("RESYNCING", "SPECULATING"),
    ]
    for kind in ("warm", "zero_tax"):
        assert runs[kind]["moves"] == want, kind


def test_no_draft_forward_while_plain(runs: Any) -> None:
    """Zero-tax PLAIN runs no draft forward at all (counted at the draft runner); warm PLAIN
    runs one per step; the catch-up is one batched draft forward in RESYNCING."""
    zt = runs["zero_tax"]["counters"]
    warm = runs["warm"]["counters"]
    plain_steps = zt["mode_forwards"]["PLAIN"]
    assert plain_steps >= 10
    assert zt["draft_forwards_by_mode"]["PLAIN"] == 0
    assert warm["draft_forwards_by_mode"]["PLAIN"] >= warm["mode_forwards"]["PLAIN"]
    stats = zt["zero_tax"]
    assert stats["plain_forwards"] == plain_steps + zt["mode_forwards"]["RESYNCING"]
    assert stats["catchups"] == 1 and stats["catchup_draft_forwards"] == 1
    assert stats["caught_up_rows"] == len(PROMPTS)
    assert stats["caught_up_tokens"] == stats["recorded_tokens"]
    assert stats["overflow_rows"] == 0
    (line,) = runs["zero_tax"]["catchups"]  # one specfsm.catchup log line
    assert (line["rows"], line["tokens"], line["overflow_rows"], line["done"]) == (
        len(PROMPTS),
        stats["recorded_tokens"],
        0,
        True,
    )


def test_catch_up_equals_a_draft_kept_warm(runs: Any) -> None:
    """After re-entry, every K-wide round's accept lengths equal the warm run's, round by
    round (the first draft after RESYNCING proposes what a warm draft proposes)."""
    warm, zt = runs["warm"]["rounds"], runs["zero_tax"]["rounds"]
    assert len(warm) >= 10
    assert zt == warm


@pytest.mark.parametrize("runs", COLD_CASES, indirect=True)
def test_without_catch_up_the_draft_reenters_cold(runs: Any) -> None:
    """The same run with the catch-up switched off accepts differently right after re-entry
    (its first draft starts from nothing): the test above has teeth."""
    warm, cold = runs["warm"]["rounds"], runs["cold"]["rounds"]
    first = min(i for i in warm if i > 20)  # the first K-wide round after RESYNCING
    assert cold[first] != warm[first]
    assert sum(cold[first]) < sum(warm[first])


def test_catch_up_over_several_iterations_and_past_the_buffer(tmp_path: Path) -> None:
    """A lag past the buffer (lag_tokens 4 < 14 PLAIN steps) is caught up over its newest
    positions and counted; a total lag above the iteration's budget (here 2 x bs + 4 = 12 <
    16) spreads RESYNCING over several iterations, serving plainly meanwhile, each logged, until
    none lags. Greedy outputs stay equal."""
    want = E.AgreeReference()(PROMPTS, NEW_TOKENS)
    run = _run(
        tmp_path, "zero_tax", CASES["chain-overlap"], extra={"lag_tokens": 4, "catchup_tokens": 2}
    )
    assert run["out"] == want
    lines = run["catchups"]
    assert len(lines) >= 2
    assert [ln["done"] for ln in lines] == [False] * (len(lines) - 1) + [True]
    assert all(ln["tokens"] <= 2 * len(PROMPTS) + 4 for ln in lines)
    assert run["counters"]["mode_forwards"]["RESYNCING"] == len(lines)
    assert run["moves"][-1] == ("RESYNCING", "SPECULATING")
    assert sum(ln["overflow_rows"] for ln in lines) == len(PROMPTS)
    assert run["counters"]["zero_tax"]["overflow_rows"] == len(PROMPTS)


def test_initial_mode_plain_goes_through_the_table(tmp_path: Path) -> None:
    """initial_mode PLAIN: the machine is born in SPECULATING (the state SGLang attached) and
    reaches PLAIN through the table at start-up (LOAD_HIGH, DRAINED), no action called outside
    it; every decode forward is a zero-tax PLAIN step (no draft forward but the prefills');
    greedy outputs equal."""
    d = tmp_path / "initial-plain"
    eng = F.make_fsm_engine(
        d,
        policy={"name": "fixed", "speculate": False},
        config={"initial_mode": "PLAIN"},
        spec="EAGLE",
        agree="mid",
        overlap=True,
    )
    try:
        out = E.generate_greedy(eng, PROMPTS, 16)
        counters = F.counters(d, wait_s=5)
    finally:
        eng.shutdown()
    assert out == E.AgreeReference()(PROMPTS, 16)
    moves = [
        (ln["src"], ln["dst"], ln["iteration"], ln["reason"])
        for ln in F.transitions(d)
        if ln.get("event") == "specfsm.transition"
    ]
    assert moves == [
        ("SPECULATING", "DRAINING", 0, "initial_mode: PLAIN"),
        ("DRAINING", "PLAIN", 0, "start-up: no batch in flight"),
    ]
    assert counters["mode_forwards"]["SPECULATING"] == 0
    assert counters["mode_forwards"]["PLAIN"] >= 15
    # the only draft forwards are SGLang's prefill draft-extends of the arriving requests
    assert counters["draft_forwards_by_mode"]["PLAIN"] <= counters["arrivals_by_mode"]["PLAIN"]


#: requests prefilled while PLAIN (the machine reaches PLAIN at start-up), SPECULATING from
#: iteration 20: their prompts' draft prefill is deferred and caught up in RESYNCING
DEFERRED = {"name": "scripted", "schedule": [[20, "SPECULATING"]]}


def _deferred_run(d: Path, plain: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    eng = F.make_fsm_engine(
        d,
        policy=DEFERRED,
        config={"plain": plain, "observe_every": 1, "initial_mode": "PLAIN", **(extra or {})},
        spec="EAGLE",
        agree="mid",
        overlap=True,
    )
    try:
        out = E.generate_greedy(eng, PROMPTS, NEW_TOKENS)
        counters = F.counters(d, wait_s=5)
    finally:
        eng.shutdown()
    rounds: dict[int, tuple[int, ...]] = {}
    debts: list[int] = []  # the draft debt each observation told the policy, in order
    for ln in F.transitions(d):
        if ln.get("event") == "specfsm.observation":
            debts.append(ln.get("draft_debt", 0))
            if ln.get("accept_lens"):
                rounds[ln["accept_lens_iteration"]] = tuple(ln["accept_lens"])
    return {"out": out, "rounds": rounds, "counters": counters, "debts": debts}


def test_deferred_prefill_catches_up_to_an_eager_prefill(tmp_path: Path) -> None:
    """Prompts prefilled while PLAIN run the target alone (no draft forward in PLAIN at all);
    RESYNCING extends the draft over each prompt and its lag in one go, and every K-wide
    round after re-entry accepts as in the run whose draft prefilled eagerly and decoded warm
    (upstream's steps=0) and as zero-tax PLAIN with deferral off. Greedy outputs equal. The
    policy is told the deferred prompts as the draft's debt while they wait, none after the
    catch-up, and none when nothing was deferred."""
    want = E.AgreeReference()(PROMPTS, NEW_TOKENS)
    warm = _deferred_run(tmp_path / "warm", "warm")
    eager = _deferred_run(tmp_path / "eager", "zero_tax", {"defer_prefill_tokens": 0})
    lazy = _deferred_run(tmp_path / "deferred", "zero_tax")
    for run in (warm, eager, lazy):
        assert run["out"] == want
    assert len(warm["rounds"]) >= 10
    assert eager["rounds"] == warm["rounds"]
    assert lazy["rounds"] == warm["rounds"]
    c = lazy["counters"]
    zt = c["zero_tax"]
    prompt_tokens = sum(len(p) for p in PROMPTS)
    assert c["draft_forwards_by_mode"]["PLAIN"] == 0
    assert zt["deferred_rows"] == len(PROMPTS)
    assert zt["deferred_tokens"] == prompt_tokens
    assert zt["prompt_caught_up_tokens"] == prompt_tokens
    assert zt["prompt_dropped_tokens"] == 0 and zt["store_tokens"] == 0
    assert eager["counters"]["zero_tax"]["deferred_rows"] == 0
    assert max(lazy["debts"]) == prompt_tokens and lazy["debts"][-1] == 0
    assert not any(eager["debts"]) and not any(warm["debts"])


def test_deferred_prefill_store_full_prefills_eagerly(tmp_path: Path) -> None:
    """A store too small for the prompts: those prefills run SGLang's draft prefill (counted),
    nothing is deferred, and re-entry still accepts as the warm run."""
    warm = _deferred_run(tmp_path / "warm", "warm")
    small = _deferred_run(tmp_path / "small", "zero_tax", {"defer_prefill_tokens": 1})
    assert small["out"] == E.AgreeReference()(PROMPTS, NEW_TOKENS)
    zt = small["counters"]["zero_tax"]
    assert zt["deferred_rows"] == 0 and zt["eager_prefills_store_full"] >= 1
    assert small["rounds"] == warm["rounds"]


def test_the_told_debt_drops_a_finished_request_without_waiting_for_a_prefill(
    tmp_path: Path,
) -> None:
    """Four prompts prefilled while PLAIN (the machine stays there), two of them finishing
    early: once the batch has shrunk by a sixteenth the store is swept, so the debt told is
    the two running requests' prompts alone from the observation after the shrink on (under
    overlap a request leaves the batch an iteration before it is marked finished), with no
    prefill after theirs."""
    lens = [8, 8, 40, 40]
    d = tmp_path / "sweep"
    eng = F.make_fsm_engine(
        d,
        policy={"name": "fixed", "speculate": False},
        config={"plain": "zero_tax", "observe_every": 1, "initial_mode": "PLAIN"},
        spec="EAGLE",
        agree="mid",
        overlap=True,
    )
    try:
        got = eng.generate(
            input_ids=[list(map(int, p)) for p in PROMPTS],
            sampling_params=[E.sampling_params(n) for n in lens],
        )
    finally:
        eng.shutdown()
    assert [list(o["output_ids"]) for o in got] == E.AgreeReference()(PROMPTS, lens)
    told = [
        (ln["bs"], ln.get("draft_debt", 0))
        for ln in F.transitions(d)
        if ln.get("event") == "specfsm.observation" and ln.get("mode") == "PLAIN"
    ]
    everyone, late = sum(len(p) for p in PROMPTS), len(PROMPTS[2]) + len(PROMPTS[3])
    assert (4, everyone) in told
    after = [debt for bs, debt in told if bs == 2]
    assert len(after) > 2 and after[0] in (everyone, late) and set(after[1:]) == {late}, told
