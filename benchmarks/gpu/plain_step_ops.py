#!/usr/bin/env python3
"""The work a zero-tax PLAIN step adds outside the target's CUDA graph, two ways side by side:
the lag record with a device-side count (``count_dev`` gathered, its remainder, two 2-D
index_puts, the count written back; a fresh accept-lengths fill and an int32 cast of the
sampled tokens, cast back to int64 by SGLang's future map) against the record as the adapter
does it now (``LagBuffer.record``: ring positions from the host counts, one pinned copy, two
``index_copy_``; a reused accept-lengths buffer; the sampler's int64 tokens relayed as they are).

Two figures per batch size, each the median of ``--steps`` steps, over ``--rounds`` interleaved
rounds (mean and spread printed):

- ``gpu_us``: GPU time of one step's ops queued behind a busy GPU (CUDA events around them,
  after a ~5 ms matmul: as in a served decode, where the host runs ahead of the GPU);
- ``host_us``: host time to issue them.

torch only (the adapter's ``lag.py`` imports no SGLang):

    python3 benchmarks/gpu/plain_step_ops.py            # on the H200 (needs CUDA)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "adapters"))
from specfsm_sglang.lag import LagBuffer

WIDTH = 4096  # the EAGLE draft's input width for a Llama-3.1-8B target
LAG = 128  # the adapter's default lag_tokens
SLOTS = 258  # request slots of a 256-request server


class DeviceCount:
    """The record with a device-side count per slot (what the adapter did before)."""

    def __init__(self, dev: torch.device) -> None:
        self.tokens = torch.zeros((SLOTS, LAG), dtype=torch.int64, device=dev)
        self.hidden = torch.zeros((SLOTS, LAG, WIDTH), dtype=torch.bfloat16, device=dev)
        self.count = [0] * SLOTS
        self.count_dev = torch.zeros((SLOTS,), dtype=torch.int64, device=dev)

    def step(
        self, rows: list[int], rows_dev: torch.Tensor, h: torch.Tensor, t: torch.Tensor
    ) -> None:
        for r in rows:
            self.count[r] += 1
        c = self.count_dev[rows_dev]
        slot = c % LAG
        self.hidden[rows_dev, slot] = h.to(self.hidden.dtype)
        self.tokens[rows_dev, slot] = t.to(torch.int64)
        self.count_dev[rows_dev] = c + 1
        ones = torch.ones((len(rows),), dtype=torch.int32, device=h.device)
        bonus = t.to(torch.int32)
        del ones
        bonus.to(torch.int64)  # the future map's int64 token buffer


class HostCount:
    """The record as the adapter does it now."""

    def __init__(self, dev: torch.device) -> None:
        self.lag = LagBuffer(SLOTS, LAG, WIDTH, torch.bfloat16, dev)
        self.ones = torch.ones((SLOTS,), dtype=torch.int32, device=dev)

    def step(
        self, rows: list[int], rows_dev: torch.Tensor, h: torch.Tensor, t: torch.Tensor
    ) -> None:
        self.lag.record(rows, h, t)
        self.ones[: len(rows)]


def measure(
    fn: Callable[[list[int], torch.Tensor, torch.Tensor, torch.Tensor], None],
    bs: int,
    steps: int,
    busy: tuple[torch.Tensor, torch.Tensor],
) -> tuple[float, float]:
    dev = busy[0].device
    rows = list(range(1, bs + 1))
    rows_dev = torch.tensor(rows, dtype=torch.int64, device=dev)
    h = torch.randn((bs, WIDTH), dtype=torch.bfloat16, device=dev)
    t = torch.randint(0, 128000, (bs,), dtype=torch.int64, device=dev)
    gpu, host = [], []
    for _ in range(steps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.matmul(*busy)  # the GPU busy, as behind a decode graph
        a.record()
        t0 = time.perf_counter()
        fn(rows, rows_dev, h, t)
        host.append((time.perf_counter() - t0) * 1e6)
        b.record()
        b.synchronize()
        gpu.append(a.elapsed_time(b) * 1e3)
    return statistics.median(gpu), statistics.median(host)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bs", default="1,4,16,64,256")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("plain_step_ops: needs a CUDA device")
        return 2
    dev = torch.device("cuda")
    busy = (torch.randn((8192, 8192), device=dev, dtype=torch.bfloat16),) * 2
    ways = {"device_count": DeviceCount(dev), "host_count": HostCount(dev)}
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {torch.cuda.get_device_name()}")
    print(
        f"# torch {torch.__version__}; median of {args.steps} steps per round, {args.rounds} rounds"
    )
    for bs in (int(x) for x in args.bs.split(",")):
        got: dict[str, list[tuple[float, float]]] = {k: [] for k in ways}
        for w in ways.values():  # warm-up
            measure(w.step, bs, 20, busy)
        for r in range(args.rounds):
            order = list(ways) if r % 2 == 0 else list(reversed(ways))
            for k in order:
                got[k].append(measure(ways[k].step, bs, args.steps, busy))
        for k in ways:
            g = [x for x, _ in got[k]]
            h = [y for _, y in got[k]]
            print(
                f"plain_step_ops[bs={bs}][{k}]: gpu_us={statistics.mean(g):.1f} "
                f"(spread {max(g) - min(g):.1f}) host_us={statistics.mean(h):.1f} "
                f"(spread {max(h) - min(h):.1f})"
            )
        ratio = [n[0] / o[0] for n, o in zip(got["host_count"], got["device_count"], strict=True)]
        print(
            f"plain_step_ops_gpu_ratio[bs={bs}]: {statistics.mean(ratio):.3f} "
            f"(rounds {', '.join(f'{x:.3f}' for x in ratio)}) (host_count / device_count)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
