"""specfsm: a formal FSM that owns speculative-decoding state.

Modes SPECULATING, DRAINING, PLAIN, RESYNCING; one transition table (`TRANSITIONS`) is the single
source of truth for the executor (`SpecFSM`), the diagrams and the docs.

Layout (the arrows point one way: cli -> sim -> policy -> model, and everything -> fsm):
``specfsm.fsm`` the FSM core (table, machine, actions, contracts, log); ``specfsm.policy`` the
policies and their one registry; ``specfsm.model`` the cost and acceptance models;
``specfsm.sim`` the serving simulator and tuner (extra ``sim``: numpy, matplotlib);
``specfsm.cli`` the ``specfsm`` command; ``specfsm.logtools`` the log tools.
"""

from specfsm.fsm.actions import ModeActions, NoopActions
from specfsm.fsm.contracts import Contracts, Violation
from specfsm.fsm.decision import FixedPolicy, Policy
from specfsm.fsm.errors import (
    InvalidShape,
    InvalidTransition,
    MachineFailed,
    ModeActionError,
    PolicyError,
    SpecFSMError,
    SpecStateError,
)
from specfsm.fsm.log import TransitionLog, json_logger
from specfsm.fsm.machine import SpecFSM
from specfsm.fsm.observation import Observation
from specfsm.fsm.record import TransitionInfo, TransitionRecord
from specfsm.fsm.table import (
    INITIAL_MODE,
    LOAD_EVENTS,
    SAFE_MODE,
    SHAPE_EVENTS,
    TRANSITIONS,
    Event,
    Mode,
    legal_events,
    toward,
)
from specfsm.policy.simple import ScriptedPolicy, ThresholdPolicy

__all__ = [
    "INITIAL_MODE",
    "LOAD_EVENTS",
    "SAFE_MODE",
    "SHAPE_EVENTS",
    "TRANSITIONS",
    "Contracts",
    "Event",
    "FixedPolicy",
    "InvalidShape",
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
