"""The controllers the simulator compares: specfsm's policies through the real SpecFSM, and the
peers (SGLang adaptive, vLLM's batch-size table, TensorRT-LLM's max concurrency, static ones).

`FixedController` (no-spec / always-spec); `FSMController` (a specfsm Policy driven through the
real `SpecFSM`, the simulator playing the engine's completion events), in one of two PLAIN
variants:

* ``plain="zero_tax"`` (the SGLang adapter's default, config ``plain: "zero_tax"``,
  adapters/specfsm_sglang/plain.py): DRAINING is one WARM forward (the adapter attaches the
  1-wide state on entry to DRAINING); PLAIN is a ZERO_TAX iteration (one target decode
  forward, priced by `CostModel.zero_tax_ms` from the measured rows; no draft work, the draft's
  lag grows); RESYNCING is one RESYNC iteration (a zero-tax step + the batched catch-up
  draft-extend over the lag, an estimate from the table's draft-extend rows). New requests are
  prefilled through the draft as the adapter does; with ``lazy_draft_prefill`` (not in the
  adapter) requests admitted while PLAIN are prefilled by the target only and their prompt
  joins the lag.
* ``plain="warm"`` (config ``plain: "warm"``, SGLang's steps=0 state): DRAINING, PLAIN and
  RESYNCING all run a WARM iteration (K=1 verify + 1-token draft-extend, `CostModel.warm_ms`);
  DRAINING lasts one forward then DRAINED; RESYNCING lasts one forward (`resync_forwards` = 1)
  then RESYNCED. New requests are prefilled through the draft too.

`SGLangAdaptiveController` (0.5.23 `adaptive_spec_params.py` ported: per-BS slots after CUDA
graph padding, EMA 0.2, warmup 10, interval 5, hysteresis, steps=0 probing, steps=0 pays a
K=1 verify + draft-extend every step; topk != 1 makes SGLang disable adaptive and run the
launch shape statically, `adaptive_unsupported_reason`), `BatchTableController` (vLLM DSD:
K by the number of scheduled requests incl. prefills, no hysteresis, K=0 keeps running the
draft at q=1), `MaxConcurrencyController` (TensorRT-LLM: spec iff active requests <=
max_concurrency, no hysteresis; off is a ZERO_TAX step, as `trtllm-schedule`'s in
`specfsm.sim.baselines`: an EAGLE draft caught up in one iteration needs the target's hidden
states of every token produced while off, and capturing them is what the zero-tax PLAIN step
costs; re-enable pays the same catch-up as RESYNCING). `lineup` builds them all with their best
static parameters from one cost table.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from specfsm.fsm.decision import Policy
from specfsm.fsm.log import TransitionLog
from specfsm.fsm.machine import SpecFSM
from specfsm.fsm.observation import Observation
from specfsm.fsm.table import Event, Mode
from specfsm.model.acceptance import (
    DEFAULT_SHAPE_GRID,
    DraftShape,
    accept_length,
)
from specfsm.model.costs import (
    PLAIN_WARM,
    PLAIN_ZERO_TAX,
    CostModel,
    check_plain_variant,
)
from specfsm.policy.goodput import GoodputPolicy
from specfsm.sim.tune import SGLANG_DEFAULT_ADAPTIVE, recommend, sglang_spec_cuda_graph_bs

# Iteration kinds (priced in `specfsm.sim.engine`): a speculative iteration, a plain decode
# (no draft: no-spec), specfsm's zero-tax PLAIN step (also TensorRT-LLM's off steps), a warm
# step (SGLang steps=0 / vLLM K=0 / specfsm's warm PLAIN), a zero-tax step + the catch-up.
SPEC, PLAIN, ZERO_TAX, WARM, RESYNC = "spec", "plain", "zero_tax", "warm", "resync"


# ------------------------------------------------------------------------------ controllers
@attrs.define
class Plan:
    kind: str
    mode: Mode  # the mode this iteration is accounted to (peers map their states onto modes)
    shape: DraftShape | None = None


class Controller:
    """Picks each iteration's kind. Subclasses override `plan` and optionally `feed`."""

    name = "controller"
    has_draft = True
    #: PLAIN iterations prefill new requests through the target only (prompt joins the lag).
    lazy_draft_prefill = False

    def plan(
        self, it: int, bs: int, n_prefill: int, accept_lens: tuple[int, ...], mean_ctx: int = 0
    ) -> Plan:
        raise NotImplementedError

    def after(self, plan: Plan) -> None:
        """Called after the iteration ran (the engine's completion events)."""

    def feed(self, shape: DraftShape, accept_lens_mean: float, bs: int) -> None:
        """Verify results of a SPEC iteration (mean accept length incl. bonus)."""

    def observe_step(self, plan: Plan, bs: int, ms: float) -> None:
        """The iteration of `plan` ran at decode batch size bs and its decode took `ms` (the
        engine's measured step time; called after each iteration, before `after`)."""

    def describe(self) -> dict[str, object]:
        return {"name": self.name}


