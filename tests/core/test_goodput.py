"""GoodputPolicy: decisions from the cost model, EMA, margin, debounce, dwell, rank invariance."""

from __future__ import annotations

import re

import pytest

from specfsm.fsm.decision import Policy
from specfsm.fsm.observation import Observation
from specfsm.fsm.table import TRANSITIONS, Event, Mode
from specfsm.fsm.verdict import event_of
from specfsm.model.acceptance import DraftShape, accept_length, chain_accept_length
from specfsm.model.costs import ENGINE_TABLE, SHARED_REF, CostModel, load_table
from specfsm.policy.goodput import GoodputPolicy, goodput_from_args

ACC = chain_accept_length(0.8, 3)  # 2.952; crossover bs 121 on the shared table


@pytest.fixture(scope="module")
def cost() -> CostModel:
    return CostModel(load_table(SHARED_REF), DraftShape.chain(3))


def drive(p: GoodputPolicy, mode: Mode, bs: int, n: int, start: int = 0, acc: tuple[int, ...] = ()):
    """Feed n identical observations; return (iteration, event) of the first event or None."""
    for i in range(start, start + n):
        ev = event_of(p.decide(mode, Observation(iteration=i, decode_bs=bs, accept_lens=acc)))
        if ev is not None:
            return i, ev
    return None


def test_is_a_policy(cost: CostModel) -> None:
    """GoodputPolicy satisfies the Policy protocol."""
    assert isinstance(GoodputPolicy(cost, ACC), Policy)


def test_predict_matches_cost_model(cost: CostModel) -> None:
    """predict() = (bs/off_ms, bs*acc/spec_ms) in tokens/s; off_ms = the zero-tax PLAIN step
    (the default, as in the adapter) or a warm step (1-token verify + 1-token draft-extend)."""
    plain, spec = GoodputPolicy(cost, ACC).predict(1)
    # the shared table has no zero-tax rows: a decode step (x 1.0, an estimate)
    assert plain == pytest.approx(1000 / cost.plain_ms(1)) == 1000 / cost.zero_tax_ms(1)
    assert spec == pytest.approx(1000 * ACC / cost.spec_ms(1))
    assert GoodputPolicy(cost, ACC, plain="zero-tax").predict(1) == (plain, spec)  # old spelling
    warm, spec_w = GoodputPolicy(cost, ACC, plain="warm").predict(1)
    # the shared table has no measured warm step: plain decode + a 1-token draft forward
    assert warm == pytest.approx(1000 / (cost.plain_ms(1) + cost.draft_ms(1, 1))) and spec_w == spec


def test_warm_switches_later_than_zero_tax(cost: CostModel) -> None:
    """Between the two crossovers speculation beats a warm step but not a plain one."""
    x_zero = cost.crossover_bs(ACC, plain="zero-tax")
    x_warm = cost.crossover_bs(ACC, plain="warm")
    assert x_zero is not None and x_warm is not None and x_zero < x_warm
    bs = (x_zero + x_warm) // 2
    z = GoodputPolicy(cost, ACC, plain="zero-tax", margin=0.0, min_dwell=0)
    w = GoodputPolicy(cost, ACC, plain="warm", margin=0.0, min_dwell=0)
    assert drive(z, Mode.SPECULATING, bs, 50) is not None
    assert drive(w, Mode.SPECULATING, bs, 50) is None
    with pytest.raises(ValueError):
        GoodputPolicy(cost, ACC, plain="cold")


