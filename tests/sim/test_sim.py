"""Simulator: closed-form cases (one request, fixed accept length), FSM semantics, peer rules."""

from __future__ import annotations

import json

import pytest

from specfsm.cli.tune import main as tune_main
from specfsm.model.acceptance import DraftShape
from specfsm.model.costs import SHARED_REF, CostModel, load_table
from specfsm.policy.simple import FixedPolicy, ThresholdPolicy
from specfsm.sim.engine import run
from specfsm.sim.peers import (
    BatchTableController,
    FixedController,
    FSMController,
    MaxConcurrencyController,
    SGLangAdaptiveController,
)
from specfsm.sim.traces import Workload, bursts, fixed_concurrency, ramp, sinusoid
from specfsm.sim.tune import recommend, sglang_equivalent, sglang_spec_cuda_graph_bs

CHAIN3 = DraftShape.chain(3)
ONE = Workload(prompt_len=(512, 512), output_len=(101, 101), max_running=256)


@pytest.fixture(scope="module")
def cost() -> CostModel:
    return CostModel(load_table(SHARED_REF), CHAIN3)


def test_one_request_plain(cost: CostModel) -> None:
    """1 request, no-spec: TTFT = prefill, TPOT = plain_ms(1), tokens/s = 101 / total time."""
    r = run(
        FixedController(False, CHAIN3),
        fixed_concurrency(1),
        cost,
        0.8,
        workload=ONE,
        iterations=101,
    )
    prefill = cost.prefill_ms(512, with_draft=False)
    assert r.ttft_ms == [pytest.approx(prefill)]
    assert r.tpot_ms == [pytest.approx(cost.plain_ms(1))]
    assert r.tok_s == pytest.approx(101 / ((prefill + 100 * cost.plain_ms(1)) / 1000))
    assert r.switches == 0 and r.mode_frac()["PLAIN"] == 1.0


def test_one_request_spec_all_accepted(cost: CostModel) -> None:
    """alpha=1: every verify commits K=4 tokens; 100 tokens take 25 spec iterations."""
    r = run(
        FixedController(True, CHAIN3), fixed_concurrency(1), cost, 1.0, workload=ONE, iterations=26
    )
    assert r.tpot_ms == [pytest.approx(25 * cost.spec_ms(1) / 100)]


def test_one_request_spec_nothing_accepted(cost: CostModel) -> None:
    """alpha=0: every verify commits only the bonus token; TPOT = spec_ms(1)."""
    r = run(
        FixedController(True, CHAIN3), fixed_concurrency(1), cost, 0.0, workload=ONE, iterations=101
    )
    assert r.tpot_ms == [pytest.approx(cost.spec_ms(1))]


def test_mean_accept_matches_model(cost: CostModel) -> None:
    """Sampled accept lengths average the model's (1 - a^4)/(1 - a) within 1%."""
    wl = Workload(prompt_len=(1, 1), output_len=(10**6, 10**6))
    r = run(
        FixedController(True, CHAIN3),
        fixed_concurrency(64),
        cost,
        0.8,
        workload=wl,
        iterations=401,
        warmup_iterations=1,
    )
    per_iter = r.output_tokens / 400 / 64
    assert per_iter == pytest.approx((1 - 0.8**4) / 0.2, rel=0.01)


def test_fsm_drains_one_iteration_then_plain(cost: CostModel) -> None:
    """FixedPolicy(False) through the FSM: one DRAINING iteration, then PLAIN; 1 switch."""
    wl = Workload(prompt_len=(1, 1), output_len=(10**6, 10**6))
    ctl = FSMController("never", FixedPolicy(False), CHAIN3)
    r = run(ctl, fixed_concurrency(4), cost, 0.8, workload=wl, iterations=50, record_timeline=True)
    modes = [m for _, _, m in r.timeline or []]
    assert modes[0] == "DRAINING" and set(modes[1:]) == {"PLAIN"}
    assert r.switches == 1


