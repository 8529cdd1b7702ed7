"""What the machine asks once per iteration: the decision protocol (`Policy`).

The FSM core defines the protocol it calls and the one decision it needs itself,
`FixedPolicy` (its default, and the stay-PLAIN replacement for a policy that keeps faulting);
`specfsm.policy` implements the real ones. A policy never writes a transition: it names the
mode it wants (`TOWARD` in the table turns that into the load event the table accepts).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from specfsm.fsm.observation import Observation
from specfsm.fsm.table import TOWARD, Event, Mode
from specfsm.fsm.verdict import Verdict, rule_verdict


@runtime_checkable
class Policy(Protocol):
    """What the machine asks once per iteration."""

    #: A short human-readable reason for the last non-None decision (read only on transitions).
    last_reason: str

    def decide(self, mode: Mode, obs: Observation) -> Event | Verdict | None:
        """An event legal in `mode` (a Verdict: with its rule and numbers), or None (the common
        case)."""
        ...

    def describe(self) -> dict[str, object]:
        """The policy's name and parameters, for the `specfsm.config` log line."""
        ...


class FixedPolicy:
    """Always (speculate=True) or never (False) speculate: the static baselines."""

    def __init__(self, speculate: bool) -> None:
        self.speculate = bool(speculate)
        self._target = Mode.SPECULATING if self.speculate else Mode.PLAIN
        self._rule = "fixed.always" if self.speculate else "fixed.never"
        self._reason = "fixed: always speculate" if self.speculate else "fixed: never"
        self.last_reason = ""

    def decide(self, mode: Mode, obs: Observation) -> Verdict | None:
        ev = TOWARD[(mode, self._target)]
        if ev is None:
            return None
        self.last_reason = self._reason
        return rule_verdict(ev, self._rule, self._reason, obs)

    def describe(self) -> dict[str, object]:
        return {"policy": "fixed", "speculate": self.speculate}


def policy_name(policy: object) -> str:
    """A policy's name for log lines: describe()["policy"] when that works, else its class."""
    try:
        desc = policy.describe()  # type: ignore[attr-defined]
        name = desc.get("policy") if isinstance(desc, dict) else None
        if isinstance(name, str) and name:
            return name
    except Exception:  # a policy whose describe() fails still needs a name in the fault line
        pass
    return type(policy).__name__
