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
tokens decoded meanwhile; the rows carry the mean), not across contexts; it does not run with
DP attention (refused); a batch size whose requests would not fit the KV pool is skipped and
named. ``bs`` defaults to the decode CUDA-graph batch sizes up to ``max_running_requests``
(on CPU, without graphs: 1, 2 and 4).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from array import array
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from specfsm import Event, Mode, Observation
from specfsm.fsm.table import toward_shape
from specfsm.model.acceptance import DraftShape
from specfsm.model.costs import (
    COLUMNS,
    PLAIN_STEP_MODEL,
    PLAIN_WARM_MODEL,
    SPEC_STEP_PREFIX,
    spec_step_model,
    step_model_shape,
)
from specfsm.policy.goodput import STEP_PLAIN, STEP_SPEC, STEP_WARM
from specfsm_sglang.controller import ControllerObserver
from specfsm_sglang.paths import prepare_log
from specfsm_sglang.values import ProfileSpec

if TYPE_CHECKING:
    from specfsm_sglang.controller import Controller

#: Every profile request's rid starts with this (one prefix abort ends them all).
RID_PREFIX = "specfsm-profile-"
#: Batch sizes profiled when the engine captured no decode CUDA graphs (CPU).
NO_GRAPH_BS = (1, 2, 4)
#: A phase that has not finished after this many decode forwards per target is cut short.
MAX_FORWARDS_PER_TARGET = 64


# ------------------------------------------------------------------------------ the schedule
class ProfileSchedule:
    """The profile's policy: per phase (one batch size) hold each target until it measured
    `forwards` decode forwards at that batch size, then come home to the launch shape in
    SPECULATING; `phase_done` then asks the driver to end the phase. Targets: the launch shape,
    the other shapes, the launch shape again (RESHAPE), PLAIN (None). A pure function of what it
    observed (iterations, batch sizes, modes): TP ranks decide alike."""

    def __init__(
        self, home: DraftShape, shapes: Sequence[DraftShape], forwards: int, plain_kind: str
    ) -> None:
        self.home = home
        others = [s for s in shapes if s != home]
        self.targets: list[DraftShape | None] = [home, *others, None]
        self.forwards = forwards
        self.plain_kind = plain_kind
        self.next_shape: DraftShape | None = None
        self.last_reason = ""
        #: (kind, shape or None, bs) -> measured ms (the first forward after a change left out)
        self.samples: dict[tuple[str, DraftShape | None, int], list[float]] = {}
        self.bs = 0
        self.phase_done = True
        self._i = 0
        self._run: tuple[str, DraftShape | None, int] | None = None
        self._forwards = 0

    def start(self, bs: int) -> None:
        """A new phase at batch size `bs`."""
        self.bs = bs
        self.phase_done = False
        self._i = 0
        self._run = None
        self._forwards = 0

    def _key(self, want: DraftShape | None) -> tuple[str, DraftShape | None, int]:
        return ("spec", want, self.bs) if want is not None else (self.plain_kind, None, self.bs)

    def _record(self, obs: Observation) -> None:
        if obs.step_ms <= 0.0 or obs.step_bs <= 0:
            self._run = None
            return
        key = (obs.step_kind, obs.step_shape, obs.step_bs)
        if key != self._run:  # the first forward after a change: not counted
            self._run = key
            return
        self.samples.setdefault(key, []).append(obs.step_ms)

    def decide(self, mode: Mode, obs: Observation) -> Event | None:
        if self.phase_done:
            return None
        self._record(obs)
        self._forwards += 1
        if self._forwards > MAX_FORWARDS_PER_TARGET * len(self.targets):
            self._i = len(self.targets)  # cut short: come home
        while self._i < len(self.targets):
            if len(self.samples.get(self._key(self.targets[self._i]), ())) < self.forwards:
                break
            self._i += 1
        want = self.targets[self._i] if self._i < len(self.targets) else self.home
        ev = toward_shape(mode, obs.shape, want)
        if ev is Event.RESHAPE:
            self.next_shape = want
        if ev is None and self._i >= len(self.targets) and mode is Mode.SPECULATING:
            self.phase_done = True
        if ev is not None:
            label = "PLAIN" if want is None else want.label()
            self.last_reason = f"start-up profile: bs={self.bs}, target {label}"
        return ev

    def describe(self) -> dict[str, object]:
        return {
            "policy": "startup_profile",
            "targets": ["PLAIN" if t is None else t.label() for t in self.targets],
            "forwards": self.forwards,
        }


