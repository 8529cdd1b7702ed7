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


def fmt_reps(xs: list[float], digits: int = 3, more: str = "") -> str:
    """Mean, the repetitions and their spread; ``more`` is added inside the brackets."""
    m, s = mean_spread(xs)
    reps = ", ".join(f"{x:.{digits}f}" for x in xs)
    return f"{m:.{digits}f} (reps {reps}; spread {100 * s:.1f}%{more})"


#: two-sided 95% quantiles of Student's t by degrees of freedom (1-10, then 12, 15, 20, 30)
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306}
_T95 |= {9: 2.262, 10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}


def interval95(xs: list[float]) -> tuple[float, float] | None:
    """The 95% interval of the mean of repetitions taken as independent draws (Student's t),
    so that a goal's miss or pass can be read against the runs' own scatter; None for one."""
    if len(xs) < 2:
        return None
    df = len(xs) - 1
    t = _T95[max(k for k in _T95 if k <= df)] if df <= 30 else 1.960
    m, half = statistics.fmean(xs), t * statistics.stdev(xs) / len(xs) ** 0.5
    return m - half, m + half


def ratio_line(name: str, a: dict[int, float], b: dict[int, float], goal: str) -> str:
    """Ratios of the repetitions both servers share (measured together), with the 95%
    interval of their mean from two on; where they share none (merged folders measured
    apart), the ratio of their means, said as such."""
    rs = [a[i] / b[i] for i in sorted(set(a) & set(b)) if b[i]]
    if rs:
        ci = interval95(rs)
        more = f"; 95% interval {ci[0]:.3f}-{ci[1]:.3f}" if ci is not None else ""
        return f"{name}: {fmt_reps(rs, more=more)} (goal {goal})"
    if a and b and statistics.fmean(b.values()):
        m = statistics.fmean(a.values()) / statistics.fmean(b.values())
        return (
            f"{name}: {m:.3f} (ratio of means: no repetition in common, measured apart; "
            f"{len(a)} and {len(b)} runs) (goal {goal})"
        )
    return f"{name}: n/a"


def tokens_line(
    name: str, a: dict[int, float], b: dict[int, float], seconds: float, batch: int | None
) -> str | None:
    """The window's tokens a run of `a` made beyond (or short of) `b`'s, per repetition both
    ran (tok/s x `seconds`), beside what one decode iteration at the runs' largest batch
    (`batch`, None: unknown) makes: a miss smaller than that is one iteration's place against
    the window's end, not a rate."""
    ds = [(a[i] - b[i]) * seconds for i in sorted(set(a) & set(b))]
    if not ds:
        return None
    reps = ", ".join(f"{d:+.0f}" for d in ds)
    scale = f"; one decode iteration at the runs' largest batch makes {batch}" if batch else ""
    return (
        f"{name}: {statistics.fmean(ds):+.0f} tokens a run (reps {reps}) "
        f"(info: the window's tokens beside the reference's{scale})"
    )
