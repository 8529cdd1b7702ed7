"""What a simulated iteration runs (`PlanKind`, `Plan`) and who picks it (`Controller`), with
the static baselines (`FixedController`: no-spec, a server without a draft; always-spec).

Iteration kinds (priced in `specfsm.sim.engine`): a speculative iteration; a plain decode of a
server WITHOUT a draft (``NO_DRAFT``); specfsm's zero-tax PLAIN step (also TensorRT-LLM's off
steps); a warm step (SGLang steps=0 / vLLM K=0 / specfsm's warm PLAIN); a zero-tax step + the
catch-up; SGLang's steps=0 with the skip flag (a plain decode step whose draft falls behind).
"""

from __future__ import annotations

import attrs

from specfsm.fsm.kinds import TextEnum
from specfsm.fsm.table import Mode
from specfsm.model.acceptance import DraftShape


class PlanKind(TextEnum):
    """What one simulated iteration runs (see the module docstring)."""

    SPEC = "spec"
    NO_DRAFT = "no_draft"
    ZERO_TAX = "zero_tax"
    WARM = "warm"
    RESYNC = "resync"
    SKIP0 = "skip0"


SPEC, NO_DRAFT, ZERO_TAX, WARM, RESYNC, SKIP0 = (
    PlanKind.SPEC,
    PlanKind.NO_DRAFT,
    PlanKind.ZERO_TAX,
    PlanKind.WARM,
    PlanKind.RESYNC,
    PlanKind.SKIP0,
)


@attrs.define
class Plan:
    kind: PlanKind
    mode: Mode  # the mode this iteration is accounted to (peers map their states onto modes)
    shape: DraftShape | None = None


class Controller:
    """Picks each iteration's kind. Subclasses override `plan` and optionally `feed`."""

    name = "controller"
    has_draft = True
    #: PLAIN iterations prefill new requests through the target only (prompt joins the lag).
    lazy_draft_prefill = False
    #: the engine calls `observe_prefill` before an iteration that prefills
    wants_prefills = False

    def plan(
        self, it: int, bs: int, n_prefill: int, accept_lens: tuple[int, ...], mean_ctx: int = 0
    ) -> Plan:
        raise NotImplementedError

    def after(self, plan: Plan) -> None:
        """Called after the iteration ran (the engine's completion events)."""

    def observe_prefill(self, it: int, bs: int, n_new: int, tokens: int, queued: int) -> None:
        """Iteration `it` prefills `n_new` requests of `tokens` prompt tokens beside `bs`
        decoding ones, `queued` more waiting (called before `plan`, when `wants_prefills`)."""

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
        return Plan(NO_DRAFT, Mode.PLAIN)
