"""Serving simulator: continuous batching on a step-cost table, every policy side by side.

One *run* serves one load trace with one controller. Each iteration:

1. admission: new requests join (closed loop: up to a target concurrency c(t); open loop:
   Poisson arrivals at rate r(t) wait in a queue) as long as fewer than `max_running` are in
   the system. A new request is prefilled in this iteration (its first token; TTFT ends here)
   and decodes from the next one. Prefill cost: `CostModel.prefill_ms` (target + draft for
   controllers that have a draft).
2. the controller picks what this iteration runs, at decode batch size bs:
   SPEC (a speculative iteration of some draft shape), NO_DRAFT (plain decode of a
   server without a draft), ZERO_TAX (specfsm's zero-tax PLAIN step and TensorRT-LLM's off
   step, `CostModel.zero_tax_ms`: the measured ~1.01x a decode step; draft cold but catchable
   in one RESYNC, see `specfsm.sim.baselines`), WARM (a 1-token
   verify + a 1-token draft-extend that keeps the draft warm: SGLang steps=0, vLLM K=0,
   specfsm's warm PLAIN), RESYNC (a zero-tax PLAIN step + a batched draft-extend over every
   request's lag tokens, `CostModel.resync_ms`; the catch-up is an estimate from the table's
   draft-extend rows, not a measurement), SKIP0 (SGLang steps=0 with
   SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND: priced as `CostModel.zero_tax_ms`, a plain decode
   step; the draft is not extended, its lag grows; see `specfsm.sim.baselines`).
3. cost from the *scoring* CostModel, tokens: SPEC commits 1 + n per request with n sampled
   from the acceptance model (per-depth Bernoulli, `specfsm.acceptance`); others commit 1.
   The uniform a request's verify draws hashes the seed, the request's admission index and
   its tokens so far (`_Decode.uniforms`): common random numbers, so controllers that verify
   the same request at the same position with the same shape accept the same tokens, and
   a comparison is not moved by which draws each happened to consume. Request k's prompt and
   output lengths are a function of k alone (`_Requests.lengths`), however the admissions
   were batched, so two controllers serve the same requests.
   A controller with ``cold_return = True`` (the skip-flag SGLang peer) re-enters cold: a
   request whose draft fell behind (lag > 0) at a SPEC iteration accepts less for its next
   `baselines.COLD_ROUNDS` SPEC rounds (accepted drafts x `baselines.COLD_EXTRA_FACTOR`, the
   CPU test bed's measurement); the other controllers' drafts never re-enter cold (warm steps,
   or a catch-up before SPEC).
4. after the iteration the engine calls ``controller.observe_step(plan, bs, decode_ms)`` (the
   scored decode cost of the iteration, 0 when nothing decoded), then ``controller.after``.

Phases (`run(phase_s=...)`): simulated time is cut into windows of `phase_s` seconds; a run
records the tokens committed by the iterations ending in each window (`RunResult.phase_tokens`)
and every finished request's finish time (`RunResult.finish_t_s`), which is what the per-phase
oracle (`specfsm.sim.oracle`) is built from.

The controllers are in `specfsm.sim.peers`, the load traces in `specfsm.sim.traces`.

numpy is imported lazily (inside `run`), so importing this module needs only the stdlib.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any

from specfsm.model.acceptance import (
    DraftShape,
    accept_length,
    alpha_from_accept_length,
    depth_accept_probs,
)
from specfsm.model.costs import CostModel
from specfsm.sim.baselines import COLD_EXTRA_FACTOR, COLD_ROUNDS
from specfsm.sim.fsm_controller import FSMController
from specfsm.sim.plan import NO_DRAFT, SKIP0, SPEC, WARM, ZERO_TAX, Controller, Plan
from specfsm.sim.result import Meter, RunResult
from specfsm.sim.sglang_peer import SGLangAdaptiveController
from specfsm.sim.traces import Load, Workload

__all__ = ["LENGTH_BLOCK", "RunResult", "run"]


# ------------------------------------------------------------------------------ the engine
#: an open loop's rate is taken as constant over steps of this many simulated seconds
RATE_STEP_S = 0.05
#: past this many steps (a near-zero rate with no end) the rest of the gap is drawn at once
MAX_RATE_STEPS = 1_000_000


class _Arrivals:
    """Who joins in an iteration: closed loop (top up to the target concurrency c(t)) or open
    loop (Poisson arrivals at rate r(t) wait in a queue)."""

    def __init__(self, load: Load, rng: Any) -> None:
        self.load = load
        self.rng = rng
        self.queue: list[float] = []  # arrival times (open loop)
        self.qhead = 0
        self.next_arrival = 0.0

    def take(self, t: float, n_alive: int, cap: int) -> list[float]:
        """The arrival times of the requests admitted at `t` (at most `cap - n_alive`)."""
        level = self.load.level(t)
        if self.load.kind == "concurrency":
            return [t] * max(0, min(round(level) - n_alive, cap - n_alive))
        while self.next_arrival <= t:
            self.queue.append(self.next_arrival)
            self.next_arrival = self._after(self.next_arrival)
        n_new = min(len(self.queue) - self.qhead, cap - n_alive)
        arrivals = self.queue[self.qhead : self.qhead + n_new]
        self.qhead += n_new
        if self.qhead > 4096:
            del self.queue[: self.qhead]
            self.qhead = 0
        return arrivals

    def _after(self, t0: float) -> float:
        """The next arrival after one at `t0`: a unit exponential spent against the rate
        r(t) integrated from `t0`, r held over steps of `RATE_STEP_S`. Drawing the gap at
        r(t0) alone would carry a quiet phase's long gap into a burst, which then starts
        late."""
        e = float(self.rng.exponential(1.0))
        t = t0
        horizon = self.load.duration_s
        for _ in range(MAX_RATE_STEPS):
            if horizon is not None and t >= horizon:
                return math.inf
            rate = max(self.load.level(t), 1e-9)
            if e <= rate * RATE_STEP_S:
                return t + e / rate
            e -= rate * RATE_STEP_S
            t += RATE_STEP_S
        return t + e / max(self.load.level(t), 1e-9)

    def waiting(self) -> int:
        """Arrived requests not yet admitted (open loop; 0 for a closed loop)."""
        return len(self.queue) - self.qhead

    def idle_until(self, t: float, end_t: float) -> float:
        """Nothing runs at `t`: the time to jump to (the next arrival, open loop)."""
        return min(self.next_arrival, end_t) if self.load.kind == "poisson" else t + 0.001


#: request lengths are drawn in blocks of this many admission indices (`_Requests.lengths`)
LENGTH_BLOCK = 4096


class _Requests:
    """The requests in the system, one slot each (numpy arrays of `max_running` slots)."""

    def __init__(self, np: Any, wl: Workload, rng: Any) -> None:
        cap = wl.max_running
        self.np, self.wl, self.rng, self.cap = np, wl, rng, cap
        self.alive = np.zeros(cap, dtype=bool)
        self.remaining = np.zeros(cap, dtype=np.int64)
        self.out_len = np.zeros(cap, dtype=np.int64)
        self.t_first = np.zeros(cap)
        self.t_arrive = np.zeros(cap)
        self.lag = np.zeros(cap, dtype=np.int64)
        # the prompt tokens of a lazy (target-only) prefill until a catch-up: the adapter's
        # deferred-prompt store, told to the policy as Observation.draft_debt
        self.debt = np.zeros(cap, dtype=np.int64)
        self.decoding = np.zeros(cap, dtype=bool)
        self.ctx_len = np.zeros(cap, dtype=np.int64)  # KV length: prompt + committed tokens
        self.cold = np.zeros(cap, dtype=np.int64)  # cold rounds left (skip-flag re-entry)
        self.key = np.zeros(cap, dtype=np.uint64)  # admission index (same across controllers)
        self.n_admitted = 0
        self.free_idx = np.arange(cap)
        self._len_p = np.zeros(0, dtype=np.int64)  # lengths by admission index (`lengths`)
        self._len_o = np.zeros(0, dtype=np.int64)

    def n_alive(self) -> int:
        return int(self.alive.sum())

    def decode_bs(self) -> int:
        return int(self.decoding.sum())

    def draft_debt(self) -> int:
        return int(self.debt[self.alive].sum())

    def mean_ctx(self, bs: int) -> int:
        return int(self.ctx_len[self.decoding].sum()) // bs if bs else 0

    def lengths(self, first: int, n: int) -> tuple[Any, Any]:
        """(prompt, output) lengths of the requests of admission index first..first+n-1: a
        function of the index alone (drawn in fixed blocks of `LENGTH_BLOCK` indices), so every
        controller serves the same request k however its admissions were batched. (Drawing
        prompts then outputs per admitted batch, as before, interleaved the two streams by
        batch: after the first iteration where two controllers admitted differently, request k
        had other lengths, and the sum over a 4000-iteration window of ~1200 requests moved
        tok/s by ~1 % between controllers holding the same state.)"""
        np, wl = self.np, self.wl
        while self._len_p.size < first + n:
            p = self.rng.integers(wl.prompt_len[0], wl.prompt_len[1] + 1, size=LENGTH_BLOCK)
            o = self.rng.integers(wl.output_len[0], wl.output_len[1] + 1, size=LENGTH_BLOCK)
            self._len_p = np.concatenate([self._len_p, p])
            self._len_o = np.concatenate([self._len_o, o])
        return self._len_p[first : first + n], self._len_o[first : first + n]

    def admit(self, arrivals: list[float]) -> tuple[Any, Any]:
        """Give each arrival a slot and its lengths (by admission index, identical across
        controllers: `lengths`); returns (slots, prompt lengths)."""
        n_new = len(arrivals)
        slots = self.free_idx[~self.alive][:n_new]
        if not n_new:
            return slots, None
        p, o = self.lengths(self.n_admitted, n_new)
        self.alive[slots] = True
        self.out_len[slots] = o
        self.remaining[slots] = o - 1
        self.t_arrive[slots] = arrivals
        self.lag[slots] = 0
        self.debt[slots] = 0
        self.cold[slots] = 0
        self.ctx_len[slots] = p
        self.key[slots] = self.np.arange(
            self.n_admitted, self.n_admitted + n_new, dtype=self.np.uint64
        )
        self.n_admitted += n_new
        return slots, p

    def commit(self, t: float, tokens: Any, slots: Any, meter: Meter | None) -> int:
        """Commit this iteration's tokens at time `t`; finished requests leave (their TPOT and
        TTFT go to `meter`, None outside the measured window). Returns the tokens produced."""
        np = self.np
        produced = len(slots)
        dec = self.decoding
        if dec.any():
            before = self.remaining[dec]
            committed = np.minimum(before, tokens)
            produced += int(committed.sum())
            self.remaining[dec] = before - committed
            self.ctx_len[dec] += committed
            done = dec & (self.remaining <= 0)
            if done.any():
                idx = np.flatnonzero(done)
                if meter is not None:
                    meter.finished(np, t, self.t_first[idx], self.t_arrive[idx], self.out_len[idx])
                self.alive[idx] = False
                dec[idx] = False
        if len(slots):
            self.t_first[slots] = t
            single = slots[self.out_len[slots] <= 1]
            if single.size:
                self.alive[single] = False
                if meter is not None:
                    meter.ttfts.extend(((t - self.t_arrive[single]) * 1000.0).tolist())
            dec[slots] = self.alive[slots]
        return produced


class _Decode:
    """Prices one iteration's decode and samples its tokens (acceptance per depth)."""

    def __init__(
        self,
        np: Any,
        rng: Any,
        alpha: float,
        accept_len_fn: Callable[[float], float] | None,
        rho: float,
    ) -> None:
        self.np, self.rng, self.alpha, self.accept_len_fn, self.rho = (
            np,
            rng,
            alpha,
            accept_len_fn,
            rho,
        )
        self._cum: dict[tuple[DraftShape, float], Any] = {}
        self._cold_alpha: dict[tuple[DraftShape, float, str], float] = {}
        self._base = np.uint64(int(rng.integers(0, 2**63)))

    def uniforms(self, reqs: _Requests) -> Any:
        """One uniform per decoding request, a hash (splitmix64) of the run's seed, the
        request's admission index and its tokens so far: common random numbers, so two
        controllers verifying the same request at the same position draw the same number
        (their comparison is not swamped by which draws each happened to consume)."""
        np = self.np
        dec = reqs.decoding
        pos = (reqs.out_len[dec] - reqs.remaining[dec]).astype(np.uint64)
        z = self._base + reqs.key[dec] * np.uint64(0x9E3779B97F4A7C15)
        z = z + pos * np.uint64(0xD1B54A32D192ED03)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
        return (z >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)

    def cum_for(self, shape: DraftShape, a: float) -> Any:
        key = (shape, round(a, 4))
        c = self._cum.get(key)
        if c is None:
            c = self.np.cumprod(self.np.array(depth_accept_probs(a, shape, self.rho)))
            self._cum[key] = c
        return c

    def run(
        self, plan: Plan, bs: int, t: float, cost: CostModel, reqs: _Requests, ctl: Controller
    ) -> tuple[float, Any, int]:
        """(ms, tokens per request, tokens in all) of the decode at batch size `bs` (> 0)."""
        dec = reqs.decoding
        kind = plan.kind
        if kind == SPEC:
            shape = plan.shape
            assert shape is not None
            a = self.alpha if self.accept_len_fn is None else self.accept_len_fn(t)
            ms = cost.spec_ms(bs, shape)
            u = self.uniforms(reqs)
            cum = self.cum_for(shape, a)
            tokens = (u[:, None] < cum[None, :]).sum(axis=1) + 1
            if getattr(ctl, "cold_return", False):
                tokens = self._cold(tokens, u, shape, a, reqs)
            ctl.feed(shape, float(tokens.mean()), bs)
            reqs.lag[dec] = 0
            reqs.debt[dec] = 0
            return ms, tokens, int(tokens.sum())
        if kind == NO_DRAFT:
            reqs.lag[dec] += 1
            return cost.plain_ms(bs), 1, bs
        if kind in (ZERO_TAX, SKIP0):
            reqs.lag[dec] += 1
            if kind == SKIP0 and isinstance(ctl, SGLangAdaptiveController):
                ctl.feed_steps0(bs)
            return cost.zero_tax_ms(bs), 1, bs
        if kind == WARM:
            if isinstance(ctl, SGLangAdaptiveController):
                ctl.feed_steps0(bs)
            return cost.warm_ms(bs), 1, bs
        # RESYNC: a zero-tax PLAIN step + a batched draft-extend over every request's lag
        lag_total = int(reqs.lag[dec].sum()) + bs
        reqs.lag[dec] = 0
        reqs.debt[dec] = 0
        return cost.resync_ms(bs, lag_total), 1, bs

    def cold_alpha(self, shape: DraftShape, a: float) -> float:
        """The alpha whose accept length for `shape` has `COLD_EXTRA_FACTOR` x the accepted
        drafts of alpha `a`'s (a cold round after the skip flag's steps=0)."""
        key = (shape, round(a, 4), "cold")
        c = self._cold_alpha.get(key)
        if c is None:
            acc = accept_length(a, shape, self.rho)
            c = alpha_from_accept_length(1.0 + COLD_EXTRA_FACTOR * (acc - 1.0), shape, self.rho)
            self._cold_alpha[key] = c
        return c

    def _cold(self, tokens: Any, u: Any, shape: DraftShape, a: float, reqs: _Requests) -> Any:
        """Re-sample the tokens of the cold rows of this SPEC iteration (the same uniforms,
        the cold alpha), and count their cold rounds down."""
        np = self.np
        dec = reqs.decoding
        lag = reqs.lag[dec]
        cold = reqs.cold[dec]
        cold = np.where(lag > 0, COLD_ROUNDS, cold)
        rows = cold > 0
        if rows.any():
            cum = self.cum_for(shape, self.cold_alpha(shape, a))
            tokens = tokens.copy()
            tokens[rows] = (u[rows][:, None] < cum[None, :]).sum(axis=1) + 1
        reqs.cold[dec] = np.maximum(cold - 1, 0)
        return tokens


