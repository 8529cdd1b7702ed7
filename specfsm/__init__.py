"""specfsm: a formal FSM that owns speculative-decoding state.

Modes SPECULATING, DRAINING, PLAIN, RESYNCING; one transition table (`TRANSITIONS`) is the single
source of truth for the executor (`SpecFSM`), the diagrams and the docs.
"""

from specfsm.actions import ModeActions, NoopActions, TransitionInfo
from specfsm.contracts import Contracts, Violation
from specfsm.errors import (
    InvalidTransition,
    MachineFailed,
    ModeActionError,
    PolicyError,
    SpecFSMError,
    SpecStateError,
)
from specfsm.log import TransitionLog, json_logger
from specfsm.machine import SpecFSM, TransitionRecord
from specfsm.observation import Observation
from specfsm.policies import FixedPolicy, Policy, ScriptedPolicy, ThresholdPolicy, toward
from specfsm.table import (
    INITIAL_MODE,
    LOAD_EVENTS,
    SAFE_MODE,
    TRANSITIONS,
    Event,
    Mode,
    legal_events,
)

__all__ = [
    "INITIAL_MODE",
    "LOAD_EVENTS",
    "SAFE_MODE",
    "TRANSITIONS",
    "Contracts",
    "Event",
    "FixedPolicy",
    "InvalidTransition",
    "MachineFailed",
    "Mode",
    "ModeActionError",
    "ModeActions",
    "NoopActions",
    "Observation",
    "Policy",
    "PolicyError",
    "ScriptedPolicy",
    "SpecFSM",
    "SpecFSMError",
    "SpecStateError",
    "ThresholdPolicy",
    "TransitionInfo",
    "TransitionLog",
    "TransitionRecord",
    "Violation",
    "json_logger",
    "legal_events",
    "toward",
]
