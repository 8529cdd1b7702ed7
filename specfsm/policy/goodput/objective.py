"""What the goodput policy maximizes, as pure functions of predicted costs and accept lengths.

Goodput is output tokens per second: bs x accept_len / ms x 1000 for a speculative option
(accept_len 1 for PLAIN). One function computes it, one picks the best option, one asks
whether a winner clears a margin, and one whether leaving zero-tax PLAIN pays its catch-up.
"""

from __future__ import annotations

from collections.abc import Sequence


def tok_s(bs: int, accept_len: float, ms: float) -> float:
    """Predicted output tokens/s of an iteration of `ms` at batch size bs."""
    return 1000.0 * bs * accept_len / ms


def best(
    acc: Sequence[float], ms: Sequence[float], bs: int, start: int = 0, floor: float = -1.0
) -> tuple[int, float]:
    """(index, tokens/s) of the option with the highest goodput; an option must beat `floor`
    (the goodput of option `start`, the one kept on a tie) strictly to win."""
    ib, top = start, floor
    for i, (a, m) in enumerate(zip(acc, ms, strict=True)):
        g = 1000.0 * bs * a / m
        if g > top:
            ib, top = i, g
    return ib, top


def beats(winner: float, loser: float, margin: float) -> bool:
    """`winner` is better than `loser` by more than the relative `margin`."""
    return winner > loser * (1.0 + margin)


def catchup_pays(
    horizon: int, plain_ms: float, spec_ms: float, accept_len: float, catchup_ms: float
) -> bool:
    """Zero-tax PLAIN: the time speculation saves over `horizon` iterations pays for the
    RESYNCING catch-up (`catchup_ms`, priced for `catchup_lag` tokens)."""
    saved = horizon * (plain_ms - spec_ms / accept_len)
    return saved > catchup_ms


def catchup_lag(bs: int, iterations_in_plain: int, lag_cap: int) -> int:
    """The draft's lag (tokens over the batch) after `iterations_in_plain` PLAIN iterations, at
    most `lag_cap` per request: requests turn over, and the adapter catches up at most its lag
    buffer per request."""
    return bs * min(lag_cap, max(1, iterations_in_plain))
