"""The per-rank specfsm controller inside SGLang's scheduler process.

One `Controller` per EAGLEWorkerV2 (one per scheduler rank). The hooks (hooks.py) call it at
three points of each iteration:

1. `get_next_batch_to_run` (after): note running / queued counts (rank-consistent).
2. `forward_batch_generation` (around): before a decode forward `before_forward` builds the
   observation, lets the FSM step (the policy; a transition only when due), emits the
   completion events DRAINED / RESYNCED when their condition holds, checks the contracts,
   then SGLang's own forward runs in the width the mode attached; `after_forward` counts
   K-wide forwards in flight. Before a prefill forward, a policy that sees prefills
   (`sees_prefills`) steps the FSM the same way on the load the prefill brings
   (`before_prefill`), so a burst of arrivals reaches PLAIN before its prompts' prefill.
3. `process_batch_result` (after): a processed K-wide result leaves flight; its accept lengths
   become the next observation's.

The controller never changes mode-specific state itself: only SGLangModeActions does, inside
transitions. Its parts, one job each: the runtime states the worker switches between
(`runtime_states.EngineStates`), the flight state carried between the hooks' calls
(`flight.Flight`), which policy the machine decides with and why (`switchboard`, the control plane:
the configured policy, the start-up profile's pricing, the control file), the spec-state contracts
(`batch_contracts`) and the mode actions (`actions`). This module is the hot path and its extension
points.

Extension points (production API, typed): a `ControllerExtension` (registered with
`hooks.add_extension`) may wrap the ModeActions before the machine is built and add
`ControllerObserver`s, which see each decode forward (before the decision, before the contract
check, after both), each other forward, each processed result, each transition, each fault and each
idle check. With no observer the hot path pays one empty-list test per point.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from time import perf_counter, perf_counter_ns
from typing import TYPE_CHECKING, Any, Protocol

from specfsm import (
    Event,
    MachineFailed,
    Mode,
    ModeActionError,
    ModeActions,
    Observation,
    SpecFSM,
    SpecFSMError,
    TransitionLog,
    TransitionRecord,
    json_logger,
)
from specfsm_sglang import compat, consensus
from specfsm_sglang.actions import SGLangModeActions
from specfsm_sglang.batch_contracts import BatchSubject, build_contracts
from specfsm_sglang.flight import Flight, step_kind
from specfsm_sglang.paths import prepare_log
from specfsm_sglang.runtime_states import EngineStates
from specfsm_sglang.schema import Config
from specfsm_sglang.switchboard import PolicySwitchboard

if TYPE_CHECKING:
    from specfsm_sglang.metrics import Metrics
    from specfsm_sglang.plain import ZeroTaxPlain


class ControllerObserver:
    """Sees what one rank's controller sees; subclass it and override what you need.

    Observers are added to :attr:`Controller.observers` (usually by a :class:`ControllerExtension`'s
    ``attach``). They run on the scheduler's thread, in the hot path, so they must be cheap; an
    exception raised by one propagates into SGLang's scheduler. Every method here does nothing.
    """

    def before_decide(self, ctl: Controller, batch: Any) -> None:
        """A decode forward begins: ``ctl.iteration`` counts it; the policy has not decided."""

    def before_check(self, ctl: Controller, batch: Any, mode: Mode) -> None:
        """The forward's mode is final (transitions and completion events are done); the
        contracts check ``batch`` next."""

    def on_decode(self, ctl: Controller, batch: Any, mode: Mode) -> None:
        """The decode forward passed the contracts and runs in ``mode``."""

    def after_forward(self, ctl: Controller, batch: Any, result: Any, wide: bool) -> None:
        """A decode forward returned; ``wide``: it was a K-wide (speculative) forward."""

    def on_extend(self, ctl: Controller, batch: Any) -> None:
        """A forward that is not a decode (prefill / extend) is about to run."""

    def on_result(self, ctl: Controller, batch: Any, result: Any) -> None:
        """SGLang processes a forward's result (called before the controller takes its accept
        lengths)."""

    def on_transition(self, ctl: Controller, rec: TransitionRecord) -> None:
        """A transition happened (after the controller's metrics counted it)."""

    def on_fault(self, ctl: Controller, exc: SpecFSMError) -> None:
        """A mode action failed (:class:`ModeActionError`: the machine went to PLAIN and the
        engine keeps serving) or the machine failed (:class:`MachineFailed`: re-raised after
        the observers ran)."""

    def on_idle(self, ctl: Controller) -> None:
        """SGLang's scheduler ran its idle check (no batch to run)."""


class ControllerExtension(Protocol):
    """Plugs into every Controller built in this process (``hooks.add_extension``)."""

    def wrap_actions(self, ctl: Controller, actions: ModeActions) -> ModeActions:
        """Called once per controller, before its machine is built: return ``actions`` or an
        object that wraps them (same ModeActions protocol)."""
        ...

    def attach(self, ctl: Controller) -> None:
        """Called once per controller, at the end of its construction (add observers here)."""
        ...


class Controller(PolicySwitchboard):
    """specfsm inside one scheduler rank: the hot path the hooks call, its observers, and its
    parts (`states`, `flight`, the machine `fsm`, `contracts`; the switchboard it inherits)."""

    def __init__(
        self,
        worker: Any,
        server_args: Any,
        cfg: Config,
        extensions: Sequence[ControllerExtension] = (),
    ) -> None:
        self.worker = worker
        self.cfg = cfg
        self.rank = compat.tp_rank()
        self.overlap = not bool(getattr(server_args, "disable_overlap_schedule", True))
        #: every runtime state the worker switches between, built now
        self.states = states = EngineStates(worker, cfg)
        #: the server's launch width (the relay's: `relay`)
        self.topk = states.topk
        self.spec_steps = states.spec_steps
        self.spec_tokens = states.spec_tokens
        #: the draft shape SGLang launched with, and every shape SPECULATING may RESHAPE to,
        #: with its runtime state
        self.launch_shape = states.launch_shape
        self.shape_states = states.shape_states
        #: PLAIN's own decode state and lag buffer (config plain="zero_tax"), or None (warm)
        self.zero_tax = states.zero_tax

        #: what is in flight between the hooks' calls, read by the completion events: the hot
        #: path below updates it in place, the mode actions through its methods
        self.flight = Flight(cfg.resync_forwards, self.overlap)
        self.iteration = 0
        self.running = 0
        self.queued = 0

        #: called at the points ControllerObserver documents (see there)
        self.observers: list[ControllerObserver] = []
        actions: Any = SGLangModeActions(worker, states, self.flight, lambda: self.fsm.shape)
        for ext in extensions:
            actions = ext.wrap_actions(self, actions)
        # checked (directory created) in the parent; again here for this rank's path
        log_dest = prepare_log(cfg.log, self.rank) if cfg.log else None
        self.log = TransitionLog(json_logger(log_dest) if log_dest else None, rank=self.rank)
        # SGLang attached its K-wide state at start-up: that is SPECULATING's state, so the
        # machine is born in SPECULATING; initial_mode PLAIN gets there through the table
        # (LOAD_HIGH, DRAINED: end of __init__), its entry action attaching PLAIN's state.
        self.fsm = SpecFSM(
            cfg.take_policy(),
            actions,
            initial=Mode.SPECULATING,
            shapes=tuple(self.shape_states),
            shape=self.launch_shape,
            log=self.log,
            observe_every=cfg.observe_every,
            observe_seconds=float(cfg.observe_seconds),
            max_policy_faults=cfg.max_policy_faults,
        )
        self.contracts = build_contracts(self, cfg.contracts_every)
        self._subject = BatchSubject(self)
        self.contract_ns = 0

        #: the TP ranks' CPU group (None: one rank) and, with DP attention, the global load
        self.tp_group, self.global_load = consensus.rank_groups(server_args)
        #: the ranks' mean step time, for a policy that learns from it (None: one rank)
        self.step_clock = consensus.StepClock(self.tp_group) if self.tp_group is not None else None
        #: prefills are observed, and deferred prompts told (Observation.draft_debt), alike on
        #: every rank (TP ranks run the same prefill; DP attention ranks do not)
        self.prefill_decisions = self.global_load is None
        self.debt_store = self.zero_tax.store if self.zero_tax and self.prefill_decisions else None
        #: the last decode observation's mean context (a prefill observation prices at it)
        self.mean_ctx = 0

        self._init_switchboard(cfg)
        self._policy_faults_seen = 0
        #: mode actions that failed (each one a FAULT transition to PLAIN)
        self.action_failures = 0
        self.fsm.listeners.append(self._on_transition)
        # created at the end of Scheduler.__init__ (start_metrics), with SGLang's labels
        self.metrics: Metrics | None = None
        self.log.config(
            {
                "sglang": compat.sglang_version(),
                "algorithm": str(getattr(server_args, "speculative_algorithm", None)),
                "steps": self.spec_steps,
                "topk": self.topk,
                "draft_tokens": self.spec_tokens,
                "overlap": self.overlap,
                "dp_attention": self.global_load is not None,
                **states.describe(),
                **{k: v for k, v in cfg.as_dict().items() if k != "policy"},
                "policy": self.fsm.policy.describe(),
            }
        )
        for ext in extensions:
            ext.attach(self)
        if Mode[cfg.initial_mode] is Mode.PLAIN:
            self.fsm.process_event(Event.LOAD_HIGH, None, "initial_mode: PLAIN")
            self.fsm.process_event(Event.DRAINED, None, "start-up: no batch in flight")

    def start_metrics(self, labels: dict[str, str] | None) -> None:
        """Prometheus series with SGLang's scheduler labels (`compat.metrics_labels`), on the
        rank that exports SGLang's scheduler series; None: this rank exports nothing."""
        from specfsm.fsm.machine import policy_name
        from specfsm_sglang import metrics

        if self.metrics is not None:
            self.metrics.close()
        self.metrics = metrics.maybe_create(labels, self.fsm.mode, policy_name(self.fsm.policy))

    @contextmanager
    def observing(self, observer: ControllerObserver) -> Iterator[None]:
        """`observer` sees this controller meanwhile (the start-up profile's)."""
        self.observers.append(observer)
        try:
            yield
        finally:
            self.observers.remove(observer)

    # ------------------------------------------------------------------ hot path
    def before_forward(self, batch: Any) -> None:
        """Decide (and transition if due), emit completion events, check contracts."""
        self.iteration = it = self.iteration + 1
        observers = self.observers
        if observers:
            for o in observers:
                o.before_decide(self, batch)
        if self.control_file is not None and it % self.control_every == 0:
            self.timed_poll()
        fsm = self.fsm
        bs = compat.local_batch_size(batch)
        mean_ctx = 0  # 0: not measured (the log line then has no mean_ctx)
        if getattr(fsm.policy, "ctx_aware", False):
            # only a policy priced over several context lengths pays for this (a CPU sum)
            ctx_tokens = compat.context_tokens(batch)
            if self.global_load is not None:
                bs, ctx_tokens = self.global_load.pair(bs, ctx_tokens)
            mean_ctx = ctx_tokens // bs if bs > 0 else 0
            self.mean_ctx = mean_ctx
        elif self.global_load is not None:
            bs = self.global_load(bs)
        now = perf_counter()
        fl = self.flight
        prev_t = fl.step_start()
        step_ms = (now - prev_t) * 1000.0 if prev_t else 0.0
        # every rank reports a step on the same iterations and runs the same policy
        if step_ms and self.step_clock is not None and getattr(fsm.policy, "uses_step_ms", False):
            step_ms = self.step_clock(step_ms)
        obs = Observation(
            iteration=it,
            decode_bs=bs,
            running=self.running,
            accept_lens=fl.accept_lens,
            queued=self.queued,
            rank=self.rank,
            mean_ctx=mean_ctx,
            accept_shape=fl.accept_shape,
            step_ms=step_ms,
            step_bs=fl.prev_bs if prev_t else 0,
            step_shape=fl.prev_shape,
            step_kind=fl.prev_kind if prev_t else "",
            shape=fsm.shape,
            draft_debt=self.debt_store.told(bs) if self.debt_store is not None else 0,
        )
        self._step(obs)
        mode = fsm.mode
        fl.prev_t = now
        fl.prev_bs = bs
        if mode is Mode.SPECULATING:
            shape, kind = fsm.shape, "spec"
        else:
            shape, kind = None, step_kind(mode, self.zero_tax is not None)
        if kind != fl.prev_kind or (shape is not fl.prev_shape and shape != fl.prev_shape):
            fl.step_changed()
        fl.prev_shape, fl.prev_kind = shape, kind
        sub = self._subject
        sub.batch = batch
        if observers:
            for o in observers:
                o.before_check(self, batch, mode)
        t0 = perf_counter_ns()
        self.contracts.check(mode, sub)
        self.contract_ns += perf_counter_ns() - t0
        sub.batch = None
        if observers:
            for o in observers:
                o.on_decode(self, batch, mode)

    def _step(self, obs: Observation) -> None:
        """The machine steps on `obs`; then the completion events DRAINED / RESYNCED when due."""
        fsm = self.fsm
        fl = self.flight
        try:
            fsm.step(obs)
            mode = fsm.mode
            if mode is Mode.DRAINING:
                if fl.inflight_wide == 0:
                    fsm.process_event(Event.DRAINED, obs, "no K-wide batch in flight")
            elif mode is Mode.RESYNCING and fl.resync_left <= 0:
                fsm.process_event(Event.RESYNCED, obs, "draft caught up for every running request")
        except ModeActionError as exc:
            # logged by the machine (specfsm.action_failed + the FAULT transition); the engine
            # keeps serving in PLAIN
            self.action_failures += 1
            for o in self.observers:
                o.on_fault(self, exc)
        except MachineFailed as exc:
            for o in self.observers:
                o.on_fault(self, exc)
            raise

    def before_prefill(self, batch: Any) -> None:
        """A prefill forward is about to run: a policy that sees prefills decides on the load it
        brings (decode_bs: the running requests plus the prefill's own; the last decode's
        mean_ctx). A LOAD_HIGH drains at once when no K-wide batch is in flight, so this prefill
        runs in PLAIN already (zero-tax: its draft prefill deferred)."""
        self.iteration = it = self.iteration + 1
        fsm = self.fsm
        obs = Observation(
            iteration=it,
            decode_bs=self.running + compat.local_batch_size(batch),
            running=self.running,
            queued=self.queued,
            rank=self.rank,
            mean_ctx=self.mean_ctx,
            shape=fsm.shape,
            prefill_tokens=max(1, compat.extend_tokens(batch)),
            draft_debt=self.debt_store.told(self.running) if self.debt_store is not None else 0,
        )
        self._step(obs)

    def after_forward(self, batch: Any, result: Any) -> None:
        wide = self.worker.speculative_num_steps > 0
        fl = self.flight
        if wide:
            fl.inflight_wide += 1
            fl.wide_its.append((self.iteration, self.fsm.shape))
        elif fl.resync_left > 0 and self.zero_tax is None:
            # warm PLAIN: RESYNCING lasts resync_forwards forwards (zero-tax: until the
            # catch-up reports every request caught up, `plain_forward`)
            fl.resync_left -= 1
        if self.observers:
            for o in self.observers:
                o.after_forward(self, batch, result, wide)

    def plain_forward(self, zt: ZeroTaxPlain, batch: Any, on_publish: Any) -> Any:
        """Zero-tax PLAIN's forward instead of SGLang's (`zt` attached): one target decode
        forward; in RESYNCING followed by the batched catch-up, whose report ends RESYNCING
        (RESYNCED is due) and is logged."""
        fl = self.flight
        resync = fl.resync_left > 0
        result = zt.forward(batch, on_publish=on_publish, resync=resync)
        if resync:
            if zt.resync_done:
                fl.end_resync()
            if zt.last_catchup is not None:
                rows, tokens, secs, over, done = zt.last_catchup
                zt.last_catchup = None
                self.log.catchup(
                    iteration=self.iteration,
                    rows=rows,
                    tokens=tokens,
                    ms=secs * 1000.0,
                    overflow_rows=over,
                    done=done,
                )
        return result

    def on_verify_complete(self, num_correct_drafts_per_req: list[int]) -> None:
        self.flight.last_correct = num_correct_drafts_per_req

    def note_extend(self, batch: Any) -> None:
        """A forward that is not a decode is about to run: the next decode forward's step time
        would include it, so it is not reported (step_ms 0). A policy that sees prefills
        decides here too (`before_prefill`)."""
        self.flight.forget_step()
        if (
            self.prefill_decisions
            and getattr(self.fsm.policy, "sees_prefills", False)
            and not batch.forward_mode.is_idle()
        ):
            self.before_prefill(batch)
        if self.observers:
            for o in self.observers:
                o.on_extend(self, batch)

    def after_process_result(self, batch: Any, result: Any) -> None:
        if self.observers:
            for o in self.observers:
                o.on_result(self, batch, result)
        fl = self.flight
        k = getattr(result, "speculative_num_draft_tokens", None)
        if k is None or k <= 1 or batch.forward_mode.is_extend():
            fl.last_correct = None
            return
        # a processed K-wide result leaves flight; its verify's accept lengths belong to the
        # shape it was drafted with and become the next observation's
        if fl.inflight_wide > 0:
            fl.inflight_wide -= 1
        its = fl.wide_its
        round_it, shape = its.popleft() if its else (self.iteration, self.fsm.shape)
        correct = fl.last_correct
        if correct is not None:
            fl.accept_lens = tuple(n + 1 for n in correct)
            fl.accept_shape = shape
            # the observation lines name the K-wide round these accept lengths come from
            self.log.accept_lens_iteration = round_it
            fl.last_correct = None

    def note_schedule(self, scheduler: Any, plan: Any) -> None:
        # the scheduler assigns plan.running_batch to itself only after this call returns
        rb = getattr(plan, "running_batch", None)
        self.running = len(rb.reqs) if rb is not None and rb.reqs is not None else 0
        self.queued = len(scheduler.waiting_queue)

    def on_idle(self) -> None:
        if self.observers:
            for o in self.observers:
                o.on_idle(self)

    # ------------------------------------------------------------------ transitions
    def _on_transition(self, rec: TransitionRecord) -> None:
        faults = self.fsm.policy_faults
        new_faults = faults - self._policy_faults_seen
        if new_faults:  # a policy fault: its FAULT transition is this one
            self._policy_faults_seen = faults
            if self.metrics is not None:
                err = self.fsm.last_policy_error
                self.metrics.policy_fault(err.policy if err is not None else "?", new_faults)
        if self.metrics is not None:
            self.metrics.transition(rec)
        for o in self.observers:
            o.on_transition(self, rec)
