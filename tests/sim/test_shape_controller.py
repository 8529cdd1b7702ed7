"""FSMController with shapes: plans the machine's shape, reports accept_shape and the
measured step to the policy, and lineup's goodput entries choose among the shape grid."""

from __future__ import annotations

from specfsm.fsm.observation import Observation
from specfsm.fsm.table import Event, Mode
from specfsm.model.acceptance import DEFAULT_SHAPE_GRID, DraftShape, accept_length
from specfsm.model.costs import CostModel, load_table
from specfsm.policy.goodput import GoodputPolicy
from specfsm.sim.engine import run
from specfsm.sim.peers import SPEC, FSMController, lineup
from specfsm.sim.traces import fixed_concurrency

CHAIN1, CHAIN3 = DraftShape.chain(1), DraftShape.chain(3)
FIT = "h200_sglang0517_llama8b"


class Scripted:
    """Records observations; RESHAPEs to chain1 at iteration 2, LOAD_HIGH at 5."""

    def __init__(self) -> None:
        self.shapes = (CHAIN3, CHAIN1)
        self.next_shape: DraftShape | None = None
        self.last_reason = ""
        self.seen: list[Observation] = []

    def decide(self, mode: Mode, obs: Observation) -> Event | None:
        self.seen.append(obs)
        if obs.iteration == 2 and mode is Mode.SPECULATING:
            self.next_shape = CHAIN1
            return Event.RESHAPE
        if obs.iteration == 5 and mode is Mode.SPECULATING:
            return Event.LOAD_HIGH
        return None

    def describe(self) -> dict[str, object]:
        return {"policy": "scripted-shapes"}


def test_plans_the_machine_shape_and_reports_steps() -> None:
    """Plans follow the machine's shape; observations carry accept_shape, shape, step_*."""
    pol = Scripted()
    ctl = FSMController("x", pol, CHAIN3)
    assert ctl.machine.shapes == (CHAIN3, CHAIN1) and ctl.machine.shape == CHAIN3
    plans = []
    for it in range(5):
        p = ctl.plan(it, 4, 0, (2, 2, 1, 3) if it else ())
        ctl.observe_step(p, 4, 10.0 + it)
        ctl.after(p)
        plans.append(p)
    assert [p.shape for p in plans] == [CHAIN3, CHAIN3, CHAIN1, CHAIN1, CHAIN1]
    assert all(p.kind == SPEC for p in plans)
    o3 = pol.seen[3]
    assert o3.accept_shape == CHAIN1 and o3.shape == CHAIN1
    assert (o3.step_ms, o3.step_bs, o3.step_shape, o3.step_kind) == (12.0, 4, CHAIN1, "spec")
    assert pol.seen[0].step_ms == 0.0 and pol.seen[0].accept_shape is None
    p = ctl.plan(5, 4, 0, (1, 1, 1, 1))  # LOAD_HIGH: DRAINING runs a warm step
    ctl.observe_step(p, 4, 7.0)
    ctl.after(p)
    ctl.plan(6, 4, 0, ())
    assert pol.seen[6].step_kind == "warm" and pol.seen[6].step_shape is None
    assert pol.seen[6].accept_shape is None and ctl.machine.shape == CHAIN1


def test_lineup_goodput_entries_choose_among_the_grid() -> None:
    """lineup's specfsm goodput entries carry DEFAULT_SHAPE_GRID (shapes=() keeps on/off)."""
    fit = CostModel(load_table(FIT), CHAIN3)
    ctl = lineup(fit, CHAIN3, 0.7, names=["specfsm-zero-tax"])[0]
    assert isinstance(ctl, FSMController) and isinstance(ctl.policy, GoodputPolicy)
    assert set(ctl.policy.shapes) == set(DEFAULT_SHAPE_GRID)
    assert set(ctl.machine.shapes) == set(DEFAULT_SHAPE_GRID)
    old = lineup(fit, CHAIN3, 0.7, names=["specfsm-warm"], shapes=())[0]
    assert isinstance(old, FSMController) and old.machine.shapes == ()


def test_a_run_reshapes_to_the_table_best_and_calibrates() -> None:
    """A run scored on another table leaves chain3 and calibrates from measured steps."""
    fit = CostModel(load_table(FIT), CHAIN3)
    score = CostModel(load_table("h200_sglang0517_llama8b_triton"), CHAIN3)
    pol = GoodputPolicy(fit, accept_length(0.6, CHAIN3), shapes=DEFAULT_SHAPE_GRID)
    ctl = FSMController("specfsm", pol, CHAIN3)
    r = run(ctl, fixed_concurrency(4), score, 0.6, iterations=600)
    assert r.iterations == 600 and ctl.machine.shape != CHAIN3
    assert pol.calibration is not None and pol.calibration.samples > 500
    assert r.switches_per_100 <= 1.0
