"""A decision as data: what the policy chose, by which rule, on which numbers.

A policy's `decide` may return a `Verdict` instead of a bare Event: the machine applies its
event (and, for RESHAPE, its shape), the transition record carries it, and the transition log
line writes it as its ``decision`` object (`Verdict.as_json`, described in docs/policies.md).
Verdicts are built only when a transition is due, so the no-transition path allocates nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from specfsm.fsm.table import Event

if TYPE_CHECKING:
    from specfsm.model.acceptance import DraftShape

#: the accept lengths a verdict's predictions rest on
POINT = "point"  # the learned estimate
UPPER = "upper"  # each depth raised by `probe_z` standard errors (a probe is judged so)
PRIOR = "prior"  # the prior's accept lengths (what a re-probe could find)
OPTIMISTIC = "optimistic"  # never-measured options priced below the smallest measured factor


def _round(x: float) -> float:
    return round(x, 1)


@attrs.frozen(slots=True)
class Verdict:
    """One decision: `event` (and `shape` for RESHAPE), the `rule` that gave it, the human
    `reason`, and the numbers it rested on: `bound` (which accept lengths / prices: POINT,
    UPPER, PRIOR, OPTIMISTIC), the relative `margin` the winner had to beat, the predicted
    output tokens/s of each option (`predicted`: "plain" and shape labels), the chosen and the
    current option, and the batch size and context the prediction was made at. Frozen and
    hashable: two verdicts are equal when every field is."""

    event: Event
    rule: str
    reason: str = ""
    shape: DraftShape | None = None
    bound: str = POINT
    margin: float = 0.0
    predicted: tuple[tuple[str, float], ...] = ()
    chosen: str | None = None
    current: str | None = None
    bs: int = 0
    ctx: int = 0

    def as_json(self) -> dict[str, object]:
        """The ``decision`` object of the transition log line."""
        return {
            "rule": self.rule,
            "event": self.event.name,
            "shape": self.shape.label() if self.shape is not None else None,
            "chosen": self.chosen,
            "current": self.current,
            "bound": self.bound,
            "margin": self.margin,
            "bs": self.bs,
            "ctx": self.ctx,
            "predicted_tok_s": {k: _round(v) for k, v in self.predicted},
        }


def event_of(decision: Event | Verdict | None) -> Event | None:
    """The event of what a policy's `decide` returned (a Verdict's, a bare Event, or None)."""
    return decision.event if isinstance(decision, Verdict) else decision