def test_goodput_from_args() -> None:
    """The SGLang adapter's {"name": "goodput", ...} builds through goodput_from_args."""
    p = goodput_from_args(
        {"shape": "chain3", "accept_len": 2.5, "margin": 0.05, "min_dwell": 8, "ctx": 1024}
    )
    assert isinstance(p, GoodputPolicy) and p.plain == "zero_tax" and p.margin == 0.05
    assert p.min_dwell == 8 and p.cost.shape == DraftShape.chain(3)
    # a policy that names no table is priced on the in-engine table
    assert p.cost.table.source == ENGINE_TABLE and p.prior_accept_len == 2.5
    t = goodput_from_args({"table": SHARED_REF, "shape": "tree", "accept_len": 2, "plain": "warm"})
    assert t.cost.shape == DraftShape(4, 2, 16) and t.plain == "warm"
    assert goodput_from_args({"shape": "chain3", "accept_len": 2, "plain": "zero-tax"}).plain == (
        "zero_tax"
    )
    assert goodput_from_args({"shape": [1, 5, 6], "accept_len": 3}).cost.shape.steps == 5
    assert goodput_from_args({"shape": "4,2,8", "accept_len": 2}).cost.shape.draft_tokens == 8
    bad: list[tuple[dict[str, object], str]] = [
        ({"accept_len": 2.5}, "'shape' is required"),
        ({"shape": "chain3"}, "'accept_len' is required"),
        ({"shape": "chain3", "accept_len": 0.5}, "accept_len"),
        ({"shape": "chain3", "accept_len": "2.5"}, "must be a number"),
        ({"shape": "pyramid", "accept_len": 2.5}, "bad draft shape"),
        ({"shape": "1,3,9", "accept_len": 2.5}, "bad draft shape"),
        ({"shape": "chain3", "accept_len": 2.5, "table": "nope"}, "cannot use table"),
        ({"shape": "chain3", "accept_len": 2.5, "margn": 0.1}, "unknown keys ['margn']"),
        ({"shape": "chain3", "accept_len": 2.5, "debounce": 1.5}, "must be an integer"),
        ({"shape": "chain3", "accept_len": 2.5, "ctx": 0}, "ctx must be > 0"),
        ({"shape": "chain3", "accept_len": 2.5, "plain": "cold"}, "plain must be one of"),
    ]
    for args, msg in bad:
        with pytest.raises(ValueError, match=re.escape(msg)):
            goodput_from_args(args)


def test_stays_speculating_at_low_load(cost: CostModel) -> None:
    """At bs 8 speculation wins by ~2x: no event for 1000 iterations."""
    assert drive(GoodputPolicy(cost, ACC), Mode.SPECULATING, 8, 1000) is None


def test_load_high_after_dwell(cost: CostModel) -> None:
    """At bs 256 plain wins: LOAD_HIGH exactly at iteration min_dwell (debounce already met)."""
    p = GoodputPolicy(cost, ACC, min_dwell=32, debounce=4)
    assert drive(p, Mode.SPECULATING, 256, 100) == (32, Event.LOAD_HIGH)
    assert "plain" in p.last_reason


def test_debounce_counts_consecutive(cost: CostModel) -> None:
    """With no dwell, LOAD_HIGH needs `debounce` consecutive high iterations."""
    p = GoodputPolicy(cost, ACC, min_dwell=0, debounce=5)
    assert drive(p, Mode.SPECULATING, 256, 100) == (4, Event.LOAD_HIGH)


def test_load_low_from_plain(cost: CostModel) -> None:
    """In PLAIN at bs 4 the policy returns to speculation (LOAD_LOW)."""
    p = GoodputPolicy(cost, ACC, min_dwell=10, debounce=2)
    assert drive(p, Mode.PLAIN, 4, 100) == (10, Event.LOAD_LOW)


def test_margin_dead_band(cost: CostModel) -> None:
    """Where the two modes are within the margin, neither mode is left."""
    p = GoodputPolicy(cost, ACC, margin=0.05, min_dwell=0)
    bs = next(b for b in range(100, 140) if abs(p.predict(b)[1] / p.predict(b)[0] - 1) < 0.02)
    assert drive(p, Mode.SPECULATING, bs, 200) is None
    assert drive(GoodputPolicy(cost, ACC, margin=0.05, min_dwell=0), Mode.PLAIN, bs, 200) is None


def test_ema_learns_low_acceptance(cost: CostModel) -> None:
    """Accept length 1 (every draft rejected) drives the EMA down and speculation off at bs 8."""
    p = GoodputPolicy(cost, ACC, ema_alpha=0.2, min_dwell=0)
    hit = drive(p, Mode.SPECULATING, 8, 200, acc=(1,) * 8)
    assert hit is not None and hit[1] is Event.LOAD_HIGH
    assert p.ema_accept_len < 1.3


def test_ema_weighs_requests_not_iterations(cost: CostModel) -> None:
    """One verify moves the estimate by ema_alpha; an iteration of 64 verifies by
    1 - (1 - ema_alpha)^64 of the way to their mean."""
    one = GoodputPolicy(cost, ACC, ema_alpha=0.01)
    one.decide(Mode.SPECULATING, Observation(iteration=0, decode_bs=1, accept_lens=(1,)))
    assert one.ema_accept_len == pytest.approx(ACC - 0.01 * (ACC - 1))
    many = GoodputPolicy(cost, ACC, ema_alpha=0.01)
    many.decide(Mode.SPECULATING, Observation(iteration=0, decode_bs=64, accept_lens=(1,) * 64))
    assert many.ema_accept_len == pytest.approx(ACC - (1 - 0.99**64) * (ACC - 1))


