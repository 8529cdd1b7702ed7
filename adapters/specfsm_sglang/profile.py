"""The start-up profile: every shape's and PLAIN's step cost, per batch size, measured in this
engine before it serves (config ``profile``).

Theory of operation. A goodput policy prices each choice from a cost table; a table measured on
another model or GPU misprices it (0.73x the best static choice in the simulator). So, when
asked, the engine measures itself first:

1. At the end of ``Scheduler.__init__`` (before the scheduler reports ready, so no client
   request can arrive), `StartupProfile.run` swaps the controller's policy for a
   `ProfileSchedule`, mutes the detokenizer channel (as on a TP rank other than 0: the profile's
   outputs go nowhere) and runs SGLang's own event loop (overlap or not, as configured).
2. After a warm-up phase at the smallest batch size (first calls, lazy allocations and JIT
   compiles; its samples are dropped), per batch size ``bs`` it submits ``bs`` greedy requests
   of ``prompt_tokens`` synthetic token ids (``ignore_eos``) through the scheduler's input path
   (``request_receiver.recv_requests``).
   The schedule takes the machine through the table: the launch shape, each other shape
   (RESHAPE), back to the launch shape, PLAIN (LOAD_HIGH, DRAINING, DRAINED) and back (LOAD_LOW,
   RESYNCING, RESYNCED), holding each until it measured ``forwards`` decode forwards at ``bs``
   (the first forward after each change is not counted). Its decisions depend on iteration
   counts only, so TP ranks take the same ones.
3. Each decode forward is timed by the controller as when serving (decode-to-decode wall time,
   ``Observation.step_ms``: the forward, the scheduler's work and overlap as served; a prefill
   in between voids the sample). When the phase is complete the schedule asks for an abort of
   every profile request (an ``AbortReq`` through the same input path); the next batch size
   starts at the scheduler's idle check, where SGLang's own memory check runs, so a leaked KV
   slot fails the profile as it would fail serving.
4. After the last batch size the loop stops (``gracefully_exit``, reset after) and the medians
   per (kind, shape, bs) become cost-table rows (`specfsm.model.costs`: ``spec_step_<shape>`` and
   ``plain_step``, or ``plain_warm_step`` with ``plain: "warm"``). Rank 0's rows are broadcast
   to every TP rank, written to ``save`` (or a temporary file), and the configured goodput
   policy is rebuilt with them as its ``profile``: measured shapes are priced as measured, the
   shipped table stays the prior of everything else, online calibration refines both.

What it does not do: it measures at the profile's own context (``prompt_tokens`` plus the
tokens decoded meanwhile; the rows carry the mean), not across contexts (the cost model carries
the rows to another context by its table's own context dependence, `CostTable.whole_step_ms`);
it does not run with DP attention (refused); a batch size whose requests would not fit the
KV pool is skipped and named. ``bs`` defaults to the decode CUDA-graph batch sizes up to
``max_running_requests`` (on CPU, without graphs: 1, 2 and 4).
"""

from __future__ import annotations

import os
import tempfile
import time
from array import array
from typing import TYPE_CHECKING, Any

from specfsm_sglang.controller import ControllerObserver
from specfsm_sglang.paths import prepare_log
from specfsm_sglang.profile_schedule import ProfileResult, ProfileSchedule, profile_rows, rows_csv
from specfsm_sglang.values import ProfileSpec

if TYPE_CHECKING:
    from specfsm_sglang.controller import Controller

#: Every profile request's rid starts with this (one prefix abort ends them all).
RID_PREFIX = "specfsm-profile-"
#: Batch sizes profiled when the engine captured no decode CUDA graphs (CPU).
NO_GRAPH_BS = (1, 2, 4)


# ------------------------------------------------------------------------------ the driver
class _Observer(ControllerObserver):
    """The profile's eyes on the controller: mean context per decode forward; the idle check
    (phase boundaries)."""

    def __init__(self, prof: StartupProfile) -> None:
        self.prof = prof
        self.ctx_sum = 0
        self.ctx_n = 0

    def before_decide(self, ctl: Controller, batch: Any) -> None:
        from specfsm_sglang import compat

        bs = compat.local_batch_size(batch)
        if bs > 0:
            self.ctx_sum += compat.context_tokens(batch) // bs
            self.ctx_n += 1

    def on_idle(self, ctl: Controller) -> None:
        self.prof.on_idle()