def test_fsm_warm_plain_pays_the_steps0_tax(cost: CostModel) -> None:
    """Warm PLAIN (the adapter as shipped): DRAINING, PLAIN and RESYNCING iterations each cost
    target(bs,1) + draft(bs,1); never a spec iteration, never a catch-up."""
    wl = Workload(prompt_len=(1, 1), output_len=(10**6, 10**6))
    ctl = FSMController("never", FixedPolicy(False), CHAIN3, plain="warm")
    r = run(ctl, fixed_concurrency(16), cost, 0.8, workload=wl, iterations=51, warmup_iterations=1)
    assert r.sim_time_s * 1000 / 50 == pytest.approx(cost.warm_ms(16))
    assert r.output_tokens == 16 * 50
    # iteration 0 prefills (bs 0); iteration 1 sees bs 16 > high: DRAINING is one warm forward
    d = FSMController("thr", ThresholdPolicy(8, 2, debounce=1, min_dwell=0), CHAIN3, plain="warm")
    r0 = run(d, fixed_concurrency(16), cost, 0.8, workload=wl, iterations=3, record_timeline=True)
    assert [m for _, _, m in r0.timeline or []] == ["SPECULATING", "DRAINING", "PLAIN"]
    assert r0.mode_time_s["DRAINING"] * 1000 == pytest.approx(cost.warm_ms(16))


def test_warm_plain_on_the_engine_table_costs_the_measured_step() -> None:
    """On the in-engine H200 table, a simulated warm PLAIN iteration costs the engine's measured
    whole PLAIN step (plain_warm_step), about 2x a decode step, not the parts' estimate."""
    engine = CostModel(load_table("h200_sglang0517_llama8b"), CHAIN3)
    wl = Workload(prompt_len=(1, 1), output_len=(10**6, 10**6))
    ctl = FSMController("never", FixedPolicy(False), CHAIN3, plain="warm")
    r = run(
        ctl, fixed_concurrency(64), engine, 0.8, workload=wl, iterations=51, warmup_iterations=1
    )
    per_step = r.sim_time_s * 1000 / 50
    assert per_step == pytest.approx(engine.table.ms("plain_warm_step", 64, 1, 1024))
    assert per_step > 1.8 * engine.plain_ms(64)


def test_fsm_zero_tax_plain_is_plain_decode(cost: CostModel) -> None:
    """Zero-tax PLAIN (the default) costs target(bs,1) only on a table without zero-tax rows."""
    wl = Workload(prompt_len=(1, 1), output_len=(10**6, 10**6))
    ctl = FSMController("never", FixedPolicy(False), CHAIN3)
    assert ctl.plain == "zero_tax"
    r = run(ctl, fixed_concurrency(16), cost, 0.8, workload=wl, iterations=51, warmup_iterations=1)
    assert r.sim_time_s * 1000 / 50 == pytest.approx(cost.plain_ms(16))
    with pytest.raises(ValueError):
        FSMController("x", FixedPolicy(False), CHAIN3, plain="warm", lazy_draft_prefill=True)


def test_fsm_resync_cost_is_catchup(cost: CostModel) -> None:
    """Zero-tax, load 1 -> 8 -> 1: SPECULATING, DRAINING, PLAIN, RESYNCING (one iteration whose
    cost is plain + the catch-up draft-extend), SPECULATING."""
    wl = Workload(prompt_len=(1, 1), output_len=(300, 300))
    ctl = FSMController(
        "thr",
        ThresholdPolicy(high=2, low=1, debounce=1, min_dwell=0),
        CHAIN3,
        plain="zero-tax",
    )
    load = bursts(1, 8, period_s=4.0, duration_s=1e9)  # 1 for 2 s, then 8 for 2 s
    r = run(ctl, load, cost, 0.8, workload=wl, iterations=3000, record_timeline=True)
    tl = r.timeline or []
    i = next(k for k, x in enumerate(tl) if x[2] == "RESYNCING")
    assert tl[i - 1][2] == "PLAIN"
    # RESYNCED -> SPECULATING; the policy may leave again at once if the load jumped back
    assert tl[i + 1][2] in ("SPECULATING", "DRAINING")
    bs = tl[i][1]
    assert (tl[i][0] - tl[i - 1][0]) * 1000 > cost.plain_ms(bs) + cost.catchup_ms(bs, bs)
    assert r.mode_time_s["RESYNCING"] > 0 and r.switches >= 2


