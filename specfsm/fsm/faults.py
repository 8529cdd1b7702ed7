"""Policy faults: what the machine does when a policy misbehaves.

Policy faults never stop the engine: a policy whose `decide` raises, returns something that is
neither None nor an Event, returns a completion event, returns a load or shape event the table
does not accept in the current mode, or a RESHAPE whose shape the machine refuses is *faulted*:
one `specfsm.policy_failed` line (policy, iteration, error), `policy_faults` counted, FAULT to
the safe mode PLAIN, and `step` returns Event.FAULT (the reason, a `PolicyError`, is in
`last_policy_error`). After `max_policy_faults` faults of the same policy it is replaced by
`FixedPolicy(False)` (stay PLAIN), logged once as `specfsm.policy_replaced`; assigning
`fsm.policy` installs a policy and resets its fault count.
"""

from __future__ import annotations

from typing import Protocol

from specfsm.fsm.decision import FixedPolicy, Policy, policy_name
from specfsm.fsm.errors import PolicyError
from specfsm.fsm.log import TransitionLog
from specfsm.fsm.observation import Observation
from specfsm.fsm.table import POLICY_EVENTS, Event, Mode


class Faultable(Protocol):
    """What a policy fault reads and moves on the machine (`SpecFSM` is one): named here so
    that the machine imports this module and not the other way round."""

    _policy: Policy
    _strikes: int
    policy_faults: int
    max_policy_faults: int
    last_policy_error: PolicyError | None
    log: TransitionLog

    def process_event(
        self, event: Event, obs: Observation | None = None, reason: str = ""
    ) -> Mode: ...


def policy_fault_detail(mode: Mode, exc: BaseException | None, value: object) -> str:
    """Why a policy's decision in `mode` is a fault: it raised `exc`, or returned `value`."""
    if exc is not None:
        return f"raised {type(exc).__name__}: {exc}"
    if isinstance(value, Event):
        if value in POLICY_EVENTS:
            return f"emitted {value.name}, which the table does not accept in {mode.name}"
        return (
            f"emitted {value.name}; policies emit only load events (LOAD_HIGH, LOAD_LOW) and "
            "shape events (RESHAPE), completion events come from the engine"
        )
    return f"returned {type(value).__name__} {value!r:.80}, not an Event or None"


def fault_policy(
    fsm: Faultable,
    obs: Observation,
    mode: Mode,
    exc: Exception | None,
    value: object,
    detail: str | None = None,
) -> Event:
    """The policy raised (`exc`) or returned `value` (`detail`: why that is wrong, when the
    value alone does not say): log, count, FAULT to PLAIN."""
    policy = fsm._policy
    name = policy_name(policy)
    if detail is None:
        detail = policy_fault_detail(mode, exc, value)
    err = PolicyError(name, obs.iteration, mode, detail)
    if exc is not None:
        err.__cause__ = exc
    fsm.last_policy_error = err
    fsm.policy_faults += 1
    fsm._strikes += 1
    fsm.log.policy_failed(
        iteration=obs.iteration,
        policy=name,
        mode=mode,
        error=detail,
        faults=fsm._strikes,
        limit=fsm.max_policy_faults,
        exc=exc,
    )
    replace = fsm._strikes >= fsm.max_policy_faults
    reason = f"policy {name} failed: {detail}"
    if replace:
        fsm._policy = FixedPolicy(False)
        fsm._strikes = 0
        fsm.log.policy_replaced(
            iteration=obs.iteration,
            old=name,
            new=fsm._policy.describe(),
            faults=fsm.max_policy_faults,
        )
    fsm.process_event(Event.FAULT, obs, reason)
    return Event.FAULT
