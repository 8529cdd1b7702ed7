"""The per-phase oracle: the best static server chosen phase by phase, and, on an open-loop
trace, the same choice made per pair of phases.

The per-phase oracle adds up, phase by phase, the tok/s of whichever static server (no-spec,
stock EAGLE) served that phase best in the repetition. On an open-loop trace the requests of a
burst that a server has not served by the burst's end are served in the lull after it, so a
server slower in the burst is faster in the lull, by the same tokens: on the H200's bursty
trace (2026-12-04/05, ten repetitions) the two static servers' burst-plus-lull sums agreed,
and the per-phase oracle, taking the no-spec server's burst and the stock EAGLE server's lull,
counted the carried-over tokens twice (1.03-1.16x the best static server). Chosen per pair of
phases (a burst with the lull after it), the oracle is the best static server itself in 8 of
those 10 repetitions (1.015 and 1.021 in the others). `pair_oracle` is that choice, printed
beside the goal line as information.

Standard library only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ratios import ratio_line
from traces import Trace


def phase_oracle(
    trace: Trace,
    statics: Sequence[str],
    run_of: dict[tuple[str, int], dict[str, Any]],
    reps: Sequence[int],
    group: int = 1,
) -> dict[int, float]:
    """Per repetition, the oracle's tok/s over the window: phases taken `group` at a time
    (1: phase by phase), each group served by the static server best in it."""
    n = len(trace.phases)
    out = {}
    for i in reps:
        total = 0.0
        for a in range(0, n, group):
            span = range(a, min(n, a + group))
            total += max(
                sum(trace.phases[j].seconds * run_of[(s, i)]["phases"][j]["tok_s"] for j in span)
                for s in statics
            )
        out[i] = total / trace.seconds
    return out


def pair_oracle(
    trace: Trace,
    statics: Sequence[str],
    run_of: dict[tuple[str, int], dict[str, Any]],
    reps: Sequence[int],
) -> dict[int, float] | None:
    """The oracle over pairs of phases on an open-loop trace of four or more phases (None on
    a closed loop, whose phases carry little over: the next request waits for the last)."""
    if trace.phases[0].kind != "poisson" or len(trace.phases) < 4:
        return None
    return phase_oracle(trace, statics, run_of, reps, group=2)


def pair_lines(
    t: str,
    trace: Trace,
    statics: list[str],
    run_of: dict[tuple[str, int], dict[str, Any]],
    best: dict[int, float],
    tok: dict[str, dict[int, float]],
    configurations: dict[str, str],
) -> list[str]:
    """On an open-loop trace, the oracle chosen per pair of phases (`pair_oracle`) against the
    best static server, and each configuration (`configurations`: label -> its lines' prefix)
    against it, as information."""
    pairs = pair_oracle(trace, statics, run_of, list(best))
    if pairs is None:
        return []
    name = f"serve_phase_pair_oracle_vs_best_static[{t}]"
    why = " (the static server chosen per burst and the lull after it, oracle.py)"
    lines = [ratio_line(name, pairs, best, "none: info") + why]
    for lab in [x for x in tok if x in configurations]:
        name = f"{configurations[lab]}_vs_phase_pair_oracle[{t}]"
        lines.append(ratio_line(name, tok[lab], pairs, "none: info"))
    return lines
