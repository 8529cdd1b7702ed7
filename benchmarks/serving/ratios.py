"""Ratios of repetitions: the mean and spread of a server's runs, and a ratio line between two
servers over the repetitions they share (the summary's and the oracle's lines).

Standard library only.
"""

from __future__ import annotations

import statistics


def mean_spread(xs: list[float]) -> tuple[float, float]:
    """Mean and spread ((max - min) / mean) of repetitions."""
    m = statistics.fmean(xs)
    return m, (max(xs) - min(xs)) / m if m else 0.0


def fmt_reps(xs: list[float], digits: int = 3) -> str:
    m, s = mean_spread(xs)
    reps = ", ".join(f"{x:.{digits}f}" for x in xs)
    return f"{m:.{digits}f} (reps {reps}; spread {100 * s:.1f}%)"


def ratio_line(name: str, a: dict[int, float], b: dict[int, float], goal: str) -> str:
    """Ratios of the repetitions both servers share (measured together); where they share
    none (merged folders measured apart), the ratio of their means, said as such."""
    rs = [a[i] / b[i] for i in sorted(set(a) & set(b)) if b[i]]
    if rs:
        return f"{name}: {fmt_reps(rs)} (goal {goal})"
    if a and b and statistics.fmean(b.values()):
        m = statistics.fmean(a.values()) / statistics.fmean(b.values())
        return (
            f"{name}: {m:.3f} (ratio of means: no repetition in common, measured apart; "
            f"{len(a)} and {len(b)} runs) (goal {goal})"
        )
    return f"{name}: n/a"
