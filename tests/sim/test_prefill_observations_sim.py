"""The simulator's prefill observations: a policy that sees prefills gets one before each
iteration that prefills, as the SGLang adapter gives it one before each prefill forward, so the
goodput policy's prefill pressure decides in the simulator as it does when served."""

from __future__ import annotations

from typing import Any

from specfsm.fsm.observation import Observation
from specfsm.fsm.table import Mode
from specfsm.model.acceptance import DraftShape, alpha_from_accept_length
from specfsm.model.costs import CostModel, load_table
from specfsm.policy.goodput import goodput_from_args
from specfsm.sim.engine import run
from specfsm.sim.fsm_controller import FSMController
from specfsm.sim.result import RunResult
from specfsm.sim.traces import Load, Workload

CHAIN3 = DraftShape.chain(3)
#: the serving benchmark's GPU goodput configuration, on the one-context table
SERVED = {
    "table": "h200_sglang0517_llama8b",
    "shape": "chain3",
    "accept_len": 2.4,
    "price_queued": 1.0,
    "prefill_ms_per_token": 0.023,
    "reversal_window": 256,
}
#: the bursty trace's shape: Poisson at 2 and 40 requests/s, 7 s each
BURSTY = Load("bursty", "poisson", lambda t: 40.0 if t % 14.0 >= 7.0 else 2.0, 28.0)
LENGTHS = Workload(prompt_len=(128, 2200), output_len=(32, 250))


def _serve(observe: bool, seed: int = 0) -> tuple[FSMController, RunResult]:
    ctl = FSMController(
        "goodput",
        goodput_from_args(SERVED),
        CHAIN3,
        lazy_draft_prefill=True,
        prefill_observations=observe,
    )
    cost = CostModel(load_table("h200_sglang0517_llama8b"), CHAIN3)
    alpha = alpha_from_accept_length(2.4, CHAIN3)
    res = run(ctl, BURSTY, cost, alpha, workload=LENGTHS, seed=seed, record_timeline=True)
    return ctl, res


def _first_plain(res: RunResult) -> float:
    """When the run first ran PLAIN (simulated seconds; inf: never)."""
    assert res.timeline is not None
    return next((t for t, _, mode in res.timeline if mode == Mode.PLAIN.value), float("inf"))


def test_off_by_default_and_for_a_policy_that_sees_none() -> None:
    pol = goodput_from_args(SERVED)
    assert not FSMController("g", pol, CHAIN3).wants_prefills
    blind = goodput_from_args({**SERVED, "prefills": False})
    assert not FSMController("g", blind, CHAIN3, prefill_observations=True).wants_prefills
    on = FSMController("g", pol, CHAIN3, prefill_observations=True)
    assert on.wants_prefills and on.describe()["prefill_observations"] is True


def test_the_prefill_pressure_leaves_speculating_as_the_first_burst_comes() -> None:
    """Fed the prefills, the served configuration goes PLAIN within the first burst's first
    second and serves more tokens; on decode observations alone it speculates through the
    burst (the simulator prefills each iteration's arrivals at once, so the decode batch it
    sees grows late), as the shapes example's policy without the pressure did when served."""
    for seed in range(2):
        blind_ctl, blind = _serve(False, seed)
        seen_ctl, seen = _serve(True, seed)
        assert 7.0 <= _first_plain(seen) < 8.0 < 14.0 < _first_plain(blind)
        assert seen.output_tokens > blind.output_tokens
        assert seen.mode_time_s["SPECULATING"] < blind.mode_time_s["SPECULATING"]
        assert seen_ctl.policy.est.share > 0.0  # type: ignore[attr-defined]
        assert blind_ctl.policy.est.share == 0.0  # type: ignore[attr-defined]


class _Seen:
    """The goodput policy, with the draft debt of every observation it was asked on."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.debts: list[tuple[Mode, int]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def decide(self, mode: Mode, obs: Observation) -> Any:
        self.debts.append((mode, obs.draft_debt))
        return self.inner.decide(mode, obs)


def test_the_policy_is_told_the_prompts_prefilled_without_the_draft() -> None:
    """With the draft's prefill deferred in PLAIN (as the adapter does), the policy is told the
    prompts not caught up yet (`Observation.draft_debt`) while PLAIN, and the catch-up clears
    them; with the draft prefilled eagerly there is never a debt."""
    cost = CostModel(load_table("h200_sglang0517_llama8b"), CHAIN3)
    alpha = alpha_from_accept_length(2.4, CHAIN3)
    debts = {}
    for lazy in (True, False):
        pol = _Seen(goodput_from_args(SERVED))
        ctl = FSMController(
            "goodput", pol, CHAIN3, lazy_draft_prefill=lazy, prefill_observations=True
        )
        run(ctl, BURSTY, cost, alpha, workload=LENGTHS, seed=0)
        debts[lazy] = pol.debts
    plain = [d for mode, d in debts[True] if mode is Mode.PLAIN]
    spec = [d for mode, d in debts[True] if mode is Mode.SPECULATING]
    assert plain and max(plain) > 10 * LENGTHS.prompt_len[1]  # a burst's prompts
    assert spec and sorted(spec)[len(spec) // 2] == 0  # caught up: speculating owes nothing
    assert not any(d for _, d in debts[False])
