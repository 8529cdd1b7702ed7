"""Why the simulator's serving figure missed the measured one: the comment line that
`sim_predict.sim_lines` writes after a ``serve_sim_vs_measured`` ratio outside its goal.

The line is built from the runs' own records, phase by phase, and names the first of these
that the numbers show:

1. **Decode.** In the phase the simulator got most wrong in the miss's direction (a phase
   whose arrivals' prefill does not saturate the GPU), a request's time per output token
   (TPOT p50, measured by the client) is `DECODE_OFF` times or more the simulator's
   (request-ms decoding / tokens committed, `RunResult.phase_tpot_ms`) on an over-prediction,
   or that much below it on an under-prediction: the served step is not the one priced. The
   caller adds what the server ran there when it knows (SGLang's adaptive speculation: its
   candidate draft steps at that batch size).
2. **Host time between prefills** (an over-prediction): prefill iterations launch-to-launch per
   prompt token against the GPU time the simulator prices.
3. **A saturated GPU** (an under-prediction on a Poisson trace whose arrivals' prefill alone
   asks 80% or more of the GPU in a phase): SGLang's chunked prefill and the simulator's
   whole-prompt one share it differently.

Standard library only; the trace and prefill constants come from the caller.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: a phase's measured and simulated TPOT this far apart (ratio) make a miss a decode miss
DECODE_OFF = 1.3


def mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _phase_mean(recs: Sequence[Mapping[str, Any]], i: int, key: str) -> float:
    return mean([float(r["phases"][i][key]) for r in recs if len(r.get("phases", [])) > i])


def why(
    trace: Any,
    recs: Sequence[Mapping[str, Any]],
    server: str,
    ratio: float,
    sim_phases: Sequence[float],
    sim_tpot: Sequence[float],
    *,
    prompt_mean: float,
    prefill_us: tuple[float, float],
    arrivals: Sequence[int],
    ran: Mapping[int, str] | None = None,
) -> str:
    """The comment line on a miss of `server` on `trace` (module docstring). `sim_phases` /
    `sim_tpot`: the simulator's tok/s and TPOT per phase; `prompt_mean`: the trace's mean
    prompt tokens; `prefill_us`: the (target, draft) GPU us per prompt token the simulator
    prices; `arrivals`: arrivals per phase of a Poisson trace (empty for a closed loop);
    `ran`: per phase index, what the server runs there (said on a decode miss)."""
    labels = [p.label() for p in trace.phases]
    meas = [_phase_mean(recs, i, "tok_s") for i in range(len(labels))]
    per_phase = ", ".join(
        f"{lb} {sp:.0f}/{m:.0f}" for lb, sp, m in zip(labels, sim_phases, meas, strict=False)
    )
    side = "over" if ratio > 1 else "under"
    head = f"# miss[{trace.name}][{server}]: {side} by {abs(ratio - 1):.0%}"
    head += f" (tok/s simulated/measured per phase: {per_phase})"
    t_us, d_us = prefill_us
    # the draft's prefill: always on a stock speculative server and in SPECULATING; deferred
    # by specfsm while PLAIN (a policy that speculates in a phase pays it there, not counted)
    per_token = t_us + (d_us if server in ("eagle", "specfsm_spec", "adaptive") else 0.0)
    saturated = {}
    for i, (lb, n, p) in enumerate(zip(labels, arrivals, trace.phases, strict=False)):
        demand = n * prompt_mean * per_token * 1e-6 / p.seconds
        if demand >= 0.8:
            saturated[i] = f"{lb} {demand:.0%}"
    sign = 1.0 if ratio > 1 else -1.0
    worst = max(
        (i for i in range(min(len(meas), len(sim_phases), len(sim_tpot))) if meas[i] > 0),
        key=lambda i: sign * (sim_phases[i] / meas[i] - 1),
        default=None,
    )
    if worst is not None and worst not in saturated and sim_tpot[worst] > 0:
        served = _phase_mean(recs, worst, "tpot_p50_ms")
        sim = float(sim_tpot[worst])
        # over-predicted: the served step was slower than priced (and under: faster)
        if served > 0 and (served / sim) ** sign >= DECODE_OFF:
            what = (ran or {}).get(worst)
            return (
                f"{head}: decode, not prefill: in {labels[worst]} a request waited "
                f"{served:.1f} ms per output token (TPOT p50, measured) against the "
                f"simulator's {sim:.1f} ms, whose steps are priced from the table"
                + (f"; {what}" if what else "")
            )
    l2l, gpu, chunk = [], [], []
    for r in recs:
        pre = (r.get("iters") or {}).get("prefill") or {}
        toks = float(pre.get("extend_tokens_mean") or 0.0)
        if toks > 0:
            l2l.append(1000.0 * float(pre["ms_mean"]) / toks)
            chunk.append(toks)
        pg = r.get("prefill_gpu") or {}
        tokens = sum(float(v.get("tokens", 0)) for k, v in pg.items() if k.startswith("target"))
        if tokens > 0:
            gpu.append(1000.0 * sum(float(v.get("ms", 0.0)) for v in pg.values()) / tokens)
    us = f"{mean(l2l):.1f} us per prompt token launch-to-launch against {mean(gpu):.1f} us GPU"
    if ratio > 1:
        return (
            f"{head}: its prefill iterations ran {us}: host time between prefills, not in the "
            "simulator"
        )
    loads = list(saturated.values())
    if loads:
        return (
            f"{head}: prefill alone asks {', '.join(loads)} of the GPU (arrivals x "
            f"{prompt_mean:.0f} prompt tokens x {per_token:.1f} us), so the window's tokens hang "
            "on how decode shares a saturated GPU, which the simulator schedules its own way "
            "(every arrival prefilled whole in the next iteration beside one decode step) and "
            f"SGLang its way (prefill chunks, {mean(chunk):.0f} tokens on average here, decode "
            "between them); not isolated further"
        )
    return f"{head}: prefill iterations ran {us}; cause not isolated"
