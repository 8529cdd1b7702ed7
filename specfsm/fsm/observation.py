"""What a policy sees each iteration: one small frozen record."""

from __future__ import annotations

import attrs


@attrs.frozen(slots=True)
class Observation:
    """Policy inputs for one scheduler iteration; identical on every TP/DP rank.

    accept_lens are tokens committed per verify *including the bonus token* (1 .. K), for the
    most recent verify whose result was processed (one batch late under overlap scheduling).
    Under DP attention `decode_bs` is the *global* decode batch size (sum over DP ranks), so every
    rank decides alike; `rank` is informational and never an input to a decision.
    `mean_ctx` is the mean KV length (tokens) of the decode requests, global like `decode_bs`;
    0 when unknown.
    """

    iteration: int
    decode_bs: int
    running: int = 0
    accept_lens: tuple[int, ...] = ()
    queued: int = 0
    rank: int = 0
    mean_ctx: int = 0

    def mean_accept_len(self) -> float | None:
        """Mean accept length of the last verify, or None when there was none."""
        if not self.accept_lens:
            return None
        return sum(self.accept_lens) / len(self.accept_lens)