def test_ema_frozen_outside_speculating(cost: CostModel) -> None:
    """accept_lens seen in PLAIN do not move the EMA."""
    p = GoodputPolicy(cost, ACC)
    p.decide(Mode.PLAIN, Observation(iteration=0, decode_bs=300, accept_lens=(1, 1, 1)))
    assert p.ema_accept_len == pytest.approx(ACC)


def test_pessimistic_estimate_relaxes_in_plain(cost: CostModel) -> None:
    """A low estimate learnt while SPECULATING does not trap the policy in PLAIN at low load:
    it relaxes toward the prior (half-life in PLAIN iterations) and speculation is retried;
    with relax_half_life=0 it never is. An estimate above the prior is left alone."""
    stuck = GoodputPolicy(cost, ACC, ema_alpha=0.2, min_dwell=0, relax_half_life=0)
    p = GoodputPolicy(cost, ACC, ema_alpha=0.2, min_dwell=0, relax_half_life=100)
    for q in (stuck, p):
        hit = drive(q, Mode.SPECULATING, 8, 200, acc=(1,) * 8)
        assert hit is not None and hit[1] is Event.LOAD_HIGH
    assert drive(stuck, Mode.PLAIN, 1, 5000, start=200) is None
    back = drive(p, Mode.PLAIN, 1, 5000, start=200)
    assert back is not None and back[1] is Event.LOAD_LOW
    assert 200 < back[0] < 200 + 5 * 100  # a few half-lives, not immediately
    high = GoodputPolicy(cost, ACC, relax_half_life=1)
    high.ema_accept_len = ACC + 1.0
    drive(high, Mode.PLAIN, 1, 10)
    assert high.ema_accept_len == pytest.approx(ACC + 1.0)


def test_never_decides_in_draining_and_events_are_legal(cost: CostModel) -> None:
    """DRAINING yields None; every emitted event is legal in its mode."""
    p = GoodputPolicy(cost, ACC, min_dwell=0, debounce=1)
    assert drive(p, Mode.DRAINING, 256, 50) is None
    for mode in (Mode.SPECULATING, Mode.PLAIN, Mode.RESYNCING):
        for bs in (1, 256):
            q = GoodputPolicy(cost, ACC, min_dwell=0, debounce=1)
            ev = event_of(q.decide(mode, Observation(iteration=0, decode_bs=bs)))
            assert ev is None or ev in TRANSITIONS[mode]