def run(
    controller: Controller,
    load: Load,
    cost: CostModel,
    alpha: float,
    *,
    workload: Workload | None = None,
    seed: int = 0,
    iterations: int | None = None,
    warmup_iterations: int = 0,
    record_timeline: bool = False,
    rho: float = 0.5,
    accept_len_fn: Callable[[float], float] | None = None,
    lazy_draft_prefill: bool = False,
    tpot_window_s: float = 1.0,
    phase_s: float | None = None,
) -> RunResult:
    """Serve `load` with `controller`, costs from `cost`, per-token acceptance `alpha`.

    Stops at `load.duration_s` (simulated) or after `iterations`. Statistics cover iterations
    after `warmup_iterations` (throughput over that window; requests finishing in it).
    `accept_len_fn(t)` may override alpha over time (returns alpha at simulated time t).
    `lazy_draft_prefill`: in a cold PLAIN iteration, prefill the target only and count the
    prompt as lag for the next catch-up (default False: SGLang 0.5.23 always runs the spec
    prefill path, draft included, so the draft pays its prefill even while PLAIN). A
    controller's own `lazy_draft_prefill` attribute turns it on for that controller too.
    `tpot_window_s`: the wall-clock window of `RunResult.tpot_wall_avg`.
    `phase_s`: record the tokens committed per phase of that many simulated seconds
    (`RunResult.phase_tokens`, from t = 0: warm-up iterations count too).
    """
    import numpy as np

    wl = workload if workload is not None else Workload()
    if iterations is None and load.duration_s is None:
        raise ValueError("run: give iterations or a load with duration_s")
    reqs = _Requests(np, wl, np.random.default_rng([seed, 1]))
    decode = _Decode(np, np.random.default_rng([seed, 2]), alpha, accept_len_fn, rho)
    arrivals = _Arrivals(load, np.random.default_rng([seed, 3]))
    meter = Meter(record_timeline, tpot_window_s, phase_s or 0.0)
    ctx_aware = len(cost.contexts) > 1  # several contexts: price at the batch's mean KV length
    is_fsm = isinstance(controller, FSMController)
    lazy = lazy_draft_prefill or controller.lazy_draft_prefill
    debt_to = controller if lazy and isinstance(controller, FSMController) else None
    end_t = load.duration_s if load.duration_s is not None else math.inf
    max_it = iterations if iterations is not None else sys.maxsize
    accept_lens: tuple[int, ...] = ()
    t = 0.0
    it = 0
    while t < end_t and it < max_it:
        new = arrivals.take(t, reqs.n_alive(), reqs.cap)
        bs = reqs.decode_bs()
        if bs == 0 and not new:
            t = arrivals.idle_until(t, end_t)
            continue
        slots, prompts = reqs.admit(new)
        mean_ctx = reqs.mean_ctx(bs)
        prefill_tokens = int(prompts.sum()) if new else 0
        if debt_to is not None:
            debt_to.draft_debt = reqs.draft_debt()
        if prefill_tokens and controller.wants_prefills:
            # SGLang's prefill forward runs before the decode: its observation comes first
            controller.observe_prefill(it, bs, len(new), prefill_tokens, arrivals.waiting())
        plan = controller.plan(it, bs, len(new), accept_lens if is_fsm else (), mean_ctx)
        # prefill: through the draft too unless this PLAIN iteration leaves it cold (lazy)
        with_draft = controller.has_draft and not (lazy and plan.kind in (NO_DRAFT, ZERO_TAX))
        ms = cost.prefill_ms(prefill_tokens, with_draft) if prefill_tokens else 0.0
        if new and not with_draft and controller.has_draft:
            reqs.lag[slots] = prompts
            reqs.debt[slots] = prompts
        tokens: Any = 1
        n_tok = bs
        decode_ms = 0.0
        if bs:
            step_cost = cost.at_ctx_bucket(mean_ctx) if ctx_aware else cost
            decode_ms, tokens, n_tok = decode.run(plan, bs, t, step_cost, reqs, controller)
            ms += decode_ms
            if is_fsm:  # what the policy sees next iteration: this iteration's verifies
                accept_lens = tuple(tokens.tolist()) if plan.kind == SPEC else ()
        controller.observe_step(plan, bs, decode_ms)
        controller.after(plan)
        in_window = it >= warmup_iterations
        meter.switch(controller, plan, in_window)
        dt = ms / 1000.0
        t += dt
        if it == warmup_iterations:
            meter.win_t0 = t - dt
        meter.iteration(t, dt, ms, bs, n_tok, plan, in_window)
        produced = reqs.commit(t, tokens, slots, meter if in_window else None)
        meter.phase_add(t, produced)
        if in_window:
            meter.win_tokens += produced
        it += 1
    return meter.result(controller, load, max(0, it - warmup_iterations), t)
