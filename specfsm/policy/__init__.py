"""Policies: what decides, once per iteration, whether the engine should speculate.

`base.Hysteresis` (debounce and dwell, shared by every load-driven policy), `simple`
(threshold, fixed, scripted), `goodput` (the cost-model policy), `plugins` (policies from other
packages) and `registry` (the one place a policy is built from its text or JSON object). The
protocol they implement, `Policy`, is the FSM core's (`specfsm.fsm.decision`); each decides
with a `Verdict` (`specfsm.fsm.verdict`: the event, the rule, the numbers it compared).
"""

from __future__ import annotations

from specfsm.fsm.decision import FixedPolicy, Policy
from specfsm.fsm.verdict import Verdict, rule_verdict
from specfsm.policy.base import Hysteresis
from specfsm.policy.goodput import GoodputPolicy
from specfsm.policy.plugins import ENTRY_POINT_GROUP, check_policy, load_policy_factory
from specfsm.policy.registry import POLICIES, PolicySpecError, make_policy, parse_spec
from specfsm.policy.simple import ScriptedPolicy, ThresholdPolicy

__all__ = [
    "ENTRY_POINT_GROUP",
    "POLICIES",
    "FixedPolicy",
    "GoodputPolicy",
    "Hysteresis",
    "Policy",
    "PolicySpecError",
    "ScriptedPolicy",
    "ThresholdPolicy",
    "Verdict",
    "check_policy",
    "load_policy_factory",
    "make_policy",
    "parse_spec",
    "rule_verdict",
]