#: The cost-table model of each measured PLAIN step kind (`Observation.step_kind`).
OFF_STEP_MODELS = {STEP_PLAIN: PLAIN_STEP_MODEL, STEP_WARM: PLAIN_WARM_MODEL}


def profile_rows(
    samples: dict[tuple[str, DraftShape | None, int], list[float]], ctx: int
) -> list[tuple[str, int, int, int, float]]:
    """Cost-table rows (`specfsm.model.costs.COLUMNS`) from the schedule's samples: the median
    per (kind, shape, bs); kinds the table format has no model for (RESYNCING's) are left out."""
    rows: list[tuple[str, int, int, int, float]] = []
    for (kind, shape, bs), ms in sorted(samples.items(), key=lambda kv: _sort_key(kv[0])):
        if not ms:
            continue
        med = round(statistics.median(ms), 4)
        if kind == STEP_SPEC and shape is not None:
            rows.append((spec_step_model(shape), bs, shape.draft_tokens, ctx, med))
        elif kind in OFF_STEP_MODELS:
            rows.append((OFF_STEP_MODELS[kind], bs, 1, ctx, med))
    return rows


def seed_calibration(policy: Any, rows: Sequence[tuple[str, int, int, int, float]]) -> int:
    """Mark every profiled (kind, shape, bs) as measured in a calibrating goodput policy (its
    ``calibration``, factor 1: the rows are its prior now), so it does not spend iterations
    probing what the profile measured; returns the points seeded (0: nothing to seed)."""
    cal = getattr(policy, "calibration", None)
    if cal is None:
        return 0
    off_kinds = {m: k for k, m in OFF_STEP_MODELS.items()}
    n = 0
    for model, bs, _q, _ctx, _ms in rows:
        if model.startswith(SPEC_STEP_PREFIX):
            shape = step_model_shape(model)
            if shape is not None:
                cal.observe(STEP_SPEC, shape, bs, 1.0)
                n += 1
        elif model in off_kinds:
            cal.observe(off_kinds[model], None, bs, 1.0)
            n += 1
    return n


def _sort_key(key: tuple[str, DraftShape | None, int]) -> tuple[str, int, int, int, int]:
    kind, s, bs = key
    return (kind, s.topk if s else 0, s.steps if s else 0, s.draft_tokens if s else 0, bs)


def rows_csv(rows: Sequence[tuple[str, int, int, int, float]], header: Sequence[str]) -> str:
    lines = [f"# {h}" for h in header]
    lines.append(",".join(COLUMNS))
    lines += [f"{m},{bs},{q},{ctx},{ms}" for m, bs, q, ctx, ms in rows]
    return "\n".join(lines) + "\n"


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


@attrs.frozen
class ProfileResult:
    """What the profile measured: rows, where they were written, per-phase notes, seconds."""

    rows: list[tuple[str, int, int, int, float]]
    path: str
    phases: list[dict[str, object]]
    skipped: list[str]
    seconds: float
    ctx: int


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
        want = list(self.spec.bs or self.ctl.graph_bs or NO_GRAPH_BS)
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
        saved_policy = ctl.fsm.policy
        # the profile's outputs (and aborts) go nowhere, as on a TP rank other than 0
        senders = [sched.ipc_channels.send_to_detokenizer, sched.ipc_channels.send_to_tokenizer]
        sockets = [x.socket for x in senders]
        receiver = sched.request_receiver
        obs = _Observer(self)
        ctl.fsm.policy = self.schedule
        for x in senders:
            x.socket = None
        sched.request_receiver = _Receiver(receiver, self)
        ctl.observers.append(obs)
        try:
            if self._todo:
                self._start_phase(self._todo.pop(0))
                sched.run_event_loop()
        finally:
            sched.gracefully_exit = False
            sched.last_batch = None
            ctl.observers.remove(obs)
            sched.request_receiver = receiver
            for x, sock in zip(senders, sockets, strict=True):
                x.socket = sock
            ctl.fsm.policy = saved_policy
            ctl._prev_t = 0.0
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