def test_sglang_steps0_tax_at_high_load(cost: CostModel) -> None:
    """SGLang adaptive at bs 64+: steps=0 costs target(bs,1) + draft(bs,1) per step."""
    wl = Workload(prompt_len=(1, 1), output_len=(10**6, 10**6))
    r = run(
        SGLangAdaptiveController(),
        fixed_concurrency(128),
        cost,
        0.8,
        workload=wl,
        iterations=101,
        warmup_iterations=1,
    )
    assert r.sim_time_s * 1000 / 100 == pytest.approx(cost.warm_ms(128))


def test_sglang_adaptive_rejects_trees(cost: CostModel) -> None:
    """topk != 1: SGLang 0.5.23 disables adaptive (static params), so the tree runs every
    iteration at every load, including bs 128 where the default config would pick steps=0."""
    tree = DraftShape(4, 2, 16)
    wl = Workload(prompt_len=(1, 1), output_len=(10**6, 10**6))
    c = SGLangAdaptiveController(shape=tree)
    assert c.disabled_reason is not None and "topk=4" in c.disabled_reason
    r = run(c, fixed_concurrency(128), cost, 0.8, workload=wl, iterations=101, warmup_iterations=1)
    assert r.sim_time_s * 1000 / 100 == pytest.approx(cost.spec_ms(128, tree))
    assert r.switches == 0 and r.mode_frac()["SPECULATING"] == 1.0
    chain = SGLangAdaptiveController(shape=CHAIN3)
    assert chain.disabled_reason is None and chain._route(1).current_steps == 3
    with pytest.raises(ValueError):
        SGLangAdaptiveController(shape=DraftShape.chain(2))  # 2 not in [0, 1, 3, 5, 7]


def test_tpot_definitions() -> None:
    """Request-mean, token-weighted and wall-clock TPOT on a hand-made result."""
    from specfsm.sim.engine import RunResult

    r = RunResult(
        "p", "l", 0, 0.0, 0, 0.0, [2.0, 10.0], [], 0, {},
        decode_ms=[200.0, 500.0], decode_tokens=[100, 50], window_tpot_ms=[2.0, 4.0],
    )  # fmt: skip
    assert r.tpot_mean == pytest.approx(6.0)
    assert r.tpot_token_weighted == pytest.approx(700 / 150)
    assert r.tpot_wall_avg == pytest.approx(3.0)


def test_sglang_slot_rule() -> None:
    """Port of AdaptiveStepSlot: bs 1 starts at 3 steps; bs 9 pads to 10 (slot 8); 0 probes 1."""
    c = SGLangAdaptiveController()
    assert c._route(1).current_steps == 3
    assert c._route(9) is c._route(8)
    assert c._route(31) is c._route(32)  # 31 pads to 32
    s = c._route(200)
    assert s.current_steps == 0
    slot8 = c._route(16)
    slot8.current_steps = 0
    for _ in range(15):
        slot8.update(0.0)
    assert slot8.current_steps == 1  # probed after warmup 10 + interval 5


def test_peer_rules_no_hysteresis(cost: CostModel) -> None:
    """vLLM table and TRT max_concurrency follow the signal every iteration; TRT's off step is
    a zero-tax step (the draft kept catchable in one iteration), as trtllm-schedule's."""
    v = BatchTableController(10, CHAIN3)
    assert v.plan(0, 10, 0, ()).kind == "spec" and v.plan(1, 10, 1, ()).kind == "warm"
    t = MaxConcurrencyController(10, CHAIN3)
    assert t.plan(0, 11, 0, ()).kind == "zero_tax"
    assert t.plan(1, 10, 0, ()).kind == "resync"
    assert t.plan(2, 10, 0, ()).kind == "spec"


