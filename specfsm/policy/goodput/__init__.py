"""The goodput policy: speculate, and at which draft shape, when the cost model predicts more
accepted tokens per second (see `specfsm.policy.goodput.policy` and docs/policies.md)."""

from specfsm.fsm.kinds import StepKind
from specfsm.policy.goodput.args import goodput_from_args
from specfsm.policy.goodput.estimator import Estimate, Estimator
from specfsm.policy.goodput.ledger import Ledger
from specfsm.policy.goodput.params import GoodputParams
from specfsm.policy.goodput.policy import GoodputPolicy
from specfsm.policy.goodput.rules import RULE_NAMES

#: Observation.step_kind values the calibration learns from (names kept for callers)
STEP_SPEC: str = StepKind.SPEC
STEP_PLAIN: str = StepKind.PLAIN
STEP_WARM: str = StepKind.WARM

__all__ = [
    "RULE_NAMES",
    "STEP_PLAIN",
    "STEP_SPEC",
    "STEP_WARM",
    "Estimate",
    "Estimator",
    "GoodputParams",
    "GoodputPolicy",
    "Ledger",
    "goodput_from_args",
]
