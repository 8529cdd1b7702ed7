"""The honest baselines, the per-phase oracle and the sweep's summary lines."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from specfsm.fsm.table import Mode
from specfsm.model.acceptance import DraftShape, accept_length
from specfsm.model.costs import CostModel, load_table
from specfsm.sim.baselines import (
    COLD_EXTRA_FACTOR,
    COLD_ROUNDS,
    NO_DRAFT_NAME,
    PLAIN_STATE_NAME,
    SKIP0,
    STATIC_GRID,
    SkipZeroStepController,
    best_static,
    fit_k_table,
    no_draft_server,
    peers,
    static_grid,
    tune_sglang_tiers,
)
from specfsm.sim.engine import RunResult, run
from specfsm.sim.oracle import phase_oracle, phase_tok_s
from specfsm.sim.peers import SPEC, WARM, Controller, Plan, SGLangAdaptiveController
from specfsm.sim.traces import Workload, bursts, fixed_concurrency, ramp
from specfsm.sim.tune import sglang_equivalent

ROOT = Path(__file__).resolve().parents[2]
CHAIN3 = DraftShape.chain(3)
FIT = "h200_sglang0517_llama8b"
LONG = Workload(prompt_len=(512, 512), output_len=(10**6, 10**6), max_running=256)


@pytest.fixture(scope="module")
def fit() -> CostModel:
    return CostModel(load_table(FIT), CHAIN3)


def test_best_static_grid_is_the_max_over_static_runs(fit: CostModel) -> None:
    """best_static over the grid's runs is the max tok/s of the eight static states (the
    engine's PLAIN state included); the no-draft server is not one of them."""
    assert len(STATIC_GRID) == 8 and STATIC_GRID[PLAIN_STATE_NAME] is None
    assert NO_DRAFT_NAME not in STATIC_GRID
    tok = {
        c.name: run(c, fixed_concurrency(16), fit, 0.8, iterations=300, warmup_iterations=50).tok_s
        for c in static_grid()
    }
    name, best = best_static({**tok, "sglang-tuned": 10.0**9})  # a peer is never a static
    assert best == max(tok.values()) and tok[name] == best


def test_vllm_k_table_is_the_argmax_on_the_fit_table(fit: CostModel) -> None:
    """Each entry of the fitted vLLM table is the K in 0..7 with the best predicted goodput."""
    table = fit_k_table(fit, 0.6, max_bs=256)
    for bs in (1, 8, 40, 64, 128, 256):
        good = [1000.0 * bs / fit.warm_ms(bs)] + [
            fit.spec_tps(bs, accept_length(0.6, DraftShape.chain(k)), DraftShape.chain(k))
            for k in range(1, 8)
        ]
        assert table[bs] == good.index(max(good))


def test_tuned_sglang_tiers_run(fit: CostModel) -> None:
    """SGLang with tiers tuned on the fit table (and `specfsm tune`'s config) runs a ramp."""
    for cfg in (tune_sglang_tiers(fit, 0.8), sglang_equivalent(CHAIN3, 40)):
        ctl = SGLangAdaptiveController(cfg, initial_steps=3)
        r = run(ctl, ramp(1, 256, 20.0), fit, 0.8)
        assert r.tok_s > 0 and r.iterations > 100
    (tuned,) = peers(fit, CHAIN3, 0.8, names=("sglang-tuned",))
    assert run(tuned, fixed_concurrency(64), fit, 0.8, iterations=200).tok_s > 0


class _Scripted(Controller):
    """SKIP0 (or WARM) for iterations 1..5, then chain3; records each SPEC's mean accept."""

    def __init__(self, off: str, cold: bool) -> None:
        self.off, self.cold_return, self.means = off, cold, list[float]()

    def plan(
        self, it: int, bs: int, n_prefill: int, accept_lens: tuple[int, ...], mean_ctx: int = 0
    ) -> Plan:
        return Plan(self.off, Mode.PLAIN) if it <= 5 else Plan(SPEC, Mode.SPECULATING, CHAIN3)

    def feed(self, shape: DraftShape, accept_lens_mean: float, bs: int) -> None:
        self.means.append(accept_lens_mean)


def test_skip_flag_steps0_pays_no_tax_and_reenters_cold(fit: CostModel) -> None:
    """Skip-flag steps=0 costs a zero-tax step; the next COLD_ROUNDS rounds accept less."""
    sk = SkipZeroStepController({"1": {"candidate_steps": [0]}}, initial_steps=0)
    assert sk.plan(0, 4, 0, ()).kind == SKIP0 and sk.cold_return
    cold, warm = _Scripted(SKIP0, True), _Scripted(WARM, False)
    rc = run(cold, fixed_concurrency(64), fit, 1.0, workload=LONG, iterations=6 + 3 * COLD_ROUNDS)
    run(warm, fixed_concurrency(64), fit, 1.0, workload=LONG, iterations=6 + 3 * COLD_ROUNDS)
    plain_s = fit.prefill_ms(64 * 512) / 1000 + 5 * fit.zero_tax_ms(64) / 1000
    assert rc.mode_time_s["PLAIN"] == pytest.approx(plain_s)
    assert warm.means == [4.0] * len(warm.means)  # alpha 1: every draft accepted
    first, after = cold.means[:COLD_ROUNDS], cold.means[COLD_ROUNDS:]
    assert sum(first) / len(first) == pytest.approx(1 + COLD_EXTRA_FACTOR * 3, abs=0.1)
    assert after == [4.0] * len(after)


