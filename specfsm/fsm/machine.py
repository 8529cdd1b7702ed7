"""SpecFSM: executes the table with `transitions`, only when a transition is due.

Hot path (every scheduler iteration): `step(obs)` reads the current mode, asks the policy, and
returns None when the policy has nothing to say: no call into `transitions`, no allocation, no
log line. Only a real event goes through `process_event`, which checks the table (an illegal
event raises `InvalidTransition` with the mode unchanged) and fires the `transitions` trigger;
its state callbacks run the mode actions (exit(src), then enter(dst)).

Shapes: a shape event (RESHAPE, `specfsm.fsm.table.SHAPE_EVENTS`) is an internal self-transition
of the table (`dest=None` for `transitions`): no exit/enter; its transition's `after` callback
runs the one action `reshape_speculating`. `process_event(Event.RESHAPE, obs, reason,
shape=new)` needs the shape; a shape with any other event, a shape outside `shapes` (when not
empty), or the current shape again raises `InvalidShape` (an `InvalidTransition`) with mode and
shape unchanged. `shape` becomes `new` only once the action succeeded; a failing action faults
to PLAIN as any other, the shape unchanged.

A policy's decision is a `Verdict` (`specfsm.fsm.verdict`: the event, the shape of a RESHAPE,
the rule and the numbers it rested on), which the transition record and log line carry; a
policy may instead return a bare Event, naming a RESHAPE's shape in its `next_shape` attribute
and its reason in `last_reason`. A missing or refused shape is a policy fault (below).

When an action raises, the `on_exception` handler logs `specfsm.action_failed` and fires FAULT
(in the table from every mode, so the diagram shows the path) to the safe mode PLAIN, whose
entry action must be total; `process_event` then raises `ModeActionError` chained to the cause.
If the fault path itself fails, the machine marks itself failed (`failed` is True): every later
call raises `MachineFailed`, and the engine must stop rather than serve in an unknown mode.

Policy faults never stop the engine (`specfsm.fsm.faults`). The wrapper is a try/except and
two identity checks: no cost while the policy behaves.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs
from transitions import Machine

from specfsm.fsm.actions import ModeActions, NoopActions, action_name, bind_actions
from specfsm.fsm.checks import check_new_shape
from specfsm.fsm.decision import FixedPolicy, Policy, policy_name
from specfsm.fsm.errors import (
    InvalidShape,
    InvalidTransition,
    MachineFailed,
    ModeActionError,
    PolicyError,
)
from specfsm.fsm.faults import fault_policy
from specfsm.fsm.glue import Model, Pending, machine_config, quiet_transitions_logger
from specfsm.fsm.log import TransitionLog
from specfsm.fsm.observation import Observation
from specfsm.fsm.record import TransitionRecord
from specfsm.fsm.table import (
    INITIAL_MODE,
    SAFE_MODE,
    SHAPE_EVENTS,
    SHAPE_TRANSITIONS,
    TRANSITIONS,
    Event,
    Mode,
)
from specfsm.fsm.verdict import Verdict
from specfsm.model.acceptance import DraftShape

__all__ = [
    "DEFAULT_MAX_POLICY_FAULTS",
    "SpecFSM",
    "TransitionRecord",
    "machine_config",
    "policy_name",
]


_LOAD_HIGH = Event.LOAD_HIGH  # module-level aliases: identity checks on the per-iteration path
_LOAD_LOW = Event.LOAD_LOW
_RESHAPE = Event.RESHAPE

#: Faults of one policy after which it is replaced by FixedPolicy(False) (stay PLAIN).
DEFAULT_MAX_POLICY_FAULTS = 3


class SpecFSM:
    """The mode machine of one engine rank."""

    def __init__(
        self,
        policy: Policy | None = None,
        actions: ModeActions | None = None,
        *,
        initial: Mode = INITIAL_MODE,
        log: TransitionLog | None = None,
        observe_every: int = 0,
        observe_seconds: float = 0.0,
        max_policy_faults: int = DEFAULT_MAX_POLICY_FAULTS,
        shapes: Sequence[DraftShape] = (),
        shape: DraftShape | None = None,
    ) -> None:
        if observe_every < 0 or observe_seconds < 0:
            raise ValueError("observe_every and observe_seconds must be >= 0 (0 = off)")
        if isinstance(max_policy_faults, bool) or not isinstance(max_policy_faults, int):
            raise TypeError(f"max_policy_faults must be an int, got {max_policy_faults!r}")
        if max_policy_faults < 1:
            raise ValueError(f"max_policy_faults must be >= 1, got {max_policy_faults}")
        bad = [x for x in (*shapes, shape) if x is not None and not isinstance(x, DraftShape)]
        if bad:
            raise TypeError(f"shapes and shape must be DraftShape, got {bad[0]!r}")
        #: the allowed draft shapes (empty: any); `_shape`: the current one (None: the launch's)
        self._shapes: tuple[DraftShape, ...] = tuple(dict.fromkeys(shapes))
        if shape is not None and self._shapes and shape not in self._shapes:
            raise ValueError(
                f"shape {shape.label()} is not one of shapes {[x.label() for x in self._shapes]}"
            )
        self._shape: DraftShape | None = shape
        self._policy: Policy = policy if policy is not None else FixedPolicy(True)
        self.max_policy_faults = max_policy_faults
        #: Policy faults over the machine's life (metrics); `_strikes`: of the current policy.
        self.policy_faults = 0
        self._strikes = 0
        self.last_policy_error: PolicyError | None = None
        self._actions = bind_actions(actions if actions is not None else NoopActions())
        self.log = log if log is not None else TransitionLog()
        quiet_transitions_logger()
        self._observe_every = observe_every
        self._observe_seconds = observe_seconds
        self._next_observe_t = 0.0
        self._observing = bool(observe_every or observe_seconds)
        self._model = Model()
        self._machine = Machine(
            model=self._model,
            initial=initial,
            model_attribute="mode",
            send_event=True,
            on_exception=self._on_exception,
            **machine_config(),
        )
        for mode in Mode:
            state = self._machine.get_state(mode)
            state.add_callback("exit", self._on_exit)
            state.add_callback("enter", self._on_enter)
        for mode, event in SHAPE_TRANSITIONS:
            for tr in self._machine.events[event.value].transitions[mode.name]:
                tr.add_callback("after", self._on_shape)
        self._triggers = {ev: self._machine.events[ev.value] for ev in Event}
        self._pending: Pending | None = None
        self._in_fault = False
        self._failed: BaseException | None = None
        self.iteration = 0
        self.transitions = 0
        self.entered_at = time.monotonic()
        self.listeners: list[Callable[[TransitionRecord], None]] = []

    # ------------------------------------------------------------------ reading
    @property
    def mode(self) -> Mode:
        """The current mode."""
        mode: Mode = self._model.mode
        return mode

    @property
    def shape(self) -> DraftShape | None:
        """The current draft shape (None: not set, the engine's launch shape). Kept across
        PLAIN: the shape SPECULATING resumes with."""
        return self._shape

    @property
    def shapes(self) -> tuple[DraftShape, ...]:
        """The draft shapes a RESHAPE may choose (empty: any)."""
        return self._shapes

    @property
    def policy(self) -> Policy:
        """The policy asked once per iteration. Assigning one resets its fault count."""
        return self._policy

    @policy.setter
    def policy(self, policy: Policy) -> None:
        self._policy = policy
        self._strikes = 0

    @property
    def failed(self) -> bool:
        """True once the fault path itself failed: the engine must stop."""
        return self._failed is not None

    # ------------------------------------------------------------------ hot path
    def step(self, obs: Observation) -> Event | None:
        """Once per scheduler iteration: ask the policy; transition only if it says so.

        Returns the event applied, None (the common case), or Event.FAULT when the policy
        faulted (raised or returned a wrong value; the machine is then in PLAIN).
        """
        if self._failed is not None:
            self._raise_failed()
        self.iteration = obs.iteration
        mode = self._model.mode
        try:
            out = self._policy.decide(mode, obs)
        except Exception as exc:
            return self._policy_fault(obs, mode, exc, None)
        if self._observing:
            self._maybe_observe(obs, mode)
        if out is None:
            return None
        return self._apply(obs, mode, out)

    def _apply(self, obs: Observation, mode: Mode, out: object) -> Event:
        """The policy's decision: a Verdict (its event, shape and numbers) or a bare Event
        (then the shape of a RESHAPE is the policy's `next_shape`, its reason `last_reason`)."""
        verdict: Verdict | None = None
        if type(out) is Verdict:
            verdict = out
            event: object = out.event
        else:
            event = out
        if event is not _LOAD_HIGH and event is not _LOAD_LOW and event is not _RESHAPE:
            return self._policy_fault(obs, mode, None, event)
        if event not in TRANSITIONS[mode]:
            return self._policy_fault(obs, mode, None, event)
        policy = self._policy
        reason = verdict.reason if verdict is not None else getattr(policy, "last_reason", "")
        if event is not _RESHAPE:
            self.process_event(event, obs, reason, verdict=verdict)
            return event
        shape = verdict.shape if verdict is not None else getattr(policy, "next_shape", None)
        try:
            self.process_event(_RESHAPE, obs, reason, shape=shape, verdict=verdict)
        except InvalidShape as err:  # mode and shape unchanged
            return self._policy_fault(
                obs,
                mode,
                None,
                _RESHAPE,
                f"emitted RESHAPE with next_shape {shape!r:.80}: {err.detail}",
            )
        return _RESHAPE

    def _policy_fault(
        self,
        obs: Observation,
        mode: Mode,
        exc: Exception | None,
        value: object,
        detail: str | None = None,
    ) -> Event:
        """The policy raised (`exc`) or returned `value`: fault it (`specfsm.fsm.faults`)."""
        return fault_policy(self, obs, mode, exc, value, detail)

    def _maybe_observe(self, obs: Observation, mode: Mode) -> None:
        """The sampled specfsm.observation line (every N iterations and/or T seconds)."""
        if self._observe_every and obs.iteration % self._observe_every == 0:
            self.log.observation(obs, mode, self._policy)
        elif self._observe_seconds:
            now = time.monotonic()
            if now >= self._next_observe_t:
                self._next_observe_t = now + self._observe_seconds
                self.log.observation(obs, mode, self._policy)

    # ------------------------------------------------------------------ transitions
    def process_event(
        self,
        event: Event,
        obs: Observation | None = None,
        reason: str = "",
        *,
        shape: DraftShape | None = None,
        verdict: Verdict | None = None,
    ) -> Mode:
        """Apply `event`: run exit(src) and enter(dst) (a shape event: only its own action),
        log, return the new mode.

        `shape` is the new draft shape of a shape event (RESHAPE), required there and forbidden
        with any other event; `verdict` the policy's decision, carried to the record and the
        log line. Raises InvalidTransition (mode unchanged) for an event the table
        does not accept, InvalidShape (mode and shape unchanged) for a refused shape,
        ModeActionError (now in PLAIN) when an action failed, MachineFailed when even the
        fault path failed.
        """
        if self._failed is not None:
            self._raise_failed()
        src: Mode = self._model.mode
        dst = TRANSITIONS[src].get(event)
        if dst is None:
            raise InvalidTransition(src, event)
        iteration = obs.iteration if obs is not None else self.iteration
        if shape is None and event not in SHAPE_EVENTS:
            record = TransitionRecord(iteration, src, dst, event, reason, verdict=verdict)
        else:
            check_new_shape(src, event, shape, self._shapes, self._shape)
            record = TransitionRecord(
                iteration,
                src,
                dst,
                event,
                reason,
                shape=shape,
                prev_shape=self._shape,
                verdict=verdict,
            )
        pending = Pending(record, obs)
        self._fire(pending)
        if self._failed is not None:
            self._raise_failed()
        if pending.error is not None:
            raise ModeActionError(
                pending.failed_action or "?", self._model.mode, pending.error
            ) from pending.error
        if record.shape is not None:
            self._shape = record.shape
        self._finish(pending)
        return dst

    def fault(self, reason: str, obs: Observation | None = None) -> Mode:
        """Go to the safe mode through FAULT (e.g. after a failed contract check)."""
        return self.process_event(Event.FAULT, obs, reason)

    def _fire(self, pending: Pending) -> None:
        outer = self._pending
        self._pending = pending
        try:
            self._triggers[pending.info.event].trigger(self._model)
        finally:
            self._pending = outer

    def _finish(self, pending: Pending) -> None:
        info = pending.info
        self.transitions += 1
        self.entered_at = now = time.monotonic()
        self.log.transition(
            iteration=info.iteration,
            src=info.src,
            dst=info.dst,
            event=info.event,
            reason=info.reason,
            obs=pending.obs,
            exit_us=pending.exit_us,
            enter_us=pending.enter_us,
            shape=info.shape,
            prev_shape=info.prev_shape,
            shape_us=pending.shape_us,
            verdict=info.verdict,
        )
        if self.listeners:
            record = attrs.evolve(
                info, exit_us=pending.exit_us, enter_us=pending.enter_us, monotonic_s=now
            )
            for listener in self.listeners:
                listener(record)

    # ------------------------------------------------------------------ callbacks
    def _run_action(self, kind: str, mode: Mode) -> None:
        pending = self._pending
        assert pending is not None, "mode actions run only inside process_event"
        t0 = time.perf_counter_ns()
        try:
            self._actions[(kind, mode)](pending.info)
        except BaseException:
            pending.failed_action = action_name(kind, mode)
            raise
        finally:
            us = (time.perf_counter_ns() - t0) // 100 / 10.0  # 0.1 us resolution
            if kind == "exit":
                pending.exit_us = us
            elif kind == "enter":
                pending.enter_us = us
            else:
                pending.shape_us = us

    def _on_exit(self, event_data: Any) -> None:
        pending = self._pending
        assert pending is not None
        if pending.info.event is Event.FAULT:
            return  # the failing action may have been this very exit: only enter_plain runs
        self._run_action("exit", pending.info.src)

    def _on_enter(self, event_data: Any) -> None:
        pending = self._pending
        assert pending is not None
        self._run_action("enter", pending.info.dst)

    def _on_shape(self, event_data: Any) -> None:
        """A shape event's internal self-transition: its one action (no exit, no enter)."""
        pending = self._pending
        assert pending is not None
        self._run_action(pending.info.event.value, pending.info.src)

    def _on_exception(self, event_data: Any) -> None:
        err: BaseException = event_data.error
        pending = self._pending
        assert pending is not None
        pending.error = err
        self.log.action_failed(
            iteration=pending.info.iteration,
            action=pending.failed_action or "transition",
            src=pending.info.src,
            dst=pending.info.dst,
            event=pending.info.event,
            exc=err,
        )
        if self._in_fault or pending.info.event is Event.FAULT:
            self._failed = err  # the fault path itself failed: the mode is unknown
            return
        if not isinstance(err, Exception):  # KeyboardInterrupt, SystemExit: do not swallow
            self._failed = err
            raise err
        here: Mode = self._model.mode
        fault = Pending(
            TransitionRecord(
                pending.info.iteration,
                here,
                SAFE_MODE,
                Event.FAULT,
                f"{pending.failed_action or 'transition'} failed: {type(err).__name__}: {err}",
            ),
            pending.obs,
        )
        self._in_fault = True
        try:
            self._fire(fault)
        finally:
            self._in_fault = False
        if self._failed is None and fault.error is None:
            self._finish(fault)

    def _raise_failed(self) -> None:
        cause = self._failed
        raise MachineFailed(
            "specfsm: the fault path failed (enter_plain raised while recovering); the engine's "
            "speculation state is unknown and it must stop"
        ) from cause

    def describe(self) -> dict[str, object]:
        """The resolved configuration, for the `specfsm.config` log line."""
        return {
            "mode": self.mode.name,
            "shape": self._shape.label() if self._shape is not None else None,
            "shapes": [x.label() for x in self._shapes],
            "policy": self._policy.describe(),
            "max_policy_faults": self.max_policy_faults,
            "observe_every": self._observe_every,
            "observe_seconds": self._observe_seconds,
        }