def test_max_conc_prices_off_as_trtllm_schedule() -> None:
    """The max-conc peer and trtllm-schedule with the same cut-off and one draft length run the
    same iterations at the same prices (off: a zero-tax step), on a table whose zero-tax rows
    are measured (on the shared table a zero-tax step is priced as a plain decode)."""
    from specfsm.sim.baselines import DraftLenScheduleController

    engine = CostModel(load_table("h200_sglang0517_llama8b"), CHAIN3)
    assert engine.zero_tax_ms(16) > engine.plain_ms(16)
    load = ramp(2, 24, 2.0)
    a = run(MaxConcurrencyController(10, CHAIN3), load, engine, 0.7, iterations=400, seed=5)
    b = run(DraftLenScheduleController({10: 3}, 10), load, engine, 0.7, iterations=400, seed=5)
    assert a.switches >= 1 and a.mode_time_s["PLAIN"] > 0
    assert a.tok_s == b.tok_s and a.tpot_ms == b.tpot_ms


def test_loads_shapes() -> None:
    """Ramp, bursts and sinusoid hit their ends."""
    assert ramp(1, 256, 100).level(50) == pytest.approx(256)
    assert ramp(1, 256, 100).level(100) == pytest.approx(1)
    b = bursts(2, 128, 10, 100)
    assert (b.level(1), b.level(6)) == (2, 128)
    s = sinusoid(2, 200, 30, 100)
    assert s.level(0) == pytest.approx(2) and s.level(15) == pytest.approx(200)


def test_deterministic(cost: CostModel) -> None:
    """Same seed, same result."""
    a = run(FixedController(True, CHAIN3), fixed_concurrency(8), cost, 0.7, iterations=300, seed=3)
    b = run(FixedController(True, CHAIN3), fixed_concurrency(8), cost, 0.7, iterations=300, seed=3)
    assert a.tok_s == b.tok_s and a.tpot_ms == b.tpot_ms


def test_recommend_and_sglang_json(cost: CostModel) -> None:
    """Threshold high = crossover-1; the SGLang steps=0 slot key lies above pad(high)."""
    acc = (1 - 0.8**4) / 0.2
    rec = recommend(cost, acc)
    x = rec.crossover_bs
    assert x is not None and x == cost.crossover_bs(acc)
    assert cost.plain_tps(x) >= cost.spec_tps(x, acc) and cost.plain_tps(x - 1) < cost.spec_tps(
        x - 1, acc
    )
    assert rec.threshold_high == x - 1 and rec.threshold_low < rec.threshold_high
    graph = sglang_spec_cuda_graph_bs(512)
    padded = next(g for g in graph if g >= rec.threshold_high)
    key = next(g for g in graph if g > padded)
    cfg = sglang_equivalent(CHAIN3, rec.threshold_high)
    assert cfg["1"] == {"candidate_steps": [3]} and cfg[str(key)] == {"candidate_steps": [0]}
    assert key > rec.threshold_high
    # against a warm off step (plain + 1-token draft-extend) speculation wins longer
    warm = recommend(cost, acc, plain="warm")
    xw = warm.crossover_bs
    assert xw is not None and xw > x and warm.threshold_high == xw - 1
    assert cost.spec_tps(xw - 1, acc) > cost.off_tps(xw - 1, "warm")
    assert cost.spec_tps(xw, acc) <= cost.off_tps(xw, "warm")
    assert rec.sglang_config == warm.sglang_config  # SGLang's steps=0 is warm either way


def test_tune_main_prints(cost: CostModel, capsys: pytest.CaptureFixture[str]) -> None:
    """`specfsm tune` prints both crossovers (as `recommend` computes them) and the SGLang JSON."""
    acc = (1 - 0.8**4) / 0.2
    assert tune_main(["--table", SHARED_REF, "--alpha", "0.8"]) == 0  # the fixture's table
    out = capsys.readouterr().out
    warm, zero = recommend(cost, acc, plain="warm"), recommend(cost, acc)
    assert f"crossover bs (warm PLAIN): {warm.crossover_bs}\n" in out
    assert f"crossover bs (zero_tax PLAIN): {zero.crossover_bs}\n" in out
    assert json.dumps(warm.sglang_config) in out and "candidate_steps" in out


MERGED = "h200_sglang0517_llama8b+h200_sglang0517_llama8b_ctx4096"


