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

On an open-loop trace the tokens its requests ask bound both: `open_loop_notes` says how the
oracle and the better static server stand against them, so that a goal line that no schedule
can meet, or that only says where each run's window ends, says so itself.

Standard library only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

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


#: the better static server's window holding at least this share of the tokens the trace's
#: requests ask: the trace was served whole, and a ratio to it says where the windows end
SERVED_WHOLE = 0.99


class OpenLoopNotes(NamedTuple):
    """What an open-loop trace adds to its summary: the info lines, and the notes that end the
    best-static and phase-oracle goal lines ("" where nothing is to be said)."""

    lines: list[str]
    best: str
    oracle: str


def open_loop_notes(
    t: str,
    oracle: dict[int, float],
    best: dict[int, float],
    asked: dict[int, int],
    seconds: float,
    fmt: Callable[[list[float]], str],
) -> OpenLoopNotes:
    """The oracle's and the better static server's tokens over the tokens the trace's
    requests ask (`asked`, per repetition; {} on a closed loop: nothing to say)."""
    if not asked:
        return OpenLoopNotes([], "", "")
    share = [oracle[i] * seconds / asked[i] for i in asked if i in oracle]
    served = [best[i] * seconds / asked[i] for i in asked if i in best]
    lines = [
        f"serve_phase_oracle_vs_trace_tokens[{t}]: {fmt(share)} (info: the oracle's tokens over"
        " all the tokens the trace's requests ask; above 1 no schedule reaches it)",
        f"serve_best_static_vs_trace_tokens[{t}]: {fmt(served)} (info: the better static"
        f" server's window tokens over them; from {SERVED_WHOLE} the trace is served whole)",
    ]
    over = (
        f" (unreachable: the oracle adds up {max(share):.3f}x the tokens the trace's requests ask)"
        if share and max(share) > 1.0
        else ""
    )
    whole = (
        f" (served whole: the better static server's window holds {min(served):.3f}x or more of"
        " the tokens the trace's requests ask; the ratio says where each run's window ends)"
        if served and min(served) >= SERVED_WHOLE
        else ""
    )
    return OpenLoopNotes(lines, whole, over)
