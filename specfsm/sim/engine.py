"""Serving simulator: continuous batching on a step-cost table, every policy side by side.

One *run* serves one load trace with one controller. Each iteration:

1. admission: new requests join (closed loop: up to a target concurrency c(t); open loop:
   Poisson arrivals at rate r(t) wait in a queue) as long as fewer than `max_running` are in
   the system. A new request is prefilled in this iteration (its first token; TTFT ends here)
   and decodes from the next one. Prefill cost: `CostModel.prefill_ms` (target + draft for
   controllers that have a draft).
2. the controller picks what this iteration runs, at decode batch size bs:
   SPEC (a speculative iteration of some draft shape), PLAIN (plain decode, draft cold),
   WARM (plain decode + a K=1 draft-extend that keeps the draft warm: SGLang steps=0,
   vLLM K=0, specfsm's PLAIN as the SGLang adapter ships it), RESYNC (plain decode + a
   batched draft-extend over every request's lag tokens).
3. cost from the *scoring* CostModel, tokens: SPEC commits 1 + n per request with n sampled
   from the acceptance model (per-depth Bernoulli, `specfsm.acceptance`); others commit 1.

The controllers are in `specfsm.sim.peers`, the load traces in `specfsm.sim.traces`.

numpy is imported lazily (inside `run`), so importing this module needs only the stdlib.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from specfsm.fsm.table import Mode
from specfsm.model.acceptance import (
    DraftShape,
    depth_accept_probs,
)
from specfsm.model.costs import (
    CostModel,
)
from specfsm.sim.peers import (
    PLAIN,
    SPEC,
    WARM,
    Controller,
    FSMController,
    SGLangAdaptiveController,
)
from specfsm.sim.traces import Load, Workload


# ------------------------------------------------------------------------------ results
@attrs.define
class RunResult:
    policy: str
    load: str
    iterations: int
    sim_time_s: float
    output_tokens: int
    tok_s: float
    tpot_ms: list[float]
    ttft_ms: list[float]
    switches: int
    mode_time_s: dict[str, float]
    timeline: list[tuple[float, int, str]] | None = None
    decode_ms: list[float] = attrs.Factory(list)  # per finished request, aligned with tpot_ms
    decode_tokens: list[int] = attrs.Factory(list)  # per finished request: output tokens - 1
    #: per wall-clock window (`run(tpot_window_s=...)`) with decoding requests: request-ms
    #: spent decoding / tokens committed in it, i.e. that window's TPOT
    window_tpot_ms: list[float] = attrs.Factory(list)

    @property
    def switches_per_100(self) -> float:
        return 100.0 * self.switches / max(1, self.iterations)

    def pct(self, xs: Sequence[float], q: float) -> float:
        if not xs:
            return float("nan")
        s = sorted(xs)
        i = min(len(s) - 1, max(0, math.ceil(q / 100 * len(s)) - 1))
        return s[i]

    @property
    def tpot_time_weighted(self) -> float:
        """Per-request TPOT weighted by the request's decode duration (kept for comparison; it
        still counts requests, so high-load phases dominate it: see `tpot_wall_avg`)."""
        tot = sum(self.decode_ms)
        if not tot:
            return float("nan")
        return sum(tp * d for tp, d in zip(self.tpot_ms, self.decode_ms, strict=True)) / tot

    @property
    def tpot_mean(self) -> float:
        """The issue's "mean TPOT": mean over finished requests of decode time / (tokens - 1)."""
        return sum(self.tpot_ms) / len(self.tpot_ms) if self.tpot_ms else float("nan")

    @property
    def tpot_token_weighted(self) -> float:
        """Mean gap between consecutive output tokens over all tokens: sum of decode times /
        sum of (tokens - 1). Requests with more tokens weigh more."""
        n = sum(self.decode_tokens)
        return sum(self.decode_ms) / n if n else float("nan")

    @property
    def tpot_wall_avg(self) -> float:
        """TPOT averaged over wall-clock windows: each window's TPOT (sum of dt x decoding bs /
        tokens committed in the window) weighs the same, however many requests ran in it."""
        w = self.window_tpot_ms
        return sum(w) / len(w) if w else float("nan")

    def mode_frac(self) -> dict[str, float]:
        tot = sum(self.mode_time_s.values()) or 1.0
        return {m.value: self.mode_time_s.get(m.value, 0.0) / tot for m in Mode}

    def row(self) -> dict[str, object]:
        return {
            "policy": self.policy,
            "load": self.load,
            "tok_s": round(self.tok_s, 1),
            "tpot_mean_ms": round(self.tpot_mean, 3),
            "tpot_token_weighted_ms": round(self.tpot_token_weighted, 3),
            "tpot_wall_avg_ms": round(self.tpot_wall_avg, 3),
            "tpot_duration_weighted_ms": round(self.tpot_time_weighted, 3),
            "tpot_p50_ms": round(self.pct(self.tpot_ms, 50), 3),
            "tpot_p99_ms": round(self.pct(self.tpot_ms, 99), 3),
            "ttft_p50_ms": round(self.pct(self.ttft_ms, 50), 2),
            "ttft_p99_ms": round(self.pct(self.ttft_ms, 99), 2),
            "switches_per_100": round(self.switches_per_100, 3),
            "iterations": self.iterations,
            "requests": len(self.tpot_ms),
            **{f"time_{m.lower()}": round(v, 4) for m, v in self.mode_frac().items()},
        }