class StartupProfile:
    """Runs the profile on one scheduler rank (see the module docstring)."""

    def __init__(self, spec: ProfileSpec, ctl: Controller, scheduler: Any) -> None:
        self.spec = spec
        self.ctl = ctl
        self.scheduler = scheduler
        self.schedule = ProfileSchedule(
            ctl.launch_shape,
            list(ctl.shape_states),
            spec.forwards,
            "plain" if ctl.zero_tax is not None else "warm",
        )
        self._pending: list[Any] = []
        self._todo: list[int] = []
        self._aborted = False
        self._cleaned = False
        self._phase_t0 = 0.0
        self._t0 = 0.0
        self.phases: list[dict[str, object]] = []
        self.skipped: list[str] = []

    # -------------------------------------------------------------- sizes and requests
    def batch_sizes(self) -> list[int]:
        """The batch sizes to profile (configured, or the decode graph sizes), each checked
        against max_running_requests and the KV pool; the rest go to `skipped` with why."""
        sched = self.scheduler
        want = list(self.spec.bs or self.ctl.states.graph_bs or NO_GRAPH_BS)
        cap = int(getattr(sched, "max_running_requests", 0) or 0) or max(want)
        pool = int(getattr(sched, "max_total_num_tokens", 0) or 0)
        per_req = self.spec.prompt_tokens + self.max_new_tokens() + 2 * self._widest_kv()
        out = []
        for bs in sorted(set(want)):
            if bs > cap:
                self.skipped.append(f"bs {bs}: above max_running_requests {cap}")
            elif pool and bs * per_req > 0.8 * pool:
                self.skipped.append(
                    f"bs {bs}: {bs} x {per_req} tokens would take more than 80% of the KV "
                    f"pool ({pool} tokens)"
                )
            else:
                out.append(bs)
        return out

    def _widest_kv(self) -> int:
        from specfsm_sglang.server_checks import kv_per_step

        return max(kv_per_step(s) for s in self.ctl.shape_states)

    def max_new_tokens(self) -> int:
        """Enough tokens for a whole phase at the widest shape's best acceptance, within the
        model's context."""
        n_targets = len(self.schedule.targets)
        forwards = n_targets * (self.spec.forwards + 3) + 8
        per_forward = max(s.steps + 1 for s in self.ctl.shape_states)
        want = forwards * per_forward
        room = int(getattr(self.scheduler, "max_req_len", 0) or 0)
        if room:
            want = min(want, max(1, room - self.spec.prompt_tokens - 4 * self._widest_kv()))
        return want

    def _requests(self, bs: int, phase: int) -> list[Any]:
        from sglang.srt.managers.io_struct import TokenizedGenerateReqInput

        vocab = int(self.scheduler.model_config.vocab_size)
        n = self.spec.prompt_tokens
        max_new = self.max_new_tokens()
        out = []
        for r in range(bs):
            ids = [1 + (r * 7919 + j * 104729 + phase * 31) % max(1, vocab - 2) for j in range(n)]
            out.append(
                _build(
                    TokenizedGenerateReqInput,
                    rid=f"{RID_PREFIX}{phase}-{r}",
                    input_text=None,
                    input_ids=array("q", ids),
                    input_embeds=None,
                    mm_inputs=None,
                    token_type_ids=None,
                    sampling_params=_sampling(max_new, vocab),
                    return_logprob=False,
                    logprob_start_len=-1,
                    top_logprobs_num=0,
                    token_ids_logprob=None,
                    stream=False,
                )
            )
        return out

    # -------------------------------------------------------------- the loop's callbacks
    def recv_requests(self, got: list[Any]) -> list[Any]:
        """What the scheduler's input path returns during the profile: what it received (none:
        the scheduler has not reported ready), the phase's requests, and its abort."""
        if self.schedule.phase_done and not self._aborted and self.schedule.bs:
            from sglang.srt.managers.io_struct import AbortReq

            self._aborted = True
            got.append(_build(AbortReq, rid=RID_PREFIX))
        if self._pending:
            got += self._pending
            self._pending = []
        return got

    def _leftovers(self) -> int:
        """Profile requests still in the scheduler's waiting queue."""
        queue = getattr(self.scheduler, "waiting_queue", None) or []
        return sum(1 for r in queue if str(getattr(r, "rid", "")).startswith(RID_PREFIX))

    def _start_phase(self, bs: int) -> None:
        self.schedule.start(bs)
        self._aborted = False
        self._cleaned = False
        self._phase_t0 = time.perf_counter()
        self._pending = self._requests(bs, len(self.phases))

    def on_idle(self) -> None:
        """The scheduler is idle: the current phase is over; start the next or stop."""
        if self._pending:  # submitted, not yet received
            return
        sched = self.schedule
        if sched.bs and not self._cleaned and self._leftovers():
            # requests the scheduler never admitted (a phase cut short): abort them first, so
            # none is left queued when serving starts
            from sglang.srt.managers.io_struct import AbortReq

            self._cleaned = True
            self._pending = [_build(AbortReq, rid=RID_PREFIX)]
            return
        if sched.bs:
            self.phases.append(
                {
                    "bs": sched.bs,
                    "s": round(time.perf_counter() - self._phase_t0, 3),
                    "complete": sched.phase_done,
                    **({"warm_up": True} if len(self.phases) == 0 else {}),
                }
            )
            if len(self.phases) == 1:  # the warm-up phase: first-call costs, not counted
                sched.samples.clear()
            sched.bs = 0
            sched.phase_done = True
        if self._todo and time.perf_counter() - self._t0 < self.spec.max_seconds:
            self._start_phase(self._todo.pop(0))
            return
        for bs in self._todo:
            self.skipped.append(f"bs {bs}: max_seconds {self.spec.max_seconds:g} spent")
        self._todo = []
        self.scheduler.gracefully_exit = True

    # -------------------------------------------------------------- run
    def run(self) -> ProfileResult:
        ctl, sched = self.ctl, self.scheduler
        self._t0 = time.perf_counter()
        sizes = self.batch_sizes()
        # a warm-up phase at the smallest size first (first calls, lazy allocations, JIT)
        self._todo = [sizes[0], *sizes] if sizes else []
        # the profile's outputs (and aborts) go nowhere, as on a TP rank other than 0
        senders = [sched.ipc_channels.send_to_detokenizer, sched.ipc_channels.send_to_tokenizer]
        sockets = [x.socket for x in senders]
        receiver = sched.request_receiver
        obs = _Observer(self)
        with ctl.installed(self.schedule), ctl.observing(obs):
            for x in senders:
                x.socket = None
            sched.request_receiver = _Receiver(receiver, self)
            try:
                if self._todo:
                    self._start_phase(self._todo.pop(0))
                    sched.run_event_loop()
            finally:
                sched.gracefully_exit = False
                sched.last_batch = None
                sched.request_receiver = receiver
                for x, sock in zip(senders, sockets, strict=True):
                    x.socket = sock
                ctl.flight.forget_step()
        ctx = round(obs.ctx_sum / obs.ctx_n) if obs.ctx_n else self.spec.prompt_tokens
        rows = profile_rows(self.schedule.samples, max(1, ctx))
        if ctl.tp_group is not None:
            from specfsm_sglang.consensus import broadcast_object

            rows = broadcast_object(rows, ctl.tp_group)
        secs = time.perf_counter() - self._t0
        path = self._write(rows, ctx, secs)
        return ProfileResult(rows, path, self.phases, self.skipped, round(secs, 3), ctx)

    def _write(self, rows: list[tuple[str, int, int, int, float]], ctx: int, secs: float) -> str:
        from specfsm_sglang import compat

        header = [
            f"specfsm start-up profile, SGLang {compat.sglang_version()}, rank {self.ctl.rank}",
            f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, {secs:.1f} s; "
            f"launch {self.ctl.launch_shape.label()}, {self.spec.forwards} forwards per point, "
            f"mean context {ctx} tokens, overlap {self.ctl.overlap}",
            "ms_per_step: median decode-to-decode wall time in the scheduler (as served)",
        ]
        text = rows_csv(rows, header)
        if self.spec.save:
            # the log's path rules: "{rank}" replaced, directory created, writable
            path = prepare_log(self.spec.save, self.ctl.rank)
        else:
            fd, path = tempfile.mkstemp(
                prefix=f"specfsm-profile-rank{self.ctl.rank}-", suffix=".csv"
            )
            os.close(fd)
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
        return path


class _Receiver:
    """The scheduler's request receiver during the profile (SGLang's is a frozen dataclass):
    its `recv_requests` adds the profile's requests; everything else is the real one's."""

    def __init__(self, real: Any, prof: StartupProfile) -> None:
        self._real = real
        self._prof = prof

    def recv_requests(self, *args: Any, **kwargs: Any) -> list[Any]:
        return self._prof.recv_requests(list(self._real.recv_requests(*args, **kwargs)))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def _sampling(max_new: int, vocab: int) -> Any:
    from sglang.srt.sampling.sampling_params import SamplingParams

    sp = SamplingParams(max_new_tokens=max_new, temperature=0.0, ignore_eos=True)
    sp.normalize(None)
    sp.verify(vocab)
    return sp


def _build(cls: Any, **values: Any) -> Any:
    """An SGLang IPC struct (msgspec) from `values`; any other required field None (their set
    differs between SGLang versions)."""
    import msgspec

    fields = msgspec.structs.fields(cls)
    names = {f.name for f in fields}
    for f in fields:
        if f.required and f.name not in values:
            values[f.name] = None
    return cls(**{k: v for k, v in values.items() if k in names})
