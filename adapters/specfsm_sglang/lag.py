"""Zero-tax PLAIN's records of what the draft has not seen yet, per request-pool slot.

- :class:`LagBuffer`: the decode positions PLAIN steps ran without the draft, a ring of
  ``lag_tokens`` (token, target hidden state) pairs per slot, on the device;
- :class:`PromptStore`: the prompt positions of prefills run without the draft's prefill
  (``defer_prefill_tokens``), per slot one contiguous run of (token, target hidden) pairs,
  bounded in tokens over all slots;
- :class:`LagStats`: what both and the catch-up did.

This module imports torch: it is adapter code.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import torch

from specfsm_sglang import compat
from specfsm_sglang.flight import ShrinkGate


@dataclass
class LagStats:
    """What the lag buffer and the catch-up did (counters for logs, tests, benchmarks)."""

    plain_forwards: int = 0
    recorded_tokens: int = 0
    catchups: int = 0
    caught_up_rows: int = 0
    caught_up_tokens: int = 0
    overflow_rows: int = 0
    catchup_s: float = 0.0
    peak_lag: int = 0
    draft_forwards: int = 0
    #: prefills whose draft prefill was deferred (zero-tax PLAIN), their rows and tokens
    deferred_prefills: int = 0
    deferred_rows: int = 0
    deferred_tokens: int = 0
    #: deferred prompt tokens caught up (in RESYNCING, or before a later chunk's eager prefill)
    prompt_caught_up_tokens: int = 0
    #: deferred prompt tokens dropped uncaught (their request finished, was retracted or
    #: overflowed its lag ring while PLAIN): their draft KV stays unwritten, and a later
    #: request reusing them from the radix cache drafts over stale KV (acceptance only)
    prompt_dropped_rows: int = 0
    prompt_dropped_tokens: int = 0
    #: prefills that found the store full and ran SGLang's draft prefill
    eager_prefills_store_full: int = 0
    store_peak_tokens: int = 0
    #: the newest catch-ups: (rows, tokens, seconds), bounded
    history: deque[tuple[int, int, float]] = field(default_factory=lambda: deque(maxlen=256))


#: A request whose lag passed its ring is caught up over its newest ``lag_tokens`` positions;
#: its older draft KV stays stale (lower acceptance for a while), counted as ``overflow_rows``.
#: Recomputing the older hidden states from the target instead is not implemented.
class LagBuffer:
    """Per request-pool slot: a ring of ``capacity`` (token, target hidden) pairs.

    ``count[i]`` (host) is the number of positions slot ``i`` lags by (may exceed the ring's
    capacity: then only the newest ``capacity`` are kept).
    """

    def __init__(
        self, slots: int, capacity: int, width: int, dtype: torch.dtype, device: Any
    ) -> None:
        self.slots = slots
        self.capacity = capacity
        self.width = width
        self.tokens = torch.zeros((slots, capacity), dtype=torch.int64, device=device)
        self.hidden = torch.zeros((slots, capacity, width), dtype=dtype, device=device)
        self.count = [0] * slots
        # pinned host memory where the device is a GPU: a copy from pageable memory would wait
        # for every kernel queued on the stream (benchmarks/gpu/sync_probe.py)
        self._pin = torch.device(device).type == "cuda"

    @property
    def nbytes(self) -> int:
        return int(
            self.tokens.numel() * self.tokens.element_size()
            + self.hidden.numel() * self.hidden.element_size()
        )

    @staticmethod
    def token_bytes(width: int, dtype: torch.dtype) -> int:
        """Bytes one lagging position takes: its target hidden states and its token."""
        return width * torch.empty((), dtype=dtype).element_size() + 8

    @property
    def bytes_per_token(self) -> int:
        return self.token_bytes(self.width, self.hidden.dtype)

    def reset(self, rows: list[int]) -> None:
        """The rows lag by nothing (their draft saw every position): host counts only, no
        device work."""
        for r in rows:
            self.count[r] = 0

    def record(self, rows: list[int], hidden: torch.Tensor, tokens: torch.Tensor) -> int:
        """Append one position per row: ``hidden[i]`` (h_p) and ``tokens[i]`` (x_{p+1});
        returns the largest lag among the rows.

        The ring positions come from the host counts, which mirror the ring exactly, so one
        step costs a host-to-device copy of ``bs`` flat positions from pinned memory and two
        ``index_copy_`` kernels (no device-side count: every small kernel outside the CUDA
        graph lengthens a PLAIN step at small batch, and a speculative server's PLAIN step is
        judged against a server without a draft)."""
        count = self.count
        cap = self.capacity
        peak = 0
        flat: list[int] = []
        for r in rows:
            c = count[r]
            flat.append(r * cap + c % cap)
            c += 1
            count[r] = c
            if c > peak:
                peak = c
        dev = self.tokens.device
        idx = torch.tensor(flat, dtype=torch.int64, pin_memory=self._pin).to(dev, non_blocking=True)
        self.hidden.view(-1, self.width).index_copy_(0, idx, hidden.to(self.hidden.dtype))
        self.tokens.view(-1).index_copy_(0, idx, tokens.to(torch.int64))
        return peak

    def gather(self, rows: list[int], lens: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """The newest ``lens[i]`` positions of each row, oldest first, concatenated."""
        cap = self.capacity
        flat_rows: list[int] = []
        flat_slots: list[int] = []
        for r, n in zip(rows, lens, strict=True):
            c = self.count[r]
            flat_rows.extend([r] * n)
            flat_slots.extend((c - n + j) % cap for j in range(n))
        dev = self.tokens.device
        fr = torch.tensor(flat_rows, dtype=torch.int64).to(dev, non_blocking=True)
        fs = torch.tensor(flat_slots, dtype=torch.int64).to(dev, non_blocking=True)
        return self.tokens[fr, fs], self.hidden[fr, fs]


@dataclass
class Stored:
    """One slot's deferred prompt positions ``[start, start + n)`` and the request they are
    for (a slot is reused by another request once its owner leaves)."""

    req: Any
    start: int
    tokens: list[torch.Tensor]
    hidden: list[torch.Tensor]
    n: int = 0

    def append(self, tokens: torch.Tensor, hidden: torch.Tensor) -> None:
        self.tokens.append(tokens)
        self.hidden.append(hidden)
        self.n += int(tokens.shape[0])

    @property
    def end(self) -> int:
        return self.start + self.n


class PromptStore:
    """Deferred prompt positions per request-pool slot, at most ``budget`` tokens in all.

    Each chunk is a copy of the target's hidden states of those positions (EAGLE-3: the
    auxiliary layers' states) and the draft's input tokens, so the store costs ``budget x
    LagBuffer.token_bytes(width, dtype)`` bytes at most. Entries whose request left its slot
    (finished, aborted, retracted) are reclaimed at each prefill and when room is needed, and
    counted as dropped; and, for the figure a policy is told (`told`), once the batch has shrunk
    by a sixteenth since the last pass.
    """

    def __init__(self, budget: int, stats: LagStats) -> None:
        self.budget = budget
        self.rows: dict[int, Stored] = {}
        self.used = 0
        self.stats = stats
        #: when `told` sweeps the store before telling it
        self.gate = ShrinkGate()

    def __len__(self) -> int:
        return len(self.rows)

    def owned(self, row: int, req: Any) -> Stored | None:
        """The slot's entry if ``req`` owns it; an entry of an earlier owner is dropped."""
        e = self.rows.get(row)
        if e is None:
            return None
        if e.req is req:
            return e
        self.drop(row)
        return None

    def fits(self, n: int) -> bool:
        if self.used + n <= self.budget:
            return True
        self.reclaim()
        return self.used + n <= self.budget

    def told(self, running: int) -> int:
        """The deferred tokens a policy is told (`Observation.draft_debt`) at an iteration with
        `running` requests. The entries of requests gone are reclaimed first when the gate
        says the batch has shrunk enough (`ShrinkGate`): a prefill reclaims anyway, but in a
        lull without prefills the figure would keep every request finished since the last one,
        a multiple of the true debt as a burst's batch drains."""
        if self.gate.due(running, bool(self.rows)) is not None:
            self.reclaim()
        return self.used

    def reclaim(self) -> None:
        """Drop the entries whose request no longer holds their slot."""
        for row, e in list(self.rows.items()):
            finished = getattr(e.req, "finished", None)
            if (callable(finished) and finished()) or compat.req_pool_idx(e.req) != row:
                self.drop(row)

    def add(
        self, row: int, req: Any, start: int, tokens: torch.Tensor, hidden: torch.Tensor
    ) -> None:
        """Positions ``[start, start + len(tokens))`` of ``req`` (a later chunk continues its
        entry; anything else starts a new one)."""
        e = self.owned(row, req)
        if e is not None and e.end != start:
            self.drop(row)
            e = None
        if e is None:
            e = self.rows[row] = Stored(req, start, [], [])
        e.append(tokens, hidden)
        self.used += int(tokens.shape[0])
        if self.used > self.stats.store_peak_tokens:
            self.stats.store_peak_tokens = self.used

    def take(self, row: int) -> Stored | None:
        """Remove and return the slot's entry (it is being caught up)."""
        e = self.rows.pop(row, None)
        if e is not None:
            self.used -= e.n
        return e

    def drop(self, row: int) -> None:
        """Forget the slot's entry uncaught (counted: its draft KV stays unwritten)."""
        e = self.take(row)
        if e is not None:
            self.stats.prompt_dropped_rows += 1
            self.stats.prompt_dropped_tokens += e.n
