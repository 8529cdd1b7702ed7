"""The per-phase oracle of a time-varying trace: for each phase, the best static shape.

Construction:

1. A *phase* is a window of `phase_s` simulated seconds, [p * phase_s, (p + 1) * phase_s),
   from t = 0 to the trace's end (`default_phase_s`: the trace's duration / 32, which puts the
   bursts trace's level changes, every duration / 16, on phase boundaries; within a ramp or
   sinusoid phase the target concurrency moves by at most 1/16 of its range).
2. Every static state of the grid (`specfsm.sim.baselines.STATIC_GRID`: the draft shapes and
   the engine's PLAIN state; policy_sweep also builds an info oracle with the no-draft server
   added) serves the same trace with the same seed (the same requests, lengths and draws),
   with `run(phase_s=...)`: each run records the tokens committed by the iterations ending in
   each phase and each finished request's finish time and TPOT.
3. The oracle's winner of phase p is the static shape that committed the most tokens in p.
   Its throughput is the sum over phases of the winners' tokens divided by the time the phases
   cover (`phase_tok_s`, the same formula scores the policy compared with it).
4. Its TPOT distribution is the union over phases of the TPOTs of the requests the phase's
   winner finished in that phase (by finish time); the p99 TPOT is that union's 99th
   percentile (nearest rank, as `RunResult.pct`).

The oracle switches for free at phase boundaries and each phase starts from its winner's own
state (its requests in flight): an upper bound no single run can reach exactly, though with
phases hundreds of iterations long the carried-over state is a small part of each phase.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import attrs

from specfsm.sim.engine import RunResult

#: phases per trace by default (`default_phase_s`)
PHASES_PER_TRACE = 32


def default_phase_s(duration_s: float) -> float:
    """The phase length for a trace of `duration_s` simulated seconds."""
    return duration_s / PHASES_PER_TRACE


def _n_phases(results: Sequence[RunResult], duration_s: float | None) -> int:
    phase_s = results[0].phase_s
    if duration_s is not None:
        return max(1, math.ceil(duration_s / phase_s - 1e-9))
    return max(len(r.phase_tokens) for r in results)


def phase_tok_s(r: RunResult, duration_s: float | None = None) -> float:
    """Tokens/s of `r` over its phases (all tokens from t = 0; the phases up to `duration_s`,
    or all it recorded); the last iteration's overshoot past the end counts in the last one."""
    if r.phase_s <= 0:
        raise ValueError(f"{r.policy}: run without phase_s (no per-phase tokens)")
    n = _n_phases([r], duration_s)
    return sum(r.phase_tokens) / (n * r.phase_s)


@attrs.frozen
class PhaseOracle:
    phase_s: float
    winners: tuple[str, ...]  # per phase: the static shape with the most tokens
    phase_tokens: tuple[int, ...]  # per phase: the winner's tokens
    tok_s: float
    tpot_ms: tuple[float, ...]  # the winners' requests' TPOTs (finished in their phases)

    @property
    def tpot_p99_ms(self) -> float:
        return pct(self.tpot_ms, 99)

    def describe(self) -> dict[str, object]:
        counts: dict[str, int] = {}
        for w in self.winners:
            counts[w] = counts.get(w, 0) + 1
        return {
            "phase_s": self.phase_s,
            "phases": len(self.winners),
            "tok_s": round(self.tok_s, 1),
            "tpot_p99_ms": round(self.tpot_p99_ms, 3),
            "winners": counts,
        }


def pct(xs: Sequence[float], q: float) -> float:
    """The q-th percentile of `xs` by nearest rank (NaN when empty)."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q / 100 * len(s)) - 1))]


def phase_oracle(statics: Mapping[str, RunResult], duration_s: float | None = None) -> PhaseOracle:
    """The per-phase oracle from the static shapes' runs of one trace (same trace, same seed,
    the same `phase_s`); see the module docstring."""
    runs = list(statics.values())
    if not runs:
        raise ValueError("phase_oracle: no static runs")
    phase_s = runs[0].phase_s
    if phase_s <= 0 or any(r.phase_s != phase_s for r in runs):
        raise ValueError("phase_oracle: every run needs the same phase_s > 0")
    n = _n_phases(runs, duration_s)
    names = list(statics)
    winners: list[str] = []
    toks: list[int] = []
    for p in range(n):
        best = max(
            names,
            key=lambda s: statics[s].phase_tokens[p] if p < len(statics[s].phase_tokens) else 0,
        )
        pt = statics[best].phase_tokens
        # the last phase also takes what a run recorded past `duration_s` (its overshoot)
        extra = sum(pt[n:]) if p == n - 1 else 0
        winners.append(best)
        toks.append((pt[p] if p < len(pt) else 0) + extra)
    tpots: list[float] = []
    for name in set(winners):
        r = statics[name]
        for tp, ft in zip(r.tpot_ms, r.finish_t_s, strict=True):
            p = min(int(ft / phase_s), n - 1)
            if winners[p] == name:
                tpots.append(tp)
    tok_s = sum(toks) / (n * phase_s)
    return PhaseOracle(phase_s, tuple(winners), tuple(toks), tok_s, tuple(tpots))