# ------------------------------------------------------------------------------ the engine
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
    """
    import numpy as np

    wl = workload if workload is not None else Workload()
    if iterations is None and load.duration_s is None:
        raise ValueError("run: give iterations or a load with duration_s")
    cap = wl.max_running
    req_rng = np.random.default_rng([seed, 1])
    acc_rng = np.random.default_rng([seed, 2])
    arr_rng = np.random.default_rng([seed, 3])

    alive = np.zeros(cap, dtype=bool)
    remaining = np.zeros(cap, dtype=np.int64)
    out_len = np.zeros(cap, dtype=np.int64)
    t_first = np.zeros(cap)
    t_arrive = np.zeros(cap)
    lag = np.zeros(cap, dtype=np.int64)
    decoding = np.zeros(cap, dtype=bool)
    ctx_len = np.zeros(cap, dtype=np.int64)  # KV length per request: prompt + committed tokens
    # a table over several contexts prices each iteration at its batch's mean KV length
    ctx_aware = len(cost.contexts) > 1

    # request stream: lengths drawn in arrival order (identical across controllers)
    def draw(n: int) -> tuple[Any, Any]:
        p = req_rng.integers(wl.prompt_len[0], wl.prompt_len[1] + 1, size=n)
        o = req_rng.integers(wl.output_len[0], wl.output_len[1] + 1, size=n)
        return p, o

    queue: list[float] = []  # arrival times (open loop)
    next_arrival = 0.0
    qhead = 0

    cum_cache: dict[tuple[DraftShape, float], Any] = {}

    def cum_for(shape: DraftShape, a: float) -> Any:
        key = (shape, round(a, 4))
        c = cum_cache.get(key)
        if c is None:
            c = np.cumprod(np.array(depth_accept_probs(a, shape, rho)))
            cum_cache[key] = c
        return c

    t = 0.0
    it = 0
    out_tokens = 0
    win_tokens = 0
    win_t0 = 0.0
    switches = 0
    last_sig: object = None
    mode_time = dict.fromkeys(Mode, 0.0)
    tpots: list[float] = []
    decode_ms: list[float] = []
    decode_tokens: list[int] = []
    win_req_ms: dict[int, float] = {}  # wall-clock window -> request-ms spent decoding
    win_tok: dict[int, int] = {}  # wall-clock window -> tokens committed to decoding requests
    ttfts: list[float] = []
    timeline: list[tuple[float, int, str]] | None = [] if record_timeline else None
    accept_lens: tuple[int, ...] = ()
    is_fsm = isinstance(controller, FSMController)
    is_sgl = isinstance(controller, SGLangAdaptiveController)
    end_t = load.duration_s if load.duration_s is not None else math.inf
    max_it = iterations if iterations is not None else sys.maxsize
    free_idx = np.arange(cap)
    lazy = lazy_draft_prefill or controller.lazy_draft_prefill

    while t < end_t and it < max_it:
        # ---------------- admission
        n_alive = int(alive.sum())
        level = load.level(t)
        if load.kind == "concurrency":
            n_new = max(0, min(round(level) - n_alive, cap - n_alive))
            arrivals = [t] * n_new
        else:
            while next_arrival <= t:
                queue.append(next_arrival)
                rate = max(load.level(next_arrival), 1e-9)
                next_arrival += float(arr_rng.exponential(1.0 / rate))
            n_new = min(len(queue) - qhead, cap - n_alive)
            arrivals = queue[qhead : qhead + n_new]
            qhead += n_new
            if qhead > 4096:
                del queue[:qhead]
                qhead = 0
        bs = int(decoding.sum())
        if bs == 0 and n_new == 0:
            # idle: jump to the next arrival
            t = min(next_arrival, end_t) if load.kind == "poisson" else t + 0.001
            continue
        new_slots = free_idx[~alive][:n_new]
        prefill_tokens = 0
        if n_new:
            p, o = draw(n_new)
            prefill_tokens = int(p.sum())
            alive[new_slots] = True
            out_len[new_slots] = o
            remaining[new_slots] = o - 1
            t_arrive[new_slots] = arrivals
            lag[new_slots] = 0
            ctx_len[new_slots] = p

        # ---------------- controller
        mean_ctx = int(ctx_len[decoding].sum()) // bs if bs else 0
        plan = controller.plan(it, bs, n_new, accept_lens if is_fsm else (), mean_ctx)
        kind = plan.kind
        with_draft = controller.has_draft and not (lazy and kind == PLAIN)
        ms = cost.prefill_ms(prefill_tokens, with_draft) if prefill_tokens else 0.0
        step_cost = cost.at_ctx_bucket(mean_ctx) if ctx_aware and bs else cost
        if n_new and not with_draft and controller.has_draft:
            lag[new_slots] = p
        tokens: Any = 1
        n_tok = bs
        if bs:
            if kind == SPEC:
                shape = plan.shape
                assert shape is not None
                a = alpha if accept_len_fn is None else accept_len_fn(t)
                ms += step_cost.spec_ms(bs, shape)
                u = acc_rng.random(bs)
                n_acc = (u[:, None] < cum_for(shape, a)[None, :]).sum(axis=1)
                tokens_arr = n_acc + 1
                mean_acc = float(tokens_arr.mean())
                if is_fsm:
                    accept_lens = tuple(tokens_arr.tolist())
                controller.feed(shape, mean_acc, bs)
                lag[decoding] = 0
                tokens = tokens_arr
                n_tok = int(tokens_arr.sum())
            elif kind == PLAIN:
                ms += step_cost.plain_ms(bs)
                lag[decoding] += 1
                accept_lens = ()
            elif kind == WARM:
                ms += step_cost.steps0_ms(bs)
                accept_lens = ()
                if is_sgl:
                    controller.feed_steps0(bs)  # type: ignore[attr-defined]
            else:  # RESYNC
                lag_total = int(lag[decoding].sum()) + bs
                ms += step_cost.resync_ms(bs, lag_total)
                lag[decoding] = 0
                accept_lens = ()
        controller.after(plan)
        in_window = it >= warmup_iterations
        # switches inside the measured window only (like `iterations`)
        if is_fsm:
            if (plan.mode is Mode.DRAINING or plan.mode is Mode.RESYNCING) and in_window:
                switches += 1
        else:
            sig: object = (
                (plan.shape.steps if plan.shape is not None else 0) if is_sgl else kind == SPEC
            )
            if last_sig is not None and sig != last_sig and in_window:
                switches += 1
            last_sig = sig

        dt = ms / 1000.0
        t += dt
        if it == warmup_iterations:
            win_t0 = t - dt
        mode_time[plan.mode] += dt if in_window else 0.0
        if in_window and bs:
            w = int((t - dt - win_t0) / tpot_window_s)
            win_req_ms[w] = win_req_ms.get(w, 0.0) + ms * bs
            win_tok[w] = win_tok.get(w, 0) + n_tok
        if timeline is not None:
            timeline.append((t, bs, plan.mode.value))

        # ---------------- commit tokens
        produced = n_new
        if bs:
            before = remaining[decoding]
            committed = np.minimum(before, tokens)
            produced += int(committed.sum())
            remaining[decoding] = before - committed
            ctx_len[decoding] += committed
            done = decoding & (remaining <= 0)
            if done.any():
                idx = np.flatnonzero(done)
                if in_window:
                    ol = out_len[idx]
                    tp = (t - t_first[idx]) / np.maximum(ol - 1, 1) * 1000.0
                    tpots.extend(tp.tolist())
                    decode_ms.extend(((t - t_first[idx]) * 1000.0).tolist())
                    decode_tokens.extend(np.maximum(ol - 1, 1).tolist())
                    ttfts.extend(((t_first[idx] - t_arrive[idx]) * 1000.0).tolist())
                alive[idx] = False
                decoding[idx] = False
        if n_new:
            t_first[new_slots] = t
            single = new_slots[out_len[new_slots] <= 1]
            if single.size:
                alive[single] = False
                if in_window:
                    ttfts.extend(((t - t_arrive[single]) * 1000.0).tolist())
            decoding[new_slots] = alive[new_slots]
        out_tokens += produced
        if in_window:
            win_tokens += produced
        it += 1

    window_s = max(t - win_t0, 1e-9)
    return RunResult(
        policy=controller.name,
        load=load.name,
        iterations=max(0, it - warmup_iterations),
        sim_time_s=window_s,
        output_tokens=win_tokens,
        tok_s=win_tokens / window_s,
        tpot_ms=tpots,
        ttft_ms=ttfts,
        switches=switches,
        mode_time_s={m.value: v for m, v in mode_time.items()},
        timeline=timeline,
        decode_ms=decode_ms,
        decode_tokens=decode_tokens,
        window_tpot_ms=[win_req_ms[w] / win_tok[w] for w in sorted(win_req_ms) if win_tok[w]],
    )