def test_multi_context_table_prices_each_step_at_its_mean_context() -> None:
    """With a table over ctx 1024 and 4096 the simulator prices every decode step at the batch's
    mean KV length: at 1024-token prompts it matches the ctx 1024 table, at 4096 it is slower
    than that table says. The FSM's policy sees that mean in Observation.mean_ctx."""
    both = CostModel(load_table(MERGED), CHAIN3)
    # 512 new tokens: the measured window (iterations 100-400) is pure decode
    short = Workload(prompt_len=(1024, 1024), output_len=(512, 512), max_running=64)
    long = Workload(prompt_len=(4096, 4096), output_len=(512, 512), max_running=64)

    def tok_s(cost: CostModel, wl: Workload) -> float:
        r = run(FixedController(False, CHAIN3), fixed_concurrency(64), cost, 0.6, workload=wl,
                iterations=400, warmup_iterations=100)  # fmt: skip
        return r.tok_s

    one = CostModel(load_table("h200_sglang0517_llama8b"), CHAIN3)  # ctx 1024 only
    assert tok_s(both, short) == pytest.approx(tok_s(one, short), rel=0.05)
    assert tok_s(both, long) < 0.75 * tok_s(one, long)  # decode at bs 64: 14.3 vs 8.8 ms

    seen: list[int] = []

    class Recorder(FixedPolicy):
        def decide(self, mode, obs):  # type: ignore[no-untyped-def]
            if obs.decode_bs:
                seen.append(obs.mean_ctx)
            return super().decide(mode, obs)

    ctl = FSMController("rec", Recorder(speculate=True), CHAIN3)
    run(ctl, fixed_concurrency(4), both, 0.6, workload=long, iterations=100)
    assert seen and min(seen) >= 4096 and max(seen) <= 4096 + 512


def test_zero_tax_plain_on_the_engine_table_costs_the_measured_step() -> None:
    """On the in-engine H200 table a simulated zero-tax PLAIN iteration costs zero_tax_ms (the
    measured ratio, within 2 % of a decode step), not the decode step and not a warm step."""
    engine = CostModel(load_table("h200_sglang0517_llama8b"), CHAIN3)
    wl = Workload(prompt_len=(1, 1), output_len=(10**6, 10**6))
    ctl = FSMController("never", FixedPolicy(False), CHAIN3, plain="zero_tax")
    r = run(
        ctl, fixed_concurrency(64), engine, 0.8, workload=wl, iterations=51, warmup_iterations=1
    )
    per_step = r.sim_time_s * 1000 / 50
    assert per_step == pytest.approx(engine.zero_tax_ms(64))
    assert engine.plain_ms(64) < per_step <= 1.02 * engine.plain_ms(64)


def test_lineup_by_plain_implementation() -> None:
    """lineup(plain=...) holds the statics, the peers and specfsm's threshold and goodput
    controllers in that PLAIN; without it, the historical line-up; names pick any."""
    from specfsm.sim.peers import lineup

    engine = CostModel(load_table("h200_sglang0517_llama8b"), CHAIN3)
    zt = {c.name: c for c in lineup(engine, CHAIN3, 0.7, plain="zero_tax")}
    assert {"specfsm-threshold-zero-tax", "specfsm-zero-tax"} <= set(zt)
    assert not {"specfsm-warm", "specfsm-threshold-warm"} & set(zt)
    thr = zt["specfsm-threshold-zero-tax"]
    assert isinstance(thr, FSMController) and thr.plain == "zero_tax" and not thr.lazy_draft_prefill
    warm = {c.name for c in lineup(engine, CHAIN3, 0.7, plain="warm")}
    assert {"specfsm-threshold-warm", "specfsm-warm"} <= warm and "specfsm-zero-tax" not in warm
    old = {c.name for c in lineup(engine, CHAIN3, 0.7)}
    assert "specfsm-threshold-zero-tax" not in old and {"specfsm-warm", "specfsm-zero-tax"} <= old
    named = lineup(engine, CHAIN3, 0.7, names=["specfsm-warm"], plain="zero_tax")
    assert [c.name for c in named] == ["specfsm-warm"]


