"""The controllers the simulator compares: specfsm's policies through the real SpecFSM, and the
peers (SGLang adaptive, vLLM's batch-size table, TensorRT-LLM's max concurrency, static ones).

`FixedController` (no-spec / always-spec, `specfsm.sim.plan`); `FSMController` (a specfsm
Policy driven through the real `SpecFSM`, the simulator playing the engine's completion events,
`specfsm.sim.fsm_controller`), in one of two PLAIN variants:

* ``plain="zero_tax"`` (the SGLang adapter's default, config ``plain: "zero_tax"``,
  adapters/specfsm_sglang/plain.py): DRAINING is one WARM forward (the adapter attaches the
  1-wide state on entry to DRAINING); PLAIN is a ZERO_TAX iteration (one target decode
  forward, priced by `CostModel.zero_tax_ms` from the measured rows; no draft work, the draft's
  lag grows); RESYNCING is one RESYNC iteration (a zero-tax step + the batched catch-up
  draft-extend over the lag, an estimate from the table's draft-extend rows). New requests are
  prefilled through the draft; with ``lazy_draft_prefill`` (the adapter's default,
  ``defer_prefill_tokens``) requests admitted while PLAIN are prefilled by the target only and
  their prompt joins the lag.
* ``plain="warm"`` (config ``plain: "warm"``, SGLang's steps=0 state): DRAINING, PLAIN and
  RESYNCING all run a WARM iteration (K=1 verify + 1-token draft-extend, `CostModel.warm_ms`);
  DRAINING lasts one forward then DRAINED; RESYNCING lasts one forward (`resync_forwards` = 1)
  then RESYNCED. New requests are prefilled through the draft too.

`SGLangAdaptiveController` (0.5.23's adaptive steps ported, `specfsm.sim.sglang_peer`),
`BatchTableController` (vLLM DSD:
K by the number of scheduled requests incl. prefills, no hysteresis, K=0 keeps running the
draft at q=1), `MaxConcurrencyController` (TensorRT-LLM: spec iff active requests <=
max_concurrency, no hysteresis; off is a ZERO_TAX step, as `trtllm-schedule`'s in
`specfsm.sim.baselines`: an EAGLE draft caught up in one iteration needs the target's hidden
states of every token produced while off, and capturing them is what the zero-tax PLAIN step
costs; re-enable pays the same catch-up as RESYNCING). `lineup` builds them all with their best
static parameters from one cost table.
"""

from __future__ import annotations

from collections.abc import Sequence

from specfsm.fsm.table import Mode
from specfsm.model.acceptance import DEFAULT_SHAPE_GRID, DraftShape, accept_length
from specfsm.model.costs import PLAIN_WARM, PLAIN_ZERO_TAX, CostModel, check_plain_variant
from specfsm.policy.goodput import GoodputPolicy
from specfsm.sim.fsm_controller import STEP_KINDS, FSMController, make_machine
from specfsm.sim.plan import (
    NO_DRAFT,
    RESYNC,
    SKIP0,
    SPEC,
    WARM,
    ZERO_TAX,
    Controller,
    FixedController,
    Plan,
    PlanKind,
)
from specfsm.sim.sglang_peer import SGLangAdaptiveController
from specfsm.sim.tune import recommend

#: the names callers import from here (the controllers' modules are below it)
__all__ = [
    "NO_DRAFT",
    "POLICY_NAMES",
    "RESYNC",
    "SKIP0",
    "SPEC",
    "STEP_KINDS",
    "WARM",
    "ZERO_TAX",
    "BatchTableController",
    "Controller",
    "FSMController",
    "FixedController",
    "MaxConcurrencyController",
    "Plan",
    "PlanKind",
    "SGLangAdaptiveController",
    "lineup",
    "make_machine",
]


class BatchTableController(Controller):
    """vLLM-style dynamic SD: spec iff scheduled requests (incl. prefills) <= cutoff; no
    hysteresis; K=0 still runs the draft at q=1 (the measured K=0 `propose()` cost)."""

    def __init__(self, cutoff: int, shape: DraftShape, name: str = "vllm-bs-table") -> None:
        self.cutoff = cutoff
        self.shape = shape
        self.name = name

    def plan(
        self, it: int, bs: int, n_prefill: int, accept_lens: tuple[int, ...], mean_ctx: int = 0
    ) -> Plan:
        if bs + n_prefill <= self.cutoff:
            return Plan(SPEC, Mode.SPECULATING, self.shape)
        return Plan(WARM, Mode.PLAIN)

    def describe(self) -> dict[str, object]:
        return {"name": self.name, "cutoff": self.cutoff}


class MaxConcurrencyController(Controller):
    """TensorRT-LLM max_concurrency: spec iff active requests <= max_concurrency, no
    hysteresis; off is a ZERO_TAX step (`CostModel.zero_tax_ms`: the one-iteration catch-up of
    an EAGLE draft needs the hidden states of every token produced while off, which that step
    captures; a true plain decode would be cheaper than anything an EAGLE server can run, see
    `specfsm.sim.baselines`); turning on pays a catch-up (RESYNC) iteration, priced as
    specfsm's zero-tax RESYNCING."""

    def __init__(
        self, max_concurrency: int, shape: DraftShape, name: str = "trtllm-max-conc"
    ) -> None:
        self.max_concurrency = max_concurrency
        self.shape = shape
        self.name = name
        self._on = True

    def plan(
        self, it: int, bs: int, n_prefill: int, accept_lens: tuple[int, ...], mean_ctx: int = 0
    ) -> Plan:
        want = bs + n_prefill <= self.max_concurrency
        if want and not self._on:
            self._on = True
            return Plan(RESYNC, Mode.RESYNCING)
        self._on = want
        if want:
            return Plan(SPEC, Mode.SPECULATING, self.shape)
        return Plan(ZERO_TAX, Mode.PLAIN)

    def describe(self) -> dict[str, object]:
        return {"name": self.name, "max_concurrency": self.max_concurrency}


