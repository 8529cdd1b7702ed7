"""The transition table: the single source of truth for specfsm's modes.

Theory of operation
===================

specfsm decides, once per scheduler iteration, which *mode* the engine decodes in. A mode is a
promise about which speculative-decoding ("spec") state may exist on the running batch:

SPECULATING
    Stock speculative decoding: draft -> verify (K tokens per request) -> draft-extend.
    The batch carries draft-input rows, one per request; verify state sized bs x K exists only
    inside a forward.
DRAINING
    Load rose. A speculative batch may still be in flight (overlap scheduling keeps one batch
    queued whose result is not yet processed), and it still owns state sized by the draft width.
    Nothing new is allocated; once no in-flight batch uses the K-sized state, it is released.
    The engine reports DRAINED when that is done (in the same iteration when overlap is off).
PLAIN
    One target token per request per step. No K-sized state may be attached to the batch.
    This is the *safe mode*: every FAULT leads here, and its entry action must establish its
    guarantees from any partially applied state (it is idempotent and total).
RESYNCING
    Load fell. Whatever the draft missed while PLAIN (its KV and hidden-state inputs for the
    tokens decoded without it) is caught up before the next speculative step. The engine
    reports RESYNCED when every running request has fresh draft inputs. If load rises again
    first, LOAD_HIGH abandons the catch-up and returns to PLAIN with nothing half-applied.

Why DRAINING and RESYNCING exist: the two failure classes seen in the field. Switching from
speculation to plain decoding in one step, while a K-wide batch was still attached, crashed a
patched SGLang worker ("tensor a (160) must match tensor b (2)": 10 requests x 16 draft
tokens). Switching back without catching the draft up leaves it stale, and acceptance silently
collapses. Each hazard gets a mode of its own, with entry/exit actions that own the state.

Shapes inside SPECULATING: the engine holds a set of pre-built runtime states, one per draft
shape (topk, steps, draft tokens), each with its CUDA graphs, built at start-up. RESHAPE is a
SPECULATING -> SPECULATING self-transition that swaps the attached one for another: it is an
*internal* transition (neither exit_speculating nor enter_speculating runs; one action,
`reshape_speculating`, attaches the new shape's state). Under overlap scheduling the in-flight
batch of the old shape completes with the old shape's state first (the engine keeps it alive
until that result is processed), and the contracts check every forward's width against the
shape attached when it was launched. The machine keeps the current shape (`SpecFSM.shape`, kept
across PLAIN) and changes it only when the action succeeded; a failing action faults to PLAIN
as any other, with the shape unchanged. RESHAPE is no load event: it never moves the mode, and
TOWARD ignores it.

Who emits which event: *load* events (LOAD_HIGH, LOAD_LOW) and the *shape* event (RESHAPE, with
the wanted shape) come from a policy; *completion* events (DRAINED, RESYNCED) come from the
engine adapter; FAULT comes from the machine itself when a mode action raises, or from the
adapter when a contract check fails.

Rule 1 (after h11): every transition lives in TRANSITIONS below. The executor, the diagrams,
the docs and the tests are all generated from, or checked against, this one mapping; a
transition written as code anywhere else is a bug.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final


class Mode(enum.Enum):
    """The four modes. Exactly these; a failed machine is a flag, not a fifth mode."""

    SPECULATING = "SPECULATING"
    DRAINING = "DRAINING"
    PLAIN = "PLAIN"
    RESYNCING = "RESYNCING"

    def __repr__(self) -> str:
        return f"Mode.{self.name}"


class Event(enum.Enum):
    """Events that move the machine. Values are the `transitions` trigger names."""

    LOAD_HIGH = "load_high"  # policy: load rose, stop speculating
    DRAINED = "drained"  # engine: no in-flight batch uses K-sized state any more
    LOAD_LOW = "load_low"  # policy: load fell, speculate again
    RESYNCED = "resynced"  # engine: the draft has caught up for every running request
    FAULT = "fault"  # machine/engine: an action or a contract failed; go to the safe mode
    RESHAPE = "reshape"  # policy: another draft shape pays more; change shape inside SPECULATING

    def __repr__(self) -> str:
        return f"Event.{self.name}"


#: Who emits each event and when: the edge labels' meaning in the generated state diagram.
EVENT_SOURCES: Final[Mapping[Event, tuple[str, str]]] = MappingProxyType(
    {
        Event.LOAD_HIGH: ("policy", "load rose: stop speculating"),
        Event.DRAINED: ("engine adapter", "no in-flight batch uses K-sized state any more"),
        Event.LOAD_LOW: ("policy", "load fell: speculate again"),
        Event.RESYNCED: ("engine adapter", "the draft caught up for every running request"),
        Event.FAULT: (
            "machine / engine adapter",
            "a mode action raised, a contract failed, or the policy failed",
        ),
        Event.RESHAPE: ("policy", "another draft shape pays more: change shape inside SPECULATING"),
    }
)

#: The safe mode every FAULT leads to.
SAFE_MODE: Final = Mode.PLAIN

#: Mode the machine starts in when the engine starts with speculation on.
INITIAL_MODE: Final = Mode.SPECULATING

#: Load events: a policy emits them to move between speculating and not.
LOAD_EVENTS: Final = frozenset({Event.LOAD_HIGH, Event.LOAD_LOW})

#: Shape events: a policy emits them (with the wanted shape) to change the draft shape inside a
#: mode. Each is an *internal* self-transition: no exit/enter action, one action named
#: ``f"{event.value}_{mode.value.lower()}"`` (RESHAPE in SPECULATING: `reshape_speculating`).
SHAPE_EVENTS: Final = frozenset({Event.RESHAPE})

#: Events a policy may emit; the others are completion or fault events.
POLICY_EVENTS: Final = LOAD_EVENTS | SHAPE_EVENTS

#: Modes in which the next forward is a speculative one (draft + verify of K tokens).
SPECULATIVE_MODES: Final = frozenset({Mode.SPECULATING})

TRANSITIONS: Final[Mapping[Mode, Mapping[Event, Mode]]] = MappingProxyType(
    {
        Mode.SPECULATING: MappingProxyType(
            {
                Event.LOAD_HIGH: Mode.DRAINING,
                Event.RESHAPE: Mode.SPECULATING,
                Event.FAULT: Mode.PLAIN,
            }
        ),
        Mode.DRAINING: MappingProxyType(
            {
                Event.DRAINED: Mode.PLAIN,
                Event.FAULT: Mode.PLAIN,
            }
        ),
        Mode.PLAIN: MappingProxyType(
            {
                Event.LOAD_LOW: Mode.RESYNCING,
                Event.FAULT: Mode.PLAIN,
            }
        ),
        Mode.RESYNCING: MappingProxyType(
            {
                Event.RESYNCED: Mode.SPECULATING,
                Event.LOAD_HIGH: Mode.PLAIN,
                Event.FAULT: Mode.PLAIN,
            }
        ),
    }
)


#: Events the engine adapter emits when a mode's work is done (no policy, no fault).
COMPLETION_EVENTS: Final = frozenset({Event.DRAINED, Event.RESYNCED})

#: The two modes a policy may aim for: speculating, or not.
TARGET_MODES: Final = (Mode.SPECULATING, Mode.PLAIN)


def legal_events(mode: Mode) -> frozenset[Event]:
    """The events the table accepts in `mode`."""
    return frozenset(TRANSITIONS[mode])


def _shape_transitions() -> tuple[tuple[Mode, Event], ...]:
    """Every (mode, shape event) of the table; each must be a self-transition."""
    out = []
    for mode, row in TRANSITIONS.items():
        for ev, dst in row.items():
            if ev in SHAPE_EVENTS:
                if dst is not mode:
                    raise AssertionError(f"table: shape event {ev} must stay in {mode}, not {dst}")
                out.append((mode, ev))
    return tuple(out)


#: (mode, event) of every internal self-transition (a shape change): the machine runs one
#: action for each, `shape_action_name(event, mode)`, and neither exit(mode) nor enter(mode).
SHAPE_TRANSITIONS: Final[tuple[tuple[Mode, Event], ...]] = _shape_transitions()


def shape_action_name(event: Event, mode: Mode) -> str:
    """The action a shape event runs in `mode`: RESHAPE in SPECULATING -> `reshape_speculating`."""
    return f"{event.value}_{mode.value.lower()}"


def _settles_in(mode: Mode) -> Mode:
    """Where `mode` ends up by completion events alone (the engine finishing its work)."""
    seen = {mode}
    while True:
        nxt = [dst for ev, dst in TRANSITIONS[mode].items() if ev in COMPLETION_EVENTS]
        if not nxt or nxt[0] in seen:
            return mode
        mode = nxt[0]
        seen.add(mode)


def _derive_toward() -> Mapping[tuple[Mode, Mode], Event | None]:
    """TOWARD, read off TRANSITIONS: in each mode, the load event whose destination settles in
    the target mode by completion events alone; None when no load event of `mode` does."""
    out: dict[tuple[Mode, Mode], Event | None] = {}
    for mode, row in TRANSITIONS.items():
        for target in TARGET_MODES:
            found = [
                ev for ev, dst in row.items() if ev in LOAD_EVENTS and _settles_in(dst) is target
            ]
            if len(found) > 1:
                raise AssertionError(f"table: {mode} has two load events toward {target}: {found}")
            out[(mode, target)] = found[0] if found else None
    return MappingProxyType(out)


#: (mode, target) -> the load event a policy emits to move toward `target` (SPECULATING or
#: PLAIN), or None (already there, or DRAINING: the drain always completes first). Derived
#: from TRANSITIONS, so a policy names where it wants to go and the table decides how.
TOWARD: Final[Mapping[tuple[Mode, Mode], Event | None]] = _derive_toward()


def toward(mode: Mode, speculate: bool) -> Event | None:
    """The load event that moves `mode` toward speculating (True) or not (False), if any:
    ``TOWARD[(mode, SPECULATING or PLAIN)]``."""
    return TOWARD[(mode, Mode.SPECULATING if speculate else Mode.PLAIN)]


def toward_shape(mode: Mode, shape: object, want: object) -> Event | None:
    """The event that moves the machine (in `mode`, drafting `shape`) toward `want`: None for
    PLAIN, else SPECULATING at the shape `want`. RESHAPE when speculating at another shape (the
    caller names `want` as the policy's ``next_shape``), else the load event of `TOWARD`; None
    when it is there or only a completion event can move it."""
    if want is None:
        return TOWARD[(mode, Mode.PLAIN)]
    if mode is Mode.SPECULATING and shape is not None and shape != want:
        return Event.RESHAPE
    return TOWARD[(mode, Mode.SPECULATING)]
