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

Controllers: `FixedController` (no-spec / always-spec), `FSMController` (a specfsm Policy run
through the real FSM: `specfsm.machine.SpecFSM` when importable, else the TRANSITIONS table),
in one of two PLAIN variants:

* ``plain="warm"`` (what the SGLang adapter ships, adapters/specfsm_sglang/actions.py):
  DRAINING, PLAIN and RESYNCING all run the 1-wide steps=0 runtime state, i.e. a WARM
  iteration (K=1 verify + 1-token draft-extend); DRAINING lasts one forward then DRAINED;
  RESYNCING lasts one forward (`resync_forwards` = 1) then RESYNCED. New requests are
  prefilled through the draft too (the draft must stay warm).
* ``plain="zero-tax"`` (the follow-up issue's design target): DRAINING is one WARM forward as
  above; PLAIN is a plain decode (no draft work; the draft's lag grows); RESYNCING is one
  RESYNC iteration (plain + batched catch-up draft-extend over the lag). With
  ``lazy_draft_prefill`` requests admitted while PLAIN are prefilled by the target only and
  their prompt joins the lag.

`SGLangAdaptiveController` (0.5.23 `adaptive_spec_params.py` ported: per-BS slots after CUDA
graph padding, EMA 0.2, warmup 10, interval 5, hysteresis, steps=0 probing, steps=0 pays a
K=1 verify + draft-extend every step; topk != 1 makes SGLang disable adaptive and run the
launch shape statically, `adaptive_unsupported_reason`), `BatchTableController` (vLLM DSD:
K by the number of scheduled requests incl. prefills, no hysteresis, K=0 keeps running the
draft at q=1),
`MaxConcurrencyController` (TensorRT-LLM: spec iff active requests <= max_concurrency, no
hysteresis; off is a true plain decode, re-enable pays the same catch-up as RESYNCING).

numpy is imported lazily (inside `run`), so importing this module needs only the stdlib.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from specfsm.acceptance import DraftShape, depth_accept_probs
from specfsm.costs import PLAIN_WARM, CostModel, check_plain_variant
from specfsm.observation import Observation
from specfsm.policies import Policy
from specfsm.table import INITIAL_MODE, TRANSITIONS, Event, Mode

# Iteration kinds.
SPEC, PLAIN, WARM, RESYNC = "spec", "plain", "warm", "resync"
#: Mode labels used for time accounting (specfsm's modes; peers map onto them).
MODE_NAMES = ("SPECULATING", "DRAINING", "PLAIN", "RESYNCING")


# ------------------------------------------------------------------------------ loads
@attrs.frozen
class Load:
    """A load trace: closed-loop target concurrency or open-loop Poisson rate, as f(t seconds)."""

    name: str
    kind: str  # "concurrency" | "poisson"
    level: Callable[[float], float]
    duration_s: float | None = None  # None: run by iteration count

    def __attrs_post_init__(self) -> None:
        if self.kind not in ("concurrency", "poisson"):
            raise ValueError(f"Load.kind must be concurrency or poisson: {self.kind!r}")


def fixed_concurrency(c: int) -> Load:
    return Load(f"conc{c}", "concurrency", lambda t: float(c))


def poisson(rate: float, duration_s: float | None = None) -> Load:
    return Load(f"poisson{rate:g}", "poisson", lambda t: rate, duration_s)


def ramp(lo: float, hi: float, duration_s: float, kind: str = "concurrency") -> Load:
    """lo -> hi -> lo, linear, over duration_s (a triangle)."""
    half = duration_s / 2

    def f(t: float) -> float:
        x = t / half if t < half else max(0.0, (duration_s - t) / half)
        return lo + (hi - lo) * x

    return Load(f"ramp{lo:g}-{hi:g}", kind, f, duration_s)


def bursts(
    lo: float, hi: float, period_s: float, duration_s: float, kind: str = "concurrency"
) -> Load:
    """On/off: lo for half a period, hi for the other half (starting low)."""

    def f(t: float) -> float:
        return hi if (t % period_s) >= period_s / 2 else lo

    return Load(f"bursts{lo:g}/{hi:g}", kind, f, duration_s)


def sinusoid(
    lo: float, hi: float, period_s: float, duration_s: float, kind: str = "concurrency"
) -> Load:
    """Diurnal-like: lo + (hi-lo) * (1 - cos(2 pi t / period)) / 2."""

    def f(t: float) -> float:
        return lo + (hi - lo) * (1 - math.cos(2 * math.pi * t / period_s)) / 2

    return Load(f"sine{lo:g}-{hi:g}", kind, f, duration_s)


@attrs.frozen
class Workload:
    """Request lengths (uniform integer ranges, inclusive) and the running-request cap."""

    prompt_len: tuple[int, int] = (256, 768)
    output_len: tuple[int, int] = (128, 640)
    max_running: int = 256


# ------------------------------------------------------------------------------ controllers
@attrs.define
class Plan:
    kind: str
    mode: str  # one of MODE_NAMES, for time accounting
    shape: DraftShape | None = None


class Controller:
    """Picks each iteration's kind. Subclasses override `plan` and optionally `feed`."""

    name = "controller"
    has_draft = True
    #: PLAIN iterations prefill new requests through the target only (prompt joins the lag).
    lazy_draft_prefill = False

    def plan(
        self, it: int, bs: int, n_prefill: int, accept_lens: tuple[int, ...], mean_ctx: int = 0
    ) -> Plan:
        raise NotImplementedError

    def after(self, plan: Plan) -> None:
        """Called after the iteration ran (the engine's completion events)."""

    def feed(self, shape: DraftShape, accept_lens_mean: float, bs: int) -> None:
        """Verify results of a SPEC iteration (mean accept length incl. bonus)."""

    def describe(self) -> dict[str, object]:
        return {"name": self.name}


class FixedController(Controller):
    """Static baselines: no-spec (a server without a draft) or always-spec."""

    def __init__(self, speculate: bool, shape: DraftShape) -> None:
        self.speculate = speculate
        self.shape = shape
        self.name = "always-spec" if speculate else "no-spec"
        self.has_draft = speculate

    def plan(
        self, it: int, bs: int, n_prefill: int, accept_lens: tuple[int, ...], mean_ctx: int = 0
    ) -> Plan:
        if self.speculate:
            return Plan(SPEC, "SPECULATING", self.shape)
        return Plan(PLAIN, "PLAIN")


class _NullLogger:
    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *a, **k: None


class _TableMachine:
    """Fallback executor of TRANSITIONS (used when specfsm.machine is not importable)."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.mode: Mode = INITIAL_MODE

    def step(self, obs: Observation) -> Event | None:
        ev = self.policy.decide(self.mode, obs)
        if ev is not None:
            self.process_event(ev, obs)
        return ev

    def process_event(self, event: Event, obs: Observation | None = None, reason: str = "") -> Mode:
        self.mode = TRANSITIONS[self.mode][event]
        return self.mode


def make_machine(policy: Policy, prefer_specfsm: bool = True) -> tuple[Any, str]:
    """The real SpecFSM when importable (quiet log), else the table executor; and its name."""
    if prefer_specfsm:
        try:
            from specfsm.log import TransitionLog
            from specfsm.machine import SpecFSM

            return SpecFSM(
                policy, log=TransitionLog(logger=_NullLogger())
            ), "specfsm.machine.SpecFSM"
        except Exception:
            pass
    return _TableMachine(policy), "specfsm.sim._TableMachine"


class FSMController(Controller):
    """A specfsm Policy driven through the FSM; the simulator plays the engine.

    `plain`: "warm" (the SGLang adapter as shipped) or "zero-tax" (the design target); see the
    module docstring. `lazy_draft_prefill` only applies to "zero-tax".
    """

    def __init__(
        self,
        name: str,
        policy: Policy,
        shape: DraftShape,
        prefer_specfsm: bool = True,
        *,
        plain: str = PLAIN_WARM,
        lazy_draft_prefill: bool = False,
    ) -> None:
        self.name = name
        self.policy = policy
        self.shape = shape
        self.plain = check_plain_variant(plain)
        if lazy_draft_prefill and plain == PLAIN_WARM:
            raise ValueError("lazy_draft_prefill needs plain='zero-tax' (a warm draft needs KV)")
        self.lazy_draft_prefill = lazy_draft_prefill
        self.machine, self.machine_name = make_machine(policy, prefer_specfsm)
        warm = self.plain == PLAIN_WARM
        self._plain_plan = Plan(WARM if warm else PLAIN, "PLAIN")
        self._resync_plan = Plan(WARM if warm else RESYNC, "RESYNCING")

    def plan(
        self, it: int, bs: int, n_prefill: int, accept_lens: tuple[int, ...], mean_ctx: int = 0
    ) -> Plan:
        obs = Observation(
            iteration=it,
            decode_bs=bs,
            running=bs + n_prefill,
            accept_lens=accept_lens,
            mean_ctx=mean_ctx,
        )
        self.machine.step(obs)
        mode: Mode = self.machine.mode
        if mode is Mode.SPECULATING:
            return Plan(SPEC, "SPECULATING", self.shape)
        if mode is Mode.DRAINING:
            # the adapter attaches the 1-wide state on entry to DRAINING: this forward is warm
            return Plan(WARM, "DRAINING")
        if mode is Mode.RESYNCING:
            return self._resync_plan
        return self._plain_plan

    def after(self, plan: Plan) -> None:
        if plan.mode == "DRAINING":
            self.machine.process_event(Event.DRAINED, None, "in-flight batch done")
        elif plan.mode == "RESYNCING":
            self.machine.process_event(Event.RESYNCED, None, "draft caught up")

    def describe(self) -> dict[str, object]:
        return {
            "name": self.name,
            "machine": self.machine_name,
            "plain": self.plain,
            "lazy_draft_prefill": self.lazy_draft_prefill,
            **self.policy.describe(),
        }


#: SGLang 0.5.23 DEFAULT_ADAPTIVE_CONFIG (speculative/adaptive_spec_params.py).
SGLANG_DEFAULT_ADAPTIVE: dict[str, dict[str, Any]] = {
    "1": {"candidate_steps": [1, 3, 5, 7], "up_hysteresis": 0.0, "down_hysteresis": -0.25},
    "8": {"candidate_steps": [0, 1, 3], "up_hysteresis": 0.0, "down_hysteresis": 0.0},
    "32": {"candidate_steps": [0, 1], "up_hysteresis": 0.0, "down_hysteresis": 0.0},
    "64": {"candidate_steps": [0], "up_hysteresis": 0.0, "down_hysteresis": 0.0},
}


def sglang_spec_cuda_graph_bs(max_bs: int) -> list[int]:
    """SGLang 0.5.23 decode CUDA-graph batch sizes with speculation (cuda_graph_hook.py)."""
    bs = (
        list(range(1, 9))
        + list(range(10, 33, 2))
        + list(range(40, 65, 4))
        + list(range(72, 257, 8))
        + list(range(272, max_bs + 1, 16))
    )
    bs = [b for b in bs if b <= max_bs]
    if max_bs not in bs:
        bs.append(max_bs)
    return bs


class _SGLangSlot:
    """Port of AdaptiveStepSlot (0.5.23), logging removed."""

    def __init__(self, initial_steps: int, cfg: dict[str, Any]) -> None:
        self.candidate_steps: list[int] = sorted(set(cfg["candidate_steps"]))
        self.ema_alpha = float(cfg.get("ema_alpha", 0.2))
        self.update_interval = int(cfg.get("update_interval", 5))
        self.warmup_batches = int(cfg.get("warmup_batches", 10))
        self.down_hysteresis = float(cfg.get("down_hysteresis", -0.25))
        self.up_hysteresis = float(cfg.get("up_hysteresis", 0.0))
        self.ceiling_coeff = float(cfg.get("ceiling_coeff", 0))
        if initial_steps in self.candidate_steps:
            self.current_steps = initial_steps
        else:
            self.current_steps = self.candidate_steps[len(self.candidate_steps) // 2]
        self.ema_accept_len = float(self.current_steps - 1)
        self._batch_count = 0

    def update(self, mean_correct_drafts: float) -> bool:
        if self.current_steps > 0:
            self.ema_accept_len = (
                1 - self.ema_alpha
            ) * self.ema_accept_len + self.ema_alpha * mean_correct_drafts
        self._batch_count += 1
        if self._batch_count <= self.warmup_batches:
            return False
        if (self._batch_count - self.warmup_batches) % self.update_interval != 0:
            return False
        return self._recompute()

    def _recompute(self) -> bool:
        old = self.current_steps
        idx = self.candidate_steps.index(old)
        old_idx = idx
        if old == 0:
            idx = min(idx + 1, len(self.candidate_steps) - 1)
            target = self.candidate_steps[idx]
            if target > 0 and self.ema_accept_len < 0:
                self.ema_accept_len = float(target - 1)
            self.current_steps = target
            return target != old
        while idx > 0:
            prev = self.candidate_steps[idx - 1]
            drop = (0.5 if prev == 0 else prev - 0.5) + self.down_hysteresis
            if self.ema_accept_len <= drop:
                idx -= 1
            else:
                break
        if not idx < old_idx:
            while idx < len(self.candidate_steps) - 1:
                rise = self.candidate_steps[idx] - 0.5 + self.up_hysteresis
                if self.ema_accept_len > rise:
                    idx += 1
                else:
                    break
        target = self.candidate_steps[idx]
        if self.ceiling_coeff > 0:
            ceiling = max(1, math.ceil(self.ema_accept_len * self.ceiling_coeff))
            if ceiling < target <= old:
                while idx > 0 and self.candidate_steps[idx] > ceiling:
                    idx -= 1
                target = self.candidate_steps[idx]
        self.current_steps = target
        return target != old


class SGLangAdaptiveController(Controller):
    """SGLang 0.5.23 `--speculative-adaptive` (topk=1 chains; steps=0 keeps the draft warm).

    `shape` is the server's launch shape. A chain (topk=1) must have its steps among the
    config's candidate steps (SGLang raises otherwise) and is the initial steps. topk != 1:
    SGLang's `adaptive_unsupported_reason` rejects it and `_maybe_disable_adaptive` falls back
    to static parameters with a warning, so the controller speculates with `shape` always.
    """

    def __init__(
        self,
        config: dict[str, dict[str, Any]] | None = None,
        initial_steps: int | None = None,
        max_bs: int = 256,
        name: str = "sglang-adaptive",
        shape: DraftShape | None = None,
    ) -> None:
        cfg = config if config is not None else SGLANG_DEFAULT_ADAPTIVE
        self.name = name
        self.config = cfg
        self.launch_shape = shape
        self.disabled_reason: str | None = None
        if shape is not None and shape.topk != 1:
            self.disabled_reason = (
                f"speculative_eagle_topk={shape.topk} (only topk=1 is supported): "
                "static speculative params"
            )
        union = sorted({s for e in cfg.values() for s in e["candidate_steps"]})
        if shape is not None and shape.topk == 1 and initial_steps is None:
            if shape.steps not in union:
                raise ValueError(
                    f"--speculative-num-steps={shape.steps} is not in the adaptive config "
                    f"candidate_steps {union}"
                )
            initial_steps = shape.steps
        init = initial_steps if initial_steps is not None else union[len(union) // 2]
        top = {k: v for k, v in cfg.items() if not k.isdigit()}
        self._bs_list = sorted(int(k) for k in cfg if k.isdigit())
        self._slots = {
            int(k): _SGLangSlot(init, {**top, **v}) for k, v in cfg.items() if k.isdigit()
        }
        self._graph_bs = sglang_spec_cuda_graph_bs(max_bs)
        self._shapes = {s: DraftShape.chain(s) for s in union if s > 0}

    def _route(self, bs: int) -> _SGLangSlot:
        import bisect

        i = bisect.bisect_left(self._graph_bs, bs)
        padded = self._graph_bs[i] if i < len(self._graph_bs) else bs
        j = bisect.bisect_right(self._bs_list, padded) - 1
        return self._slots[self._bs_list[max(0, j)]]

    def plan(
        self, it: int, bs: int, n_prefill: int, accept_lens: tuple[int, ...], mean_ctx: int = 0
    ) -> Plan:
        if self.disabled_reason is not None:
            return Plan(SPEC, "SPECULATING", self.launch_shape)
        steps = self._route(max(1, bs)).current_steps
        if steps > 0:
            return Plan(SPEC, "SPECULATING", self._shapes[steps])
        return Plan(WARM, "PLAIN")

    def feed(self, shape: DraftShape, accept_lens_mean: float, bs: int) -> None:
        if self.disabled_reason is None:
            self._route(bs).update(accept_lens_mean - 1.0)

    def feed_steps0(self, bs: int) -> None:
        """steps=0 iterations also report (zero correct drafts) and advance the slot's counter."""
        self._route(bs).update(0.0)

    def describe(self) -> dict[str, object]:
        if self.disabled_reason is not None:
            return {"name": self.name, "adaptive": f"disabled: {self.disabled_reason}"}
        return {"name": self.name, "config": self.config}


class BatchTableController(Controller):
    """vLLM-style dynamic SD: spec iff scheduled requests (incl. prefills) <= cutoff; no
    hysteresis; K=0 still runs the draft at q=1 (the measured K=0 `propose()` cost)."""

    def __init__(self, cutoff: int, shape: DraftShape, name: str = "vllm-bs-table") -> None:
        self.cutoff = cutoff
        self.shape = shape
        self.name = name

    def plan(
        self, it: int, bs: int, n_prefill: int, accept_lens: tuple[int, ...], mean_ctx: int = 0
    ) -> Plan:
        if bs + n_prefill <= self.cutoff:
            return Plan(SPEC, "SPECULATING", self.shape)
        return Plan(WARM, "PLAIN")

    def describe(self) -> dict[str, object]:
        return {"name": self.name, "cutoff": self.cutoff}


class MaxConcurrencyController(Controller):
    """TensorRT-LLM max_concurrency: spec iff active requests <= max_concurrency, no
    hysteresis; off is a true plain decode; turning on pays a catch-up (RESYNC) iteration."""

    def __init__(
        self, max_concurrency: int, shape: DraftShape, name: str = "trtllm-max-conc"
    ) -> None:
        self.max_concurrency = max_concurrency
        self.shape = shape
        self.name = name
        self._on = True

    def plan(
        self, it: int, bs: int, n_prefill: int, accept_lens: tuple[int, ...], mean_ctx: int = 0
    ) -> Plan:
        want = bs + n_prefill <= self.max_concurrency
        if want and not self._on:
            self._on = True
            return Plan(RESYNC, "RESYNCING")
        self._on = want
        if want:
            return Plan(SPEC, "SPECULATING", self.shape)
        return Plan(PLAIN, "PLAIN")

    def describe(self) -> dict[str, object]:
        return {"name": self.name, "max_concurrency": self.max_concurrency}


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
        return {m: self.mode_time_s.get(m, 0.0) / tot for m in MODE_NAMES}

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
    mode_time = dict.fromkeys(MODE_NAMES, 0.0)
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
            if plan.mode in ("DRAINING", "RESYNCING") and in_window:
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
            timeline.append((t, bs, plan.mode))

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
        mode_time_s=mode_time,
        timeline=timeline,
        decode_ms=decode_ms,
        decode_tokens=decode_tokens,
        window_tpot_ms=[win_req_ms[w] / win_tok[w] for w in sorted(win_req_ms) if win_tok[w]],
    )