def test_tune_names_the_plain_implementation_and_flags_estimates(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`specfsm tune` says which PLAIN it priced (zero_tax by default, from measured rows on the
    in-engine table), flags the RESYNCING catch-up as an estimate, and flags zero-tax PLAIN
    itself as an estimate on a table without its rows; --json carries the same."""
    assert tune_main(["--table", "h200_sglang0517_llama8b", "--alpha", "0.7"]) == 0
    out = capsys.readouterr().out
    assert "PLAIN: zero_tax (" in out and "measured plain_zero_tax_step rows" in out
    assert "estimate: RESYNCING catch-up: an estimate, not a GPU measurement" in out
    assert "crossover bs (zero_tax PLAIN): " in out and "crossover bs (warm PLAIN): " in out
    assert "estimate: zero_tax PLAIN" not in out
    assert tune_main(["--table", "h200_sglang0517_llama8b_ctx4096", "--alpha", "0.7"]) == 0
    out = capsys.readouterr().out
    assert "ESTIMATE" in out and "estimate: zero_tax PLAIN" in out
    args = ["--table", "h200_sglang0517_llama8b", "--alpha", "0.7", "--json"]
    assert tune_main([*args, "--plain", "warm"]) == 0
    js = json.loads(capsys.readouterr().out)
    assert js["plain"] == "warm" and js["estimates"] == []
    assert "plain_warm_step" in js["plain_priced"] and "crossover_bs_zero_tax" in js
    assert tune_main([*args, "--plain", "zero-tax"]) == 0
    js = json.loads(capsys.readouterr().out)
    assert js["plain"] == "zero_tax" and js["goodput_policy"]["plain"] == "zero_tax"
    assert any("catch-up" in e for e in js["estimates"])


def test_sglang_adaptive_runs_the_config_tune_prints(cost: CostModel) -> None:
    """The tuned SGLang adaptive config `specfsm tune` prints (shared keys like ema_alpha at
    the top level beside the per-bs slots) builds a simulator peer and runs: steps 3 at bs 1,
    steps 0 above the tuned threshold."""
    cfg = sglang_equivalent(CHAIN3, 48)
    assert isinstance(cfg["ema_alpha"], float)
    c = SGLangAdaptiveController(config=cfg, shape=CHAIN3)
    assert c._route(1).current_steps == 3
    assert c._route(256).current_steps == 0
    wl = Workload(prompt_len=(1, 1), output_len=(10**6, 10**6))
    r = run(c, fixed_concurrency(128), cost, 0.8, workload=wl, iterations=51, warmup_iterations=1)
    assert r.sim_time_s > 0


def test_request_lengths_do_not_depend_on_admission_batching(cost: CostModel) -> None:
    """Request k gets the same prompt and output lengths however admissions were batched
    (a block-drawn function of k): two controllers serve the same requests."""
    import numpy as np

    from specfsm.sim.engine import _Requests
    from specfsm.sim.traces import Workload

    a = _Requests(np, Workload(), np.random.default_rng([5, 1]))
    b = _Requests(np, Workload(), np.random.default_rng([5, 1]))
    pa = np.concatenate([a.lengths(0, 3)[0], a.lengths(3, 5000)[0]])
    ob = [b.lengths(i, 1)[1] for i in range(10)]
    assert (pa == b.lengths(0, 5003)[0]).all()
    assert [int(x[0]) for x in ob] == [int(x) for x in a.lengths(0, 10)[1]]


def test_open_loop_burst_starts_on_time() -> None:
    """A Poisson load stepping from 2 to 40 req/s at 7 s: the first arrival after the step
    comes at the burst's rate (mean 1/40 s), not after a gap drawn at the quiet rate, and the
    burst brings its 40 req/s."""
    import numpy as np

    from specfsm.sim.engine import _Arrivals
    from specfsm.sim.traces import Load

    load = Load("step", "poisson", lambda t: 2.0 if t < 7.0 else 40.0, 14.0)
    delays, counts = [], []
    for seed in range(200):
        arr = _Arrivals(load, np.random.default_rng(seed))
        times = arr.take(14.0, 0, 10_000)
        after = [x for x in times if x >= 7.0]
        delays.append(after[0] - 7.0)
        counts.append(len(after))
    assert float(np.mean(delays)) < 0.05  # drawn at 2 req/s the mean delay is ~0.5 s
    assert 38.0 < float(np.mean(counts)) / 7.0 < 42.0