def _fake(name: str, phase_tokens: list[int], tpots: list[tuple[float, float]]) -> RunResult:
    r = RunResult(name, "t", 0, 0.0, 0, 0.0, [x for x, _ in tpots], [], 0, {})
    r.finish_t_s, r.phase_s, r.phase_tokens = [t for _, t in tpots], 1.0, phase_tokens
    return r


def test_oracle_picks_the_per_phase_best() -> None:
    """Each phase's winner is the static with the most tokens; TPOTs come from the winners."""
    a = _fake("a", [10, 1, 10], [(1.0, 0.5), (9.0, 1.5), (2.0, 2.5)])
    b = _fake("b", [1, 10, 1], [(8.0, 0.5), (3.0, 1.5), (7.0, 2.5)])
    o = phase_oracle({"a": a, "b": b}, 3.0)
    assert o.winners == ("a", "b", "a") and o.tok_s == pytest.approx(30 / 3)
    assert sorted(o.tpot_ms) == [1.0, 2.0, 3.0] and o.tpot_p99_ms == 3.0
    load = bursts(2, 128, 10.0, 20.0)
    runs = {
        c.name: run(c, load, CostModel(load_table(FIT)), 0.8, phase_s=2.5) for c in static_grid()
    }
    real = phase_oracle(runs, 20.0)
    assert real.tok_s >= max(phase_tok_s(r, 20.0) for r in runs.values())


def test_policy_sweep_quick_prints_the_summary_lines(tmp_path: Path) -> None:
    """`policy_sweep --quick` ends with the five summary lines and the two against a server
    without a draft model."""
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks/policy_sweep.py"),
            "--quick",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    text = proc.stdout
    for name in (
        "a_min_ratio_vs_best_static_grid",
        "a_min_ratio_vs_best_peer",
        "b_min_ratio_vs_phase_oracle",
        "b_p99_tpot_ratio_vs_phase_oracle",
        "b_max_switches_per_100_iterations",
    ):
        assert re.search(rf"^{name}: \d+\.\d+ \(goal [<>]= [\d.]+\)$", text, re.M), name
    # against a server without a draft model too: goals, with the reason on the line
    for name in ("a_min_ratio_vs_no_draft_server", "b_min_ratio_vs_phase_oracle_no_draft"):
        assert re.search(rf"^{name}: \d+\.\d+ \(goal >= 0\.9[89]; ", text, re.M), name


def test_plain_state_pays_the_draft_prefill_the_no_draft_server_skips(fit: CostModel) -> None:
    """The grid's PLAIN state (specfsm's engine held in PLAIN) prefills through the draft, the
    no-draft server does not: at 128 requests the latter is faster; neither speculates."""
    load = fixed_concurrency(128)
    plain = next(c for c in static_grid() if c.name == PLAIN_STATE_NAME)
    nd = no_draft_server()
    assert plain.has_draft and not nd.has_draft
    r_plain = run(plain, load, fit, 0.8, iterations=300, warmup_iterations=50)
    r_nd = run(nd, load, fit, 0.8, iterations=300, warmup_iterations=50)
    assert r_nd.tok_s > r_plain.tok_s


def test_policy_sweep_defers_plains_draft_prefill_as_the_adapter(fit: CostModel) -> None:
    """policy_sweep's default prices PLAIN as the adapter serves it (`defer_prefill_tokens`):
    the grid's PLAIN state and specfsm-zero-tax prefill by the target alone, so the held PLAIN
    state serves as the no-draft server does; --eager-draft-prefill keeps the draft's prefill."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import policy_sweep_task as task

    chain3 = DraftShape.chain(3)
    deferred = task._controller(PLAIN_STATE_NAME, fit, chain3, 0.8, True)
    eager = task._controller(PLAIN_STATE_NAME, fit, chain3, 0.8, False)
    zt = task._controller("specfsm-zero-tax", fit, chain3, 0.8, True)
    assert deferred.lazy_draft_prefill and not eager.lazy_draft_prefill and zt.lazy_draft_prefill
    load = fixed_concurrency(128)
    tok = {
        name: run(c, load, fit, 0.8, iterations=300, warmup_iterations=50).tok_s
        for name, c in (("deferred", deferred), ("eager", eager), ("nd", no_draft_server()))
    }
    assert tok["eager"] < tok["deferred"] == pytest.approx(tok["nd"], rel=0.02)


def test_trtllm_off_step_is_zero_tax_then_one_catch_up(fit: CostModel) -> None:
    """TensorRT-LLM's off step keeps the draft catchable in one iteration, so it is priced as
    specfsm's zero-tax PLAIN step (a plain decode plus the capture of the target's hidden
    states), not a plain decode; re-enabling is one RESYNC."""
    from specfsm.sim.baselines import DraftLenScheduleController, fit_draft_len_schedule
    from specfsm.sim.peers import RESYNC, ZERO_TAX

    t = DraftLenScheduleController({10: 3}, 10)
    assert t.plan(0, 11, 0, ()).kind == ZERO_TAX
    assert t.plan(1, 10, 0, ()).kind == RESYNC
    assert t.plan(2, 10, 0, ()).kind == SPEC
    sched, mc = fit_draft_len_schedule(fit, 0.6)
    assert 0 < mc < 256 and sched[256] == 0