class FixedController(Controller):
    """Static baselines: no-spec (a server without a draft) or always-spec."""

    def __init__(self, speculate: bool, shape: DraftShape) -> None:
        self.speculate = speculate
        self.shape = shape
        self.name = "always-spec" if speculate else "no-spec"
        self.has_draft = speculate

    def plan(
        self, it: int, bs: int, n_prefill: int, accept_lens: tuple[int, ...], mean_ctx: int = 0
    ) -> Plan:
        if self.speculate:
            return Plan(SPEC, Mode.SPECULATING, self.shape)
        return Plan(PLAIN, Mode.PLAIN)


class _NullLogger:
    """A structlog-like logger that drops every line: the simulator's machines log nothing."""

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *a, **k: None


def make_machine(
    policy: Policy, shapes: Sequence[DraftShape] = (), shape: DraftShape | None = None
) -> SpecFSM:
    """The real SpecFSM for `policy` (allowed `shapes`, current `shape`), with a silent
    transition log (the simulator's engine)."""
    return SpecFSM(policy, log=TransitionLog(logger=_NullLogger()), shapes=shapes, shape=shape)


#: Observation.step_kind of each iteration kind (what a policy's calibration reads).
STEP_KINDS = {SPEC: "spec", PLAIN: "plain", ZERO_TAX: "plain", WARM: "warm", RESYNC: "resync"}


class FSMController(Controller):
    """A specfsm Policy driven through the FSM; the simulator plays the engine.

    `plain`: "zero_tax" (the SGLang adapter's default) or "warm"; see the module docstring.
    `lazy_draft_prefill` only applies to "zero_tax".

    Shapes (issue 13): the machine is built with `shapes` (default: the policy's ``shapes``
    attribute, empty for a policy without one) and `shape` as its current shape; a SPEC plan
    runs ``machine.shape``, which a RESHAPE changes. The observation of each iteration carries
    ``shape`` (the machine's), ``accept_shape`` (the shape of the last SPEC plan, whose verifies
    ``accept_lens`` are) and the previous iteration's measured step (``step_ms``, ``step_bs``,
    ``step_shape``, ``step_kind`` from `observe_step`: "spec", "plain" for a zero-tax or plain
    decode step, "warm", "resync").
    """

    def __init__(
        self,
        name: str,
        policy: Policy,
        shape: DraftShape,
        *,
        plain: str = PLAIN_ZERO_TAX,
        lazy_draft_prefill: bool = False,
        shapes: Sequence[DraftShape] | None = None,
    ) -> None:
        self.name = name
        self.policy = policy
        self.shape = shape
        self.plain = check_plain_variant(plain)
        if lazy_draft_prefill and self.plain == PLAIN_WARM:
            raise ValueError("lazy_draft_prefill needs plain='zero_tax' (a warm draft needs KV)")
        self.lazy_draft_prefill = lazy_draft_prefill
        if shapes is None:
            shapes = tuple(getattr(policy, "shapes", ()) or ())
        self.shapes: tuple[DraftShape, ...] = tuple(shapes)
        if self.shapes and shape not in self.shapes:
            self.shapes = (shape, *self.shapes)
        self.machine = make_machine(policy, self.shapes, shape)
        self.machine_name = "specfsm.fsm.machine.SpecFSM"
        warm = self.plain == PLAIN_WARM
        self._plain_plan = Plan(WARM if warm else ZERO_TAX, Mode.PLAIN)
        self._resync_plan = Plan(WARM if warm else RESYNC, Mode.RESYNCING)
        self._spec_plans: dict[DraftShape, Plan] = {}
        self._accept_shape: DraftShape | None = None  # the shape of the last SPEC plan
        self._step_ms = 0.0
        self._step_bs = 0
        self._step_shape: DraftShape | None = None
        self._step_kind = ""

    def plan(
        self, it: int, bs: int, n_prefill: int, accept_lens: tuple[int, ...], mean_ctx: int = 0
    ) -> Plan:
        machine = self.machine
        obs = Observation(
            iteration=it,
            decode_bs=bs,
            running=bs + n_prefill,
            accept_lens=accept_lens,
            mean_ctx=mean_ctx,
            accept_shape=self._accept_shape if accept_lens else None,
            step_ms=self._step_ms,
            step_bs=self._step_bs,
            step_shape=self._step_shape,
            step_kind=self._step_kind,
            shape=machine.shape,
        )
        machine.step(obs)
        mode: Mode = machine.mode
        if mode is Mode.SPECULATING:
            shape = machine.shape or self.shape
            p = self._spec_plans.get(shape)
            if p is None:
                p = self._spec_plans[shape] = Plan(SPEC, Mode.SPECULATING, shape)
            self._accept_shape = shape
            return p
        if mode is Mode.DRAINING:
            # the adapter attaches the 1-wide state on entry to DRAINING: this forward is warm
            return Plan(WARM, Mode.DRAINING)
        if mode is Mode.RESYNCING:
            return self._resync_plan
        return self._plain_plan

    def observe_step(self, plan: Plan, bs: int, ms: float) -> None:
        self._step_ms = ms if bs > 0 else 0.0
        self._step_bs = bs
        self._step_shape = plan.shape if plan.kind == SPEC else None
        self._step_kind = STEP_KINDS.get(plan.kind, "")

    def after(self, plan: Plan) -> None:
        if plan.mode is Mode.DRAINING:
            self.machine.process_event(Event.DRAINED, None, "in-flight batch done")
        elif plan.mode is Mode.RESYNCING:
            self.machine.process_event(Event.RESYNCED, None, "draft caught up")

    def describe(self) -> dict[str, object]:
        return {
            "name": self.name,
            "machine": self.machine_name,
            "shapes": [x.label() for x in self.shapes],
            "plain": self.plain,
            "lazy_draft_prefill": self.lazy_draft_prefill,
            **self.policy.describe(),
        }


