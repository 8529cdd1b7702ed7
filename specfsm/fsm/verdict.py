"""A decision as data: what the policy chose, by which rule, on which numbers.

A policy's `decide` may return a `Verdict` instead of a bare Event: the machine applies its
event (and, for RESHAPE, its shape), the transition record carries it, and the transition log
line writes it as its ``decision`` object (`Verdict.as_json`, described in docs/policies.md).
Verdicts are built only when a transition is due, so the no-transition path allocates nothing.
Every policy specfsm ships returns one: the cost-model policy with its predictions, a rule on
an observed signal (a threshold, a schedule) with the `signal`, the `observed` value and the
`threshold` it was compared with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from specfsm.fsm.table import Event

if TYPE_CHECKING:
    from specfsm.fsm.observation import Observation
    from specfsm.model.acceptance import DraftShape

#: the accept lengths a verdict's predictions rest on
POINT = "point"  # the learned estimate
UPPER = "upper"  # each depth raised by `probe_z` standard errors (a probe is judged so)
PRIOR = "prior"  # the prior's accept lengths (what a re-probe could find)
OPTIMISTIC = "optimistic"  # never-measured options priced below the smallest measured factor
OBSERVED = "observed"  # no prediction: the observed signal itself against a threshold
NONE = "none"  # no numbers: a fixed answer


def _round(x: float) -> float:
    return round(x, 1)


@attrs.frozen(slots=True)
class Verdict:
    """One decision: `event` (and `shape` for RESHAPE), the `rule` that gave it, the human
    `reason`, and the numbers it rested on: `bound` (which accept lengths / prices: POINT,
    UPPER, PRIOR, OPTIMISTIC; a rule without predictions: OBSERVED or NONE), the relative
    `margin` the winner had to beat, the predicted output tokens/s of each option
    (`predicted`: "plain" and shape labels), the chosen and the current option, and the batch
    size and context the prediction was made at. A rule on an observed signal names it
    (`signal`, e.g. "decode_bs") with the `observed` value and the `threshold` it was compared
    with (its `margin`: how far past the threshold the value was).
    Frozen and hashable: two verdicts are equal when every field is."""

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
    signal: str | None = None
    observed: float | None = None
    threshold: float | None = None

    def as_json(self) -> dict[str, object]:
        """The ``decision`` object of the transition log line (``signal``, ``observed`` and
        ``threshold`` only when the verdict names a signal)."""
        out: dict[str, object] = {
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
        if self.signal is not None:
            out["signal"] = self.signal
            out["observed"] = self.observed
            out["threshold"] = self.threshold
        return out


def rule_verdict(
    event: Event,
    rule: str,
    reason: str,
    obs: Observation,
    *,
    shape: DraftShape | None = None,
    signal: str | None = None,
    observed: float | None = None,
    threshold: float | None = None,
    margin: float = 0.0,
) -> Verdict:
    """The verdict of a rule without predictions (a threshold, a schedule, a fixed answer), at
    the observation it decided on. `chosen` is "plain" for LOAD_HIGH, the new shape of a
    RESHAPE, else the shape the machine resumes at (`obs.shape`; "speculating" when the
    observation names none); `current` is `obs.shape`'s label (None when not named); `bound`
    is OBSERVED when a `signal` was compared, else NONE."""
    cur = obs.shape.label() if obs.shape is not None else None
    if event is Event.LOAD_HIGH:
        chosen: str | None = "plain"
    elif shape is not None:
        chosen = shape.label()
    else:
        chosen = cur if cur is not None else "speculating"
    return Verdict(
        event,
        rule,
        reason,
        shape=shape,
        bound=OBSERVED if signal is not None else NONE,
        margin=float(margin),
        chosen=chosen,
        current=cur,
        bs=obs.decode_bs,
        ctx=obs.mean_ctx,
        signal=signal,
        observed=observed,
        threshold=threshold,
    )


def event_of(decision: Event | Verdict | None) -> Event | None:
    """The event of what a policy's `decide` returned (a Verdict's, a bare Event, or None)."""
    return decision.event if isinstance(decision, Verdict) else decision
