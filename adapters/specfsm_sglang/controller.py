"""The per-rank specfsm controller inside SGLang's scheduler process.

One `Controller` per EAGLEWorkerV2 (one per scheduler rank). The hooks (hooks.py) call it at
three points of each iteration:

1. `get_next_batch_to_run` (after): note running / queued counts (rank-consistent).
2. `forward_batch_generation` (around, decode forwards only): `before_forward` builds the
   observation, lets the FSM step (the policy; a transition only when due), emits the
   completion events DRAINED / RESYNCED when their condition holds, checks the contracts,
   then SGLang's own forward runs in the width the mode attached; `after_forward` counts
   K-wide forwards in flight.
3. `process_batch_result` (after): a processed K-wide result leaves flight; its accept lengths
   become the next observation's.

The controller never changes mode-specific state itself: only SGLangModeActions does, inside
transitions.

Extension points (production API, typed): a `ControllerExtension` (registered with
`hooks.add_extension`) may wrap the ModeActions before the machine is built and add
`ControllerObserver`s, which see each decode forward (before the decision, before the contract
check, after both), each other forward, each processed result, each transition, each fault
and each idle check. With no observer the hot path pays one empty-list test per point.
"""

from __future__ import annotations

import json
import os
import stat
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from specfsm import (
    Contracts,
    Event,
    FixedPolicy,
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
from specfsm.fsm.contracts import Violation, describe
from specfsm_sglang import compat, config
from specfsm_sglang.actions import SGLangModeActions
from specfsm_sglang.config import Config, ConfigError, make_policy

if TYPE_CHECKING:
    from specfsm import Policy
    from specfsm_sglang.consensus import GlobalLoad
    from specfsm_sglang.metrics import Metrics
    from specfsm_sglang.plain import ZeroTaxPlain


class ControllerObserver:
    """Sees what one rank's controller sees; subclass it and override what you need.

    Observers are added to :attr:`Controller.observers` (usually by a
    :class:`ControllerExtension`'s ``attach``). They run on the scheduler's thread, in the hot
    path, so they must be cheap; an exception raised by one propagates into SGLang's scheduler.
    Every method here does nothing.
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


class _Subject:
    """What the contracts look at: the worker and the batch about to be forwarded."""

    __slots__ = ("batch", "ctl")

    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl
        self.batch: Any = None


def _build_contracts(ctl: Controller, every: int) -> Contracts[_Subject]:
    from sglang.srt.speculative.eagle_info import EagleDraftInput

    def bs(s: _Subject) -> int:
        return compat.local_batch_size(s.batch)

    def draft_input(s: _Subject) -> Violation | None:
        info = s.batch.spec_info
        if info is None or isinstance(info, EagleDraftInput):
            return None
        return Violation("batch.spec_info", "EagleDraftInput | None", describe(info))

    row_fields = ("bonus_tokens", "topk_p", "topk_index", "hidden_states")
    topk_fields = ("topk_p", "topk_index")

    def rows(s: _Subject) -> Violation | None:
        """Every per-request tensor of the draft input has one row per request."""
        batch = s.batch
        info = batch.spec_info
        if info is None or batch.forward_mode.is_idle():
            return None
        n = bs(s)
        for field in row_fields:
            value = getattr(info, field, None)
            if value is None:
                continue
            shape = getattr(value, "shape", None)
            if shape is None or len(shape) == 0 or shape[0] != n:
                return Violation(
                    f"batch.spec_info.{field}", f"rows == batch size ({n})", describe(value)
                )
            if field in topk_fields and (len(shape) < 2 or shape[1] != ctl.topk):
                return Violation(
                    f"batch.spec_info.{field}", f"[bs, topk={ctl.topk}]", describe(value)
                )
        return None

    def width(want_steps: int, want_tokens: int) -> Callable[[_Subject], Violation | None]:
        def check(s: _Subject) -> Violation | None:
            w = ctl.worker
            got = (w.speculative_num_steps, w.speculative_num_draft_tokens)
            if got != (want_steps, want_tokens):
                return Violation(
                    "worker (speculative_num_steps, speculative_num_draft_tokens)",
                    f"({want_steps}, {want_tokens})",
                    str(got),
                )
            dw = w._draft_worker
            if (dw.speculative_num_steps, dw.speculative_num_draft_tokens) != got:
                return Violation(
                    "draft worker width",
                    f"same as worker {got}",
                    str((dw.speculative_num_steps, dw.speculative_num_draft_tokens)),
                )
            return None

        return check

    def target_state(plain: bool) -> Any:
        def check(s: _Subject) -> Violation | None:
            """Zero-tax: the target runner holds PLAIN's decode state exactly in PLAIN and
            RESYNCING (a DECODE batch on a verify graph is the seeds' crash class)."""
            zt = ctl.zero_tax
            if zt is None:
                return None
            tmr = ctl.worker._target_worker.model_runner
            has = (
                zt.attached
                and tmr.attn_backend is zt.target_attn_backend
                and tmr.decode_cuda_graph_runner is zt.target_graph_runner
            )
            if has == plain:
                return None
            want = "PLAIN's decode state" if plain else "a verify state (not PLAIN's)"
            got = "PLAIN's decode state" if has else "a verify state"
            return Violation("target runner (attn_backend, decode graph)", want, got)

        return check

    common = [draft_input, rows]
    wide = [*common, width(ctl.spec_steps, ctl.spec_tokens), target_state(False)]
    drain = [*common, width(0, 1), target_state(False)]
    plain = [*common, width(0, 1), target_state(True)]
    return Contracts(
        {Mode.SPECULATING: wide, Mode.DRAINING: drain, Mode.PLAIN: plain, Mode.RESYNCING: plain},
        every=every,
    )


class Controller:
    """specfsm inside one scheduler rank."""

    def __init__(
        self,
        worker: Any,
        server_args: Any,
        cfg: Config,
        extensions: Sequence[ControllerExtension] = (),
    ) -> None:
        from sglang.srt.speculative.adaptive_runtime_state import SpecRuntimeState

        self.worker = worker
        self.cfg = cfg
        self.rank = compat.tp_rank()
        self.topk = int(worker.topk)
        self.spec_steps = int(worker.speculative_num_steps)
        self.spec_tokens = int(worker.speculative_num_draft_tokens)
        self.overlap = not bool(getattr(server_args, "disable_overlap_schedule", True))
        dw = worker._draft_worker
        tmr = worker._target_worker.model_runner
        # The K-wide state SGLang built at start-up, registered as upstream's adaptive does.
        self.spec_state = SpecRuntimeState(
            speculative_num_steps=self.spec_steps,
            speculative_num_draft_tokens=self.spec_tokens,
            draft_attn_backend=dw.draft_attn_backend,
            cuda_graph_runner=dw.cuda_graph_runner,
            target_attn_backend=tmr.attn_backend,
            target_graph_runner=tmr.decode_cuda_graph_runner,
            draft_extend_attn_backend=dw.draft_extend_attn_backend,
            cuda_graph_runner_for_draft_extend=dw.cuda_graph_runner_for_draft_extend,
        )
        t0 = time.perf_counter()
        self.plain_state = worker.build_adaptive_runtime_state(
            speculative_num_steps=0, speculative_num_draft_tokens=1, cuda_graph_bs=_graph_bs()
        )
        self.build_plain_s = time.perf_counter() - t0

        # per-iteration bookkeeping read by the actions and the completion events
        self.inflight_wide = 0
        self.resync_left = 0
        self.resync_forwards = cfg.resync_forwards
        self.iteration = 0
        self.running = 0
        self.queued = 0
        self.accept_lens: tuple[int, ...] = ()
        # iterations of the K-wide forwards whose results are not processed yet (oldest first)
        self._wide_its: deque[int] = deque(maxlen=8)
        self._last_correct: list[int] | None = None

        #: called at the points ControllerObserver documents (see there)
        self.observers: list[ControllerObserver] = []
        #: PLAIN's own decode state and lag buffer (config plain="zero_tax"), or None (warm)
        self.zero_tax: ZeroTaxPlain | None = None
        if cfg.plain == "zero_tax":
            from specfsm_sglang.plain import ZeroTaxPlain

            self.zero_tax = ZeroTaxPlain(worker, cfg.lag_tokens, cfg.catchup_tokens)
        actions: Any = SGLangModeActions(
            worker, self.spec_state, self.plain_state, self, self.zero_tax
        )
        for ext in extensions:
            actions = ext.wrap_actions(self, actions)
        # checked (directory created) in the parent; again here for this rank's path
        log_dest = config.prepare_log(cfg.log, self.rank) if cfg.log else None
        self.log = TransitionLog(json_logger(log_dest) if log_dest else None, rank=self.rank)
        initial = Mode[cfg.initial_mode]
        self.fsm = SpecFSM(
            make_policy(cfg.policy),
            actions,
            initial=initial,
            log=self.log,
            observe_every=cfg.observe_every,
            observe_seconds=float(cfg.observe_seconds),
            max_policy_faults=cfg.max_policy_faults,
        )
        # the initial mode's state must be attached before the first forward
        (actions.enter_speculating if initial is Mode.SPECULATING else actions.enter_plain)(None)
        self.contracts = _build_contracts(self, cfg.contracts_every)
        self._subject = _Subject(self)
        self.contract_ns = 0

        self.global_load: GlobalLoad | None = None
        self.tp_group: Any = None  # torch.distributed ProcessGroup (gloo) when tp_size > 1
        try:
            from sglang.srt.runtime_context import get_parallel

            par = get_parallel()
            if int(par.tp_size) > 1:
                self.tp_group = par.tp_group.cpu_group
            if compat.dp_attention(server_args):
                from specfsm_sglang.consensus import GlobalLoad

                self.global_load = GlobalLoad(self.tp_group, int(par.attn_tp_size))
        except Exception:  # single process without published parallel context
            pass

        self.control_file = cfg.control_file
        self.control_every = cfg.control_every
        self._control_sig: tuple[int, ...] | None = None  # (type, mtime_ns, size, inode) seen
        self._policy_faults_seen = 0
        #: mode actions that failed (each one a FAULT transition to PLAIN)
        self.action_failures = 0
        #: control-file polls, and the longest one (ns): the poll must never block
        self.control_polls = 0
        self.control_poll_max_ns = 0
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
                **(
                    self.zero_tax.describe()
                    if self.zero_tax is not None
                    else {"plain": "warm (steps=0: 1-token verify + 1-token draft-extend)"}
                ),
                "build_plain_state_s": round(self.build_plain_s, 3),
                **{k: v for k, v in cfg.as_dict().items() if k != "policy"},
                "policy": self.fsm.policy.describe(),
            }
        )
        for ext in extensions:
            ext.attach(self)

    def start_metrics(self, labels: dict[str, str] | None) -> None:
        """Prometheus series with SGLang's scheduler labels (`compat.metrics_labels`), on the
        rank that exports SGLang's scheduler series; None: this rank exports nothing."""
        from specfsm.fsm.machine import policy_name
        from specfsm_sglang import metrics

        if self.metrics is not None:
            self.metrics.close()
        self.metrics = metrics.maybe_create(labels, self.fsm.mode, policy_name(self.fsm.policy))

    # ------------------------------------------------------------------ hot path
    def before_forward(self, batch: Any) -> None:
        """Decide (and transition if due), emit completion events, check contracts."""
        self.iteration = it = self.iteration + 1
        observers = self.observers
        if observers:
            for o in observers:
                o.before_decide(self, batch)
        if self.control_file is not None and it % self.control_every == 0:
            t0 = time.perf_counter_ns()
            self._poll_control()
            dt = time.perf_counter_ns() - t0
            self.control_polls += 1
            if dt > self.control_poll_max_ns:
                self.control_poll_max_ns = dt
        bs = compat.local_batch_size(batch)
        mean_ctx = 0  # 0: not measured (the log line then has no mean_ctx)
        if getattr(self.fsm.policy, "ctx_aware", False):
            # only a policy priced over several context lengths pays for this (a CPU sum)
            ctx_tokens = compat.context_tokens(batch)
            if self.global_load is not None:
                bs, ctx_tokens = self.global_load.pair(bs, ctx_tokens)
            mean_ctx = ctx_tokens // bs if bs > 0 else 0
        elif self.global_load is not None:
            bs = self.global_load(bs)
        obs = Observation(
            iteration=it,
            decode_bs=bs,
            running=self.running,
            accept_lens=self.accept_lens,
            queued=self.queued,
            rank=self.rank,
            mean_ctx=mean_ctx,
        )
        fsm = self.fsm
        try:
            fsm.step(obs)
            mode = fsm.mode
            if mode is Mode.DRAINING:
                if self.inflight_wide == 0:
                    fsm.process_event(Event.DRAINED, obs, "no K-wide batch in flight")
            elif mode is Mode.RESYNCING and self.resync_left <= 0:
                fsm.process_event(Event.RESYNCED, obs, "draft caught up for every running request")
        except ModeActionError as exc:
            # logged by the machine (specfsm.action_failed + the FAULT transition); the engine
            # keeps serving in PLAIN
            self.action_failures += 1
            for o in observers:
                o.on_fault(self, exc)
        except MachineFailed as exc:
            for o in observers:
                o.on_fault(self, exc)
            raise
        mode = fsm.mode
        sub = self._subject
        sub.batch = batch
        if observers:
            for o in observers:
                o.before_check(self, batch, mode)
        t0 = time.perf_counter_ns()
        self.contracts.check(mode, sub)
        self.contract_ns += time.perf_counter_ns() - t0
        sub.batch = None
        if observers:
            for o in observers:
                o.on_decode(self, batch, mode)

    def after_forward(self, batch: Any, result: Any) -> None:
        wide = self.worker.speculative_num_steps > 0
        if wide:
            self.inflight_wide += 1
            self._wide_its.append(self.iteration)
        elif self.resync_left > 0 and self.zero_tax is None:
            # warm PLAIN: RESYNCING lasts resync_forwards forwards (zero-tax: until the
            # catch-up reports every request caught up, `ZeroTaxPlain.resync_done`)
            self.resync_left -= 1
        if self.observers:
            for o in self.observers:
                o.after_forward(self, batch, result, wide)

    def note_extend(self, batch: Any) -> None:
        """A forward that is not a decode is about to run (only the observers care)."""
        if self.observers:
            for o in self.observers:
                o.on_extend(self, batch)

    def on_verify_complete(self, num_correct_drafts_per_req: list[int]) -> None:
        self._last_correct = num_correct_drafts_per_req

    def after_process_result(self, batch: Any, result: Any) -> None:
        if self.observers:
            for o in self.observers:
                o.on_result(self, batch, result)
        k = getattr(result, "speculative_num_draft_tokens", None)
        if k is None or k <= 1 or batch.forward_mode.is_extend():
            self._last_correct = None
            return
        if self.inflight_wide > 0:
            self.inflight_wide -= 1
        round_it = self._wide_its.popleft() if self._wide_its else self.iteration
        correct = self._last_correct
        if correct is not None:
            self.accept_lens = tuple(n + 1 for n in correct)
            # the observation lines name the K-wide round these accept lengths come from
            self.log.accept_lens_iteration = round_it
            self._last_correct = None

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

    # ------------------------------------------------------------------ runtime control
    def _poll_control(self) -> None:
        """Re-read the control file when it changed (rank 0 reads, every TP rank applies).

        Never blocks: the file is opened only when ``os.stat`` says it is a regular file whose
        (mtime, size, inode) changed and that holds at most MAX_CONTROL_BYTES; a FIFO, a
        directory, a device or an oversized file is refused with one log line, never opened.
        """
        msg: Any = None
        if self.rank == 0:
            msg = self._read_control()
        if self.tp_group is not None:
            from specfsm_sglang.consensus import broadcast_object

            msg = broadcast_object(msg, self.tp_group)
        if msg is None:
            return
        kind, payload = msg
        if kind == "refused":
            self._log_control("refused", payload)
        else:
            self.apply_control(payload)

    def _read_control(self) -> tuple[str, Any] | None:
        """('content', parsed JSON) / ('refused', reason) when the file changed, else None."""
        path = self.control_file or ""
        try:
            st = os.stat(path)
        except FileNotFoundError:
            self._control_sig = None
            return None
        except OSError as exc:
            return self._control_refusal(("error", exc.errno or 0), f"cannot stat: {exc}")
        sig = (stat.S_IFMT(st.st_mode), st.st_mtime_ns, st.st_size, st.st_ino)
        if sig == self._control_sig:
            return None
        self._control_sig = sig
        if not stat.S_ISREG(st.st_mode):
            return (
                "refused",
                f"control_file: {path} is {_file_kind(st.st_mode)}, not a regular "
                "file; it is not opened (nothing may block the scheduler)",
            )
        if st.st_size > config.MAX_CONTROL_BYTES:
            return (
                "refused",
                f"control_file: {path} holds {st.st_size} bytes, more than the "
                f"limit of {config.MAX_CONTROL_BYTES}; not read",
            )
        try:
            # O_NONBLOCK: if the path was swapped for a FIFO since the stat, open returns at once
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            return ("refused", f"control_file: cannot open {path}: {exc.strerror}")
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return ("refused", f"control_file: {path} is not a regular file; not read")
            data = os.read(fd, config.MAX_CONTROL_BYTES + 1)
        except OSError as exc:
            return ("refused", f"control_file: cannot read {path}: {exc.strerror}")
        finally:
            os.close(fd)
        if len(data) > config.MAX_CONTROL_BYTES:
            return ("refused", f"control_file: {path} grew past {config.MAX_CONTROL_BYTES} bytes")
        try:
            return ("content", json.loads(data))
        except ValueError as exc:
            return ("refused", f"control_file: {path} is not JSON: {exc}")

    def _control_refusal(self, sig: tuple[Any, ...], reason: str) -> tuple[str, Any] | None:
        if sig == self._control_sig:
            return None
        self._control_sig = sig
        return ("refused", f"control_file: {reason}")

    def _log_control(self, outcome: str, reason: str, *request: Any) -> None:
        line: dict[str, object] = {"control": outcome, "reason": reason}
        if request:
            line["request"] = request[0]
        self.log.config(line, iteration=self.iteration)

    def apply_control(self, content: Any) -> None:
        """Pin a mode, unpin, or swap the policy, after checking the content with the config's
        schema (and a goodput policy's shape against this server's); every refusal is logged as
        specfsm.config with control=refused and the reason, every change with control=applied."""
        try:
            change = config.parse_control(content)
            if change.kind == "pin":
                policy: Policy = FixedPolicy(change.pin == "SPECULATING")
            elif change.kind == "policy":
                config.check_policy_shape(
                    change.policy, (self.topk, self.spec_steps, self.spec_tokens), "control.policy"
                )
                policy = make_policy(change.policy, key="control.policy")
            else:
                policy = make_policy(self.cfg.policy)  # unpin: back to the configured one
        except ConfigError as exc:
            self._log_control("refused", str(exc), content)
            return
        self.fsm.policy = policy
        self.log.config(
            {"control": "applied", "request": content, "policy": policy.describe()},
            iteration=self.iteration,
        )


def _file_kind(mode: int) -> str:
    kinds = [
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ]
    return next((what for test, what in kinds if test(mode)), "not a regular file")


def _graph_bs() -> list[int] | None:
    """The decode CUDA-graph batch sizes, or None when graphs are off (CPU)."""
    try:
        from sglang.srt.model_executor.cuda_graph_config import (
            Backend,
            Phase,
            check_cuda_graph_backend,
        )
        from sglang.srt.runtime_context import get_exec

        if check_cuda_graph_backend(Phase.DECODE, Backend.DISABLED):
            return None
        bs = get_exec().graph.cuda_graph_bs_decode
        return list(bs) if bs else None
    except Exception:
        return None