class _SGLangSlot:
    """Port of AdaptiveStepSlot (0.5.23), logging removed."""

    def __init__(self, initial_steps: int, cfg: dict[str, Any]) -> None:
        self.candidate_steps: list[int] = sorted(set(cfg["candidate_steps"]))
        self.ema_alpha = float(cfg.get("ema_alpha", 0.2))
        self.update_interval = int(cfg.get("update_interval", 5))
        self.warmup_batches = int(cfg.get("warmup_batches", 10))
        self.down_hysteresis = float(cfg.get("down_hysteresis", -0.25))
        self.up_hysteresis = float(cfg.get("up_hysteresis", 0.0))
        self.ceiling_coeff = float(cfg.get("ceiling_coeff", 0))
        if initial_steps in self.candidate_steps:
            self.current_steps = initial_steps
        else:
            self.current_steps = self.candidate_steps[len(self.candidate_steps) // 2]
        self.ema_accept_len = float(self.current_steps - 1)
        self._batch_count = 0

    def update(self, mean_correct_drafts: float) -> bool:
        if self.current_steps > 0:
            self.ema_accept_len = (
                1 - self.ema_alpha
            ) * self.ema_accept_len + self.ema_alpha * mean_correct_drafts
        self._batch_count += 1
        if self._batch_count <= self.warmup_batches:
            return False
        if (self._batch_count - self.warmup_batches) % self.update_interval != 0:
            return False
        return self._recompute()

    def _recompute(self) -> bool:
        old = self.current_steps
        idx = self.candidate_steps.index(old)
        old_idx = idx
        if old == 0:
            idx = min(idx + 1, len(self.candidate_steps) - 1)
            target = self.candidate_steps[idx]
            if target > 0 and self.ema_accept_len < 0:
                self.ema_accept_len = float(target - 1)
            self.current_steps = target
            return target != old
        while idx > 0:
            prev = self.candidate_steps[idx - 1]
            drop = (0.5 if prev == 0 else prev - 0.5) + self.down_hysteresis
            if self.ema_accept_len <= drop:
                idx -= 1
            else:
                break
        if not idx < old_idx:
            while idx < len(self.candidate_steps) - 1:
                rise = self.candidate_steps[idx] - 0.5 + self.up_hysteresis
                if self.ema_accept_len > rise:
                    idx += 1
                else:
                    break
        target = self.candidate_steps[idx]
        if self.ceiling_coeff > 0:
            ceiling = max(1, math.ceil(self.ema_accept_len * self.ceiling_coeff))
            if ceiling < target <= old:
                while idx > 0 and self.candidate_steps[idx] > ceiling:
                    idx -= 1
                target = self.candidate_steps[idx]
        self.current_steps = target
        return target != old


class SGLangAdaptiveController(Controller):
    """SGLang 0.5.23 `--speculative-adaptive` (topk=1 chains; steps=0 keeps the draft warm).

    `shape` is the server's launch shape. A chain (topk=1) must have its steps among the
    config's candidate steps (SGLang raises otherwise) and is the initial steps. topk != 1:
    SGLang's `adaptive_unsupported_reason` rejects it and `_maybe_disable_adaptive` falls back
    to static parameters with a warning, so the controller speculates with `shape` always.
    """

    def __init__(
        self,
        config: dict[str, dict[str, Any]] | None = None,
        initial_steps: int | None = None,
        max_bs: int = 256,
        name: str = "sglang-adaptive",
        shape: DraftShape | None = None,
    ) -> None:
        cfg = config if config is not None else SGLANG_DEFAULT_ADAPTIVE
        self.name = name
        self.config = cfg
        self.launch_shape = shape
        self.disabled_reason: str | None = None
        if shape is not None and shape.topk != 1:
            self.disabled_reason = (
                f"speculative_eagle_topk={shape.topk} (only topk=1 is supported): "
                "static speculative params"
            )
        # per-bs slots are the digit keys; the others (ema_alpha, ...) are shared settings
        union = sorted({s for k, e in cfg.items() if k.isdigit() for s in e["candidate_steps"]})
        if shape is not None and shape.topk == 1 and initial_steps is None:
            if shape.steps not in union:
                raise ValueError(
                    f"--speculative-num-steps={shape.steps} is not in the adaptive config "
                    f"candidate_steps {union}"
                )
            initial_steps = shape.steps
        init = initial_steps if initial_steps is not None else union[len(union) // 2]
        top = {k: v for k, v in cfg.items() if not k.isdigit()}
        self._bs_list = sorted(int(k) for k in cfg if k.isdigit())
        self._slots = {
            int(k): _SGLangSlot(init, {**top, **v}) for k, v in cfg.items() if k.isdigit()
        }
        self._graph_bs = sglang_spec_cuda_graph_bs(max_bs)
        self._shapes = {s: DraftShape.chain(s) for s in union if s > 0}

    def _route(self, bs: int) -> _SGLangSlot:
        import bisect

        i = bisect.bisect_left(self._graph_bs, bs)
        padded = self._graph_bs[i] if i < len(self._graph_bs) else bs
        j = bisect.bisect_right(self._bs_list, padded) - 1
        return self._slots[self._bs_list[max(0, j)]]

    def plan(
        self, it: int, bs: int, n_prefill: int, accept_lens: tuple[int, ...], mean_ctx: int = 0
    ) -> Plan:
        if self.disabled_reason is not None:
            return Plan(SPEC, Mode.SPECULATING, self.launch_shape)
        steps = self._route(max(1, bs)).current_steps
        if steps > 0:
            return Plan(SPEC, Mode.SPECULATING, self._shapes[steps])
        return Plan(WARM, Mode.PLAIN)

    def feed(self, shape: DraftShape, accept_lens_mean: float, bs: int) -> None:
        if self.disabled_reason is None:
            self._route(bs).update(accept_lens_mean - 1.0)

    def feed_steps0(self, bs: int) -> None:
        """steps=0 iterations also report (zero correct drafts) and advance the slot's counter."""
        self._route(bs).update(0.0)

    def describe(self) -> dict[str, object]:
        if self.disabled_reason is not None:
            return {"name": self.name, "adaptive": f"disabled: {self.disabled_reason}"}
        return {"name": self.name, "config": self.config}


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
      the adapter's default (lazy draft prefill, which the adapter does not do, only with
      `zero_tax_lazy_prefill`).
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
