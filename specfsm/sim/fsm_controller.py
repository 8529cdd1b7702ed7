"""specfsm's policies in the simulator: a Policy driven through the real `SpecFSM`, the
simulator playing the engine's completion events (see `FSMController`, and
`specfsm.sim.peers` for its two PLAIN variants)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from specfsm.fsm.decision import Policy
from specfsm.fsm.kinds import StepKind
from specfsm.fsm.log import TransitionLog
from specfsm.fsm.machine import SpecFSM
from specfsm.fsm.observation import Observation
from specfsm.fsm.table import Event, Mode
from specfsm.model.acceptance import DraftShape
from specfsm.model.costs import PLAIN_WARM, PLAIN_ZERO_TAX, check_plain_variant
from specfsm.sim.plan import NO_DRAFT, RESYNC, SPEC, WARM, ZERO_TAX, Controller, Plan


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
STEP_KINDS: dict[str, StepKind] = {
    SPEC: StepKind.SPEC,
    NO_DRAFT: StepKind.PLAIN,
    ZERO_TAX: StepKind.PLAIN,
    WARM: StepKind.WARM,
    RESYNC: StepKind.RESYNC,
}


class FSMController(Controller):
    """A specfsm Policy driven through the FSM; the simulator plays the engine.

    `plain`: "zero_tax" (the SGLang adapter's default) or "warm"; see the module docstring.
    `lazy_draft_prefill` only applies to "zero_tax".

    Shapes: the machine is built with `shapes` (default: the policy's ``shapes``
    attribute, empty for a policy without one) and `shape` as its current shape; a SPEC plan
    runs ``machine.shape``, which a RESHAPE changes. The observation of each iteration carries
    ``shape`` (the machine's), ``accept_shape`` (the shape of the last SPEC plan, whose verifies
    ``accept_lens`` are) and the previous iteration's measured step (``step_ms``, ``step_bs``,
    ``step_shape``, ``step_kind`` from `observe_step`: "spec", "plain" for a zero-tax or plain
    decode step, "warm", "resync").

    `prefill_observations`: before an iteration that prefills, the policy also gets the
    adapter's prefill observation (its prompt tokens, the batch it brings, the queue), for a
    policy that sees prefills (its prefill pressure and prefill debounce read them); a LOAD_HIGH
    there drains at once, as the adapter's does with no K-wide batch in flight. Off by default:
    without it a policy decides on the decode observations alone. Observations are numbered
    in the order the policy gets them.
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
        prefill_observations: bool = False,
    ) -> None:
        self.name = name
        self.wants_prefills = prefill_observations and bool(getattr(policy, "sees_prefills", False))
        self._extra = 0  # observations besides the engine's iterations (prefills)
        self._mean_ctx = 0  # the last decode observation's (a prefill observation's too)
        #: the lazily prefilled prompts not caught up yet (set by the engine each iteration)
        self.draft_debt = 0
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
        self._step_kind: str = StepKind.UNKNOWN

    def plan(
        self, it: int, bs: int, n_prefill: int, accept_lens: tuple[int, ...], mean_ctx: int = 0
    ) -> Plan:
        machine = self.machine
        self._mean_ctx = mean_ctx
        obs = Observation(
            iteration=it + self._extra,
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
            draft_debt=self.draft_debt,
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

    def observe_prefill(self, it: int, bs: int, n_new: int, tokens: int, queued: int) -> None:
        machine = self.machine
        obs = Observation(
            iteration=it + self._extra,
            decode_bs=bs + n_new,
            running=bs,
            queued=queued,
            mean_ctx=self._mean_ctx,
            shape=machine.shape,
            prefill_tokens=tokens,
            draft_debt=self.draft_debt,
        )
        self._extra += 1
        machine.step(obs)
        if machine.mode is Mode.DRAINING:
            machine.process_event(Event.DRAINED, None, "no K-wide batch in flight")

    def observe_step(self, plan: Plan, bs: int, ms: float) -> None:
        self._step_ms = ms if bs > 0 else 0.0
        self._step_bs = bs
        self._step_shape = plan.shape if plan.kind == SPEC else None
        self._step_kind = STEP_KINDS.get(plan.kind, StepKind.UNKNOWN)

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
            "prefill_observations": self.wants_prefills,
            **self.policy.describe(),
        }