# ------------------------------------------------------------------------------ line-up
def lineup(
    fit: CostModel,
    shape: DraftShape,
    alpha: float,
    *,
    names: Sequence[str] | None = None,
    zero_tax_lazy_prefill: bool = False,
    plain: str | None = None,
    shapes: Sequence[DraftShape] | None = None,
) -> list[Controller]:
    """Every policy, each with its best static parameters from the FIT cost model.

    * sglang-adaptive: SGLang 0.5.23's default adaptive config and EMA settings, launched with
      the scenario's shape (a chain's steps are the initial steps); a tree (topk != 1) makes
      SGLang disable adaptive, so it runs the tree statically (= always-spec).
    * vllm-bs-table: cut-off at the fit table's crossover against a WARM off step (its K=0
      still runs the draft at q=1), no hysteresis.
    * trtllm-max-conc: cut-off at the crossover against a zero-tax off step (off is a zero-tax
      step, the draft kept catchable), no hysteresis, catch-up on re-enable.
    * specfsm-threshold-zero-tax: ThresholdPolicy from the zero-tax crossover, zero-tax PLAIN
      (what `specfsm tune` recommends for the adapter's default PLAIN).
    * specfsm-threshold-warm: ThresholdPolicy from the warm crossover, warm PLAIN.
    * specfsm-zero-tax: GoodputPolicy(plain="zero_tax") through the FSM with zero-tax PLAIN,
      the adapter's default (its deferred draft prefill only with `zero_tax_lazy_prefill`,
      which benchmarks/policy_sweep.py sets by default).
    * specfsm-warm: GoodputPolicy(plain="warm") through the FSM with warm PLAIN.

    Both GoodputPolicy entries choose the shape among PLAIN and `shapes` (default
    `DEFAULT_SHAPE_GRID`, launched at `shape`; an empty sequence: on/off of `shape` only),
    with the accept length prior of `shape` at `alpha`, and calibrate their costs online.

    Which are returned: `names` when given (any of `POLICY_NAMES`); else, with `plain`, the
    static and peer controllers and specfsm's two in that PLAIN implementation; else (the
    historical line-up) every one but specfsm-threshold-zero-tax.
    """
    acc = accept_length(alpha, shape)
    fit_s = fit.with_shape(shape)
    grid = tuple(DEFAULT_SHAPE_GRID if shapes is None else shapes)
    rec_w = recommend(fit_s, acc, plain=PLAIN_WARM)
    rec_z = recommend(fit_s, acc, plain=PLAIN_ZERO_TAX)
    variant = check_plain_variant(plain) if plain is not None else None
    all_: list[Controller] = [
        FixedController(False, shape),
        FixedController(True, shape),
        SGLangAdaptiveController(shape=shape),
        BatchTableController(rec_w.threshold_high, shape),
        MaxConcurrencyController(rec_z.threshold_high, shape),
        FSMController(
            THRESHOLD_ZERO_TAX_NAME,
            rec_z.threshold_policy(),
            shape,
            plain=PLAIN_ZERO_TAX,
            lazy_draft_prefill=zero_tax_lazy_prefill,
        ),
        FSMController(
            THRESHOLD_WARM_NAME,
            rec_w.threshold_policy(),
            shape,
            plain=PLAIN_WARM,
        ),
        FSMController(
            WARM_NAME,
            GoodputPolicy(fit_s, acc, plain=PLAIN_WARM, shapes=grid),
            shape,
            plain=PLAIN_WARM,
        ),
        FSMController(
            ZERO_TAX_NAME,
            GoodputPolicy(fit_s, acc, plain=PLAIN_ZERO_TAX, shapes=grid),
            shape,
            plain=PLAIN_ZERO_TAX,
            lazy_draft_prefill=zero_tax_lazy_prefill,
        ),
    ]
    if names:
        return [c for c in all_ if c.name in names]
    if variant is not None:
        drop = SPECFSM_NAMES_BY_PLAIN[PLAIN_WARM if variant == PLAIN_ZERO_TAX else PLAIN_ZERO_TAX]
        return [c for c in all_ if c.name not in drop]
    return [c for c in all_ if c.name != THRESHOLD_ZERO_TAX_NAME]


#: specfsm's GoodputPolicy in each PLAIN implementation of the SGLang adapter: zero-tax (its
#: default) and warm (SGLang's steps=0); and its ThresholdPolicy in each.
WARM_NAME = "specfsm-warm"
ZERO_TAX_NAME = "specfsm-zero-tax"
THRESHOLD_WARM_NAME = "specfsm-threshold-warm"
THRESHOLD_ZERO_TAX_NAME = "specfsm-threshold-zero-tax"
SPECFSM_NAMES = (THRESHOLD_WARM_NAME, WARM_NAME, ZERO_TAX_NAME, THRESHOLD_ZERO_TAX_NAME)
SPECFSM_NAMES_BY_PLAIN: dict[str, tuple[str, str]] = {
    PLAIN_ZERO_TAX: (THRESHOLD_ZERO_TAX_NAME, ZERO_TAX_NAME),
    PLAIN_WARM: (THRESHOLD_WARM_NAME, WARM_NAME),
}
STATIC_NAMES = ("no-spec", "always-spec")
PEER_NAMES = ("sglang-adaptive", "vllm-bs-table", "trtllm-max-conc")


POLICY_NAMES = (*STATIC_NAMES, *PEER_NAMES, *SPECFSM_NAMES)