def test_rank_invariant(cost: CostModel) -> None:
    """Two ranks seeing the same inputs (different `rank`) decide identically."""
    a, b = GoodputPolicy(cost, ACC), GoodputPolicy(cost, ACC)
    mode_a = mode_b = Mode.SPECULATING
    for i in range(400):
        bs = 8 if (i // 100) % 2 == 0 else 250
        ea = event_of(
            a.decide(mode_a, Observation(iteration=i, decode_bs=bs, accept_lens=(3,) * 4, rank=0))
        )
        eb = event_of(
            b.decide(mode_b, Observation(iteration=i, decode_bs=bs, accept_lens=(3,) * 4, rank=5))
        )
        assert ea == eb
        if ea is not None:
            mode_a = mode_b = TRANSITIONS[mode_a][ea]
            if mode_a is Mode.DRAINING:
                mode_a = mode_b = Mode.PLAIN
            elif mode_a is Mode.RESYNCING:
                mode_a = mode_b = Mode.SPECULATING


def test_describe_and_validation(cost: CostModel) -> None:
    """describe() names the policy; bad parameters raise."""
    d = GoodputPolicy(cost, ACC).describe()
    assert d["policy"] == "goodput" and d["margin"] == 0.02
    with pytest.raises(ValueError):
        GoodputPolicy(cost, 0.5)
    with pytest.raises(ValueError):
        GoodputPolicy(cost, ACC, ema_alpha=0)


def test_context_aware_with_a_multi_context_table() -> None:
    """With the engine's ctx 1024 + 4096 table (zero-tax PLAIN), bs 16 speculates at 1024 tokens
    of context and stops at 4096; mean_ctx 0 (unknown) falls back to the configured context; a
    single-context table ignores mean_ctx. (Against the measured warm PLAIN, 2x a decode step,
    chain3 at alpha 0.6 never leaves speculation at either context.)"""
    shape = DraftShape.chain(3)
    both = CostModel(load_table("h200_sglang0517_llama8b+h200_sglang0517_llama8b_ctx4096"), shape)
    acc = accept_length(0.6, shape)

    def first_event(ctx: int, model: CostModel = both) -> Event | None:
        p = GoodputPolicy(model, acc, min_dwell=0, debounce=2, plain="zero-tax")
        for i in range(50):
            ev = event_of(
                p.decide(Mode.SPECULATING, Observation(iteration=i, decode_bs=16, mean_ctx=ctx))
            )
            if ev is not None:
                return ev
        return None

    assert GoodputPolicy(both, acc).ctx_aware
    assert first_event(1024) is None
    assert first_event(4096) is Event.LOAD_HIGH
    assert first_event(0) is None  # unknown: the configured ctx (1024)
    single = CostModel(load_table("h200_sglang0517_llama8b"), shape)
    assert not GoodputPolicy(single, acc).ctx_aware
    assert first_event(4096, single) is None
    cfg = {"table": ["h200_sglang0517_llama8b", "h200_sglang0517_llama8b_ctx4096"],
           "shape": "chain3", "accept_len": acc}  # fmt: skip
    assert goodput_from_args(cfg).ctx_aware
    with pytest.raises(ValueError, match="cannot use table"):
        goodput_from_args({**cfg, "table": ["h200_sglang0517_llama8b"] * 2})


def test_in_engine_table_zero_tax_plain_switches_and_warm_never_does() -> None:
    """On the in-engine H200 table (ctx 1024, chain3, alpha 0.7), the default policy (zero-tax
    PLAIN, priced from the measured rows) leaves SPECULATING at bs 256 and returns at bs 4;
    priced against warm PLAIN (~2x a decode step) it never leaves, at any measured bs."""
    shape = DraftShape.chain(3)
    engine = CostModel(load_table("h200_sglang0517_llama8b"), shape)
    acc = accept_length(0.7, shape)
    zt = GoodputPolicy(engine, acc, min_dwell=0, debounce=2)
    assert zt.plain == "zero_tax"
    hit = drive(zt, Mode.SPECULATING, 256, 20)
    assert hit is not None and hit[1] is Event.LOAD_HIGH
    back = drive(GoodputPolicy(engine, acc, min_dwell=0, debounce=2), Mode.PLAIN, 4, 50)
    assert back is not None and back[1] is Event.LOAD_LOW
    for bs in (1, 16, 64, 256):
        warm = GoodputPolicy(engine, acc, min_dwell=0, debounce=2, plain="warm")
        assert drive(warm, Mode.SPECULATING, bs, 20) is None


def test_leaving_zero_tax_plain_waits_for_the_catch_up_to_pay(cost: CostModel) -> None:
    """Zero-tax: leaving PLAIN also needs the horizon's saving to exceed the RESYNCING catch-up
    estimate (lag_cap tokens per request after a long PLAIN stretch): at a bs where speculation
    wins by a little, a 1-iteration horizon never pays for it, the default 64 does; warm PLAIN
    has no catch-up to pay for."""

    def saving(bs: int) -> float:
        return cost.off_ms(bs) - cost.spec_ms(bs) / ACC

    bs = next(
        b
        for b in range(1, 200)
        if 0 < saving(b) < cost.catchup_ms(b, b * 128) < 64 * saving(b)
        and cost.spec_tps(b, ACC) > cost.off_tps(b) * 1.001
    )

    def leaves(p: GoodputPolicy) -> bool:
        p.decide(Mode.PLAIN, Observation(iteration=0, decode_bs=0))  # PLAIN since iteration 0
        return drive(p, Mode.PLAIN, bs, 50, start=1000) is not None

    assert not leaves(GoodputPolicy(cost, ACC, margin=0.0, min_dwell=0, debounce=1, horizon=1))
    assert leaves(GoodputPolicy(cost, ACC, margin=0.0, min_dwell=0, debounce=1))
    warm = GoodputPolicy(cost, ACC, margin=0.0, min_dwell=0, debounce=1, horizon=1, plain="warm")
    assert cost.spec_tps(bs, ACC) > cost.off_tps(bs, "warm") and leaves(warm)


def test_deferred_prompts_are_part_of_the_catch_up(cost: CostModel) -> None:
    """The prompts of requests prefilled while zero-tax PLAIN (`draft_debt`) are extended over
    by the catch-up too: at a bs where the default horizon pays for the decode lag alone, a
    debt whose catch-up costs more than the horizon saves keeps PLAIN, and the LOAD_LOW taken
    without it says the debt it carried (a decision is data)."""

    def saving(bs: int) -> float:
        return cost.off_ms(bs) - cost.spec_ms(bs) / ACC

    bs = next(
        b
        for b in range(1, 200)
        if 0 < cost.catchup_ms(b, b * 128) < 64 * saving(b)
        and cost.spec_tps(b, ACC) > cost.off_tps(b) * 1.001
    )
    debt = next(
        d for d in range(1_000, 10**7, 1_000) if cost.catchup_ms(bs, bs * 128 + d) > 64 * saving(bs)
    )

    def first(debt_tokens: int) -> tuple[GoodputPolicy, object]:
        p = GoodputPolicy(cost, ACC, margin=0.0, min_dwell=0, debounce=1)
        p.decide(Mode.PLAIN, Observation(iteration=0, decode_bs=0))  # PLAIN since iteration 0
        for i in range(1000, 1050):
            v = p.decide(Mode.PLAIN, Observation(iteration=i, decode_bs=bs, draft_debt=debt_tokens))
            if v is not None:
                return p, v
        return p, None

    assert first(debt)[1] is None
    p, v = first(debt // 10)
    assert event_of(v) is Event.LOAD_LOW  # type: ignore[arg-type]
    assert f"draft debt {debt // 10} tokens" in p.last_reason


def test_without_shapes_it_is_the_on_off_policy(cost: CostModel) -> None:
    """shapes=() never RESHAPEs; with shapes the launch shape is always a candidate."""
    p = GoodputPolicy(cost, ACC)
    assert p.shapes == () and p.best(1) == cost.shape
    events = {drive(p, Mode.SPECULATING, bs, 40) for bs in (1, 8, 300)}
    assert all(e is None or e[1] is not Event.RESHAPE for e in events)
    q = GoodputPolicy(cost, ACC, shapes=(DraftShape.chain(1),))
    assert q.shapes == (cost.shape, DraftShape.chain(1))
    assert q.best(1000) is None


def test_step_times_calibrate_the_on_off_prediction(cost: CostModel) -> None:
    """Steps measured at 2x the table move on/off predictions 2x (not with calibrate=False)."""
    for calibrate, factor in ((True, 2.0), (False, 1.0)):
        p = GoodputPolicy(cost, ACC, calibrate=calibrate)
        for i in range(10):
            p.decide(
                Mode.SPECULATING,
                Observation(iteration=i, decode_bs=16, step_ms=2.0 * cost.spec_ms(16),
                            step_bs=16, step_shape=cost.shape, step_kind="spec"),
            )  # fmt: skip
        spec_tps = p.predict(16)[1]
        assert spec_tps == pytest.approx(16000 * ACC / (factor * cost.spec_ms(16)), rel=0.01)


def test_price_queued_prices_the_batch_a_burst_brings() -> None:
    """With price_queued, a burst waiting for its prefills is priced at the batch it brings:
    at 8 decoding and 248 queued the H200 table says PLAIN, so the policy leaves SPECULATING
    before the prefills run (they then skip the draft's); without it, it keeps speculating.
    The priced batch stops at the table's largest measured one; the parameter is described."""
    cost = CostModel(load_table(ENGINE_TABLE), DraftShape.chain(3))
    acc = (3, 3, 2, 3)

    def first(p: GoodputPolicy, queued: int) -> object:
        for i in range(64):
            obs = Observation(iteration=i, decode_bs=8, queued=queued, accept_lens=acc)
            if (v := p.decide(Mode.SPECULATING, obs)) is not None:
                return v
        return None

    assert first(GoodputPolicy(cost, 2.4, min_dwell=0), 248) is None
    v = first(GoodputPolicy(cost, 2.4, min_dwell=0, price_queued=1.0), 248)
    assert v is not None and event_of(v) is Event.LOAD_HIGH
    assert first(GoodputPolicy(cost, 2.4, min_dwell=0, price_queued=1.0), 0) is None
    p = GoodputPolicy(cost, 2.4, price_queued=1.0)
    assert p.describe()["price_queued"] == 1.0 and p.est.max_bs == 256
    with pytest.raises(ValueError, match="price_queued"):
        GoodputPolicy(cost, 2.4, price_queued=2.0)
