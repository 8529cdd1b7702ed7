#!/usr/bin/env python3
"""Which tensor writes make the host wait for the GPU (torch only; run on the GPU box).

    python3 benchmarks/gpu/sync_probe.py

Each pattern runs once to load its kernels, then again behind ~0.9 s of queued matmuls: a
pattern whose host time is about the queued GPU time waited for the stream (a synchronizing
host-to-device copy); one that returns in microseconds did not. In a scheduler that overlaps
the next batch's host work with the current forward, a waiting write exposes all that host
work as GPU idle time. Results of a run are in docs/serving.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


def main() -> None:
    d = "cuda"
    a = torch.randn(8192, 8192, device=d)
    x = torch.zeros(4096, dtype=torch.int64, device=d)
    idx = torch.tensor([3, 7, 11], dtype=torch.int64, device=d)
    h = torch.zeros(64, 128, 16, device=d)
    v = torch.ones(3, 16, device=d)
    s = torch.tensor([1, 2, 3], device=d)

    def busy() -> None:
        for _ in range(40):
            a @ a

    def probe(name: str, fn: Callable[[], object]) -> None:
        fn()
        torch.cuda.synchronize()
        busy()
        t0 = time.perf_counter()
        fn()
        host = (time.perf_counter() - t0) * 1e3
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        busy()
        torch.cuda.synchronize()
        queued = (time.perf_counter() - t1) * 1e3
        verdict = "WAITS" if host > queued / 2 else "async"
        print(f"{name:46s} host {host:8.2f} ms  queued GPU {queued:5.0f} ms  {verdict}", flush=True)

    probe("x[idx_dev] = 0", lambda: x.__setitem__(idx, 0))
    probe("x.index_fill_(0, idx_dev, 0)", lambda: x.index_fill_(0, idx, 0))
    probe("x[5] = 7", lambda: x.__setitem__(5, 7))
    probe("x[5:6].fill_(7)", lambda: x[5:6].fill_(7))
    probe("torch.tensor(rows).to(dev)", lambda: torch.tensor([1, 2, 3]).to(d))
    probe(
        "torch.tensor(rows).to(dev, non_blocking=True)",
        lambda: torch.tensor([1, 2]).to(d, non_blocking=True),
    )
    probe("x[idx_dev] = x[idx_dev] + 1", lambda: x.__setitem__(idx, x[idx] + 1))
    probe("h[idx_dev, s_dev] = v", lambda: h.__setitem__((idx, s), v))
    probe("x.index_copy_(0, idx_dev, x[idx_dev] + 1)", lambda: x.index_copy_(0, idx, x[idx] + 1))
    probe("h[idx_dev, s_dev] (read)", lambda: h[idx, s])


if __name__ == "__main__":
    main()
