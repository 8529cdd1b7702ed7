"""What a simulated run measured: `RunResult` (throughput, TPOT/TTFT per request and per
wall-clock window, switches, time per mode, tokens per phase) and the `Meter` that collects it
inside the measured window."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import attrs

from specfsm.fsm.table import Mode
from specfsm.model.acceptance import DraftShape
from specfsm.sim.fsm_controller import FSMController
from specfsm.sim.plan import SPEC, Controller, Plan
from specfsm.sim.traces import Load


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
    #: per finished request, aligned with tpot_ms: its finish time (simulated s)
    finish_t_s: list[float] = attrs.Factory(list)
    #: `run(phase_s=...)`: the phase length (s) and the tokens committed in each phase
    phase_s: float = 0.0
    phase_tokens: list[int] = attrs.Factory(list)
    #: per phase: request-ms spent decoding / tokens committed by its iterations (the phase's
    #: TPOT; an iteration counts in the phase it started in; nan where none committed)
    phase_tpot_ms: list[float] = attrs.Factory(list)

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
    def tpot_mean(self) -> float:
        """The "mean TPOT": mean over finished requests of decode time / (tokens - 1)."""
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
            "tpot_p50_ms": round(self.pct(self.tpot_ms, 50), 3),
            "tpot_p99_ms": round(self.pct(self.tpot_ms, 99), 3),
            "ttft_p50_ms": round(self.pct(self.ttft_ms, 50), 2),
            "ttft_p99_ms": round(self.pct(self.ttft_ms, 99), 2),
            "switches_per_100": round(self.switches_per_100, 3),
            "iterations": self.iterations,
            "requests": len(self.tpot_ms),
            **{f"time_{m.lower()}": round(v, 4) for m, v in self.mode_frac().items()},
        }


class Meter:
    """What a run measures, inside the window after the warm-up iterations."""

    def __init__(self, record_timeline: bool, tpot_window_s: float, phase_s: float = 0.0) -> None:
        self.tpot_window_s = tpot_window_s
        self.phase_s = phase_s
        self.phase_tokens: list[int] = []
        self.phase_req_ms: list[float] = []  # per phase: request-ms decoding
        self.phase_tok: list[int] = []  # per phase: tokens committed (iterations started in it)
        self.finish_t: list[float] = []
        self.last_spec_shape: DraftShape | None = None
        self.tpots: list[float] = []
        self.decode_ms: list[float] = []
        self.decode_tokens: list[int] = []
        self.ttfts: list[float] = []
        self.win_req_ms: dict[int, float] = {}  # wall-clock window -> request-ms decoding
        self.win_tok: dict[int, int] = {}  # wall-clock window -> tokens committed in it
        self.timeline: list[tuple[float, int, str]] | None = [] if record_timeline else None
        self.mode_time = dict.fromkeys(Mode, 0.0)
        self.switches = 0
        self.last_sig: object = None
        self.win_t0 = 0.0
        self.win_tokens = 0

    def switch(self, ctl: Controller, plan: Plan, in_window: bool) -> None:
        """Count a switch (inside the measured window only): an FSM's DRAINING / RESYNCING
        iteration or a shape change between two consecutive SPEC iterations (a RESHAPE); a
        peer's change of what it runs (its draft shape, or speculating or not)."""
        if isinstance(ctl, FSMController):
            if (plan.mode is Mode.DRAINING or plan.mode is Mode.RESYNCING) and in_window:
                self.switches += 1
            prev = self.last_spec_shape
            if plan.kind == SPEC:
                if prev is not None and plan.shape != prev and in_window:
                    self.switches += 1
                self.last_spec_shape = plan.shape
            else:
                self.last_spec_shape = None
            return
        sig: object = plan.shape if plan.kind == SPEC else None
        if self.last_sig is not None and sig != self.last_sig and in_window:
            self.switches += 1
        self.last_sig = sig

    def phase_add(self, t: float, produced: int) -> None:
        """Tokens committed by an iteration ending at `t` go to phase floor(t / phase_s)."""
        if self.phase_s <= 0:
            return
        p = int(t / self.phase_s)
        while len(self.phase_tokens) <= p:
            self.phase_tokens.append(0)
        self.phase_tokens[p] += produced

    def iteration(
        self, t: float, dt: float, ms: float, bs: int, n_tok: int, plan: Plan, in_window: bool
    ) -> None:
        """Account one iteration that ended at `t` and took `dt` s (`ms` ms)."""
        self.mode_time[plan.mode] += dt if in_window else 0.0
        if in_window and bs:
            w = int((t - dt - self.win_t0) / self.tpot_window_s)
            self.win_req_ms[w] = self.win_req_ms.get(w, 0.0) + ms * bs
            self.win_tok[w] = self.win_tok.get(w, 0) + n_tok
        if self.phase_s > 0 and bs:
            p = int(max(0.0, t - dt) / self.phase_s)
            while len(self.phase_req_ms) <= p:
                self.phase_req_ms.append(0.0)
                self.phase_tok.append(0)
            self.phase_req_ms[p] += ms * bs
            self.phase_tok[p] += n_tok
        if self.timeline is not None:
            self.timeline.append((t, bs, plan.mode.value))

    def finished(self, np: Any, t: float, t_first: Any, t_arrive: Any, out_len: Any) -> None:
        """Requests that finished at `t`: TPOT, decode time and tokens, TTFT."""
        tp = (t - t_first) / np.maximum(out_len - 1, 1) * 1000.0
        self.tpots.extend(tp.tolist())
        self.finish_t.extend([t] * len(tp))
        self.decode_ms.extend(((t - t_first) * 1000.0).tolist())
        self.decode_tokens.extend(np.maximum(out_len - 1, 1).tolist())
        self.ttfts.extend(((t_first - t_arrive) * 1000.0).tolist())

    def result(self, ctl: Controller, load: Load, iterations: int, t: float) -> RunResult:
        window_s = max(t - self.win_t0, 1e-9)
        return RunResult(
            policy=ctl.name,
            load=load.name,
            iterations=iterations,
            sim_time_s=window_s,
            output_tokens=self.win_tokens,
            tok_s=self.win_tokens / window_s,
            tpot_ms=self.tpots,
            ttft_ms=self.ttfts,
            switches=self.switches,
            mode_time_s={m.value: v for m, v in self.mode_time.items()},
            timeline=self.timeline,
            decode_ms=self.decode_ms,
            decode_tokens=self.decode_tokens,
            window_tpot_ms=[
                self.win_req_ms[w] / self.win_tok[w]
                for w in sorted(self.win_req_ms)
                if self.win_tok[w]
            ],
            finish_t_s=self.finish_t,
            phase_s=self.phase_s,
            phase_tokens=self.phase_tokens,
            phase_tpot_ms=[
                ms / n if n else float("nan")
                for ms, n in zip(self.phase_req_ms, self.phase_tok, strict=True)
            ],
        )
