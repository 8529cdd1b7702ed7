"""Cost of the SGLang adapter's spec-state contract check per decode forward.

Builds the adapter's real contract set over a real `EagleDraftInput` with real CPU tensors
(batch sizes 1, 16, 256) and times `Contracts.check` in SPECULATING. The
in-engine figure is also recorded by the test channel (`contract_ns / contract_checks`).
Needs the project environment (torch + sglang): python benchmarks/contract_overhead.py
"""

from __future__ import annotations

import os
import statistics
import time
from types import SimpleNamespace as NS

os.environ.setdefault("SPECFSM_SGLANG_CPU", "1")  # import sglang on a CPU-only machine


def main() -> int:
    from specfsm_cpu import boot as cpu_boot

    cpu_boot.boot()
    import torch
    from sglang.srt.speculative.eagle_info import EagleDraftInput
    from specfsm_sglang import relay
    from specfsm_sglang.batch_contracts import BatchSubject, build_contracts

    from specfsm import Mode

    class FM:
        def is_idle(self) -> bool:
            return False

    dw = NS(speculative_num_steps=3, speculative_num_draft_tokens=4, topk=1)
    tmr = NS(attn_backend=object())
    worker = NS(
        speculative_num_steps=3,
        speculative_num_draft_tokens=4,
        topk=1,
        _draft_worker=dw,
        _target_worker=NS(model_runner=tmr),
    )
    # what the contracts read of the controller (batch_contracts.ContractView); the machine's
    # shape None: SPECULATING at the launch shape
    ctl = NS(
        worker=worker,
        topk=1,
        spec_steps=3,
        spec_tokens=4,
        zero_tax=None,
        fsm=NS(shape=None),
        shape_states={},
    )
    # outside an engine SGLang has no published spec config for get_spec() to read; the
    # server's top-k stands in (one attribute read in the engine)
    relay.spec_topk = lambda: 1
    contracts = build_contracts(ctl, 1)
    sub = BatchSubject(ctl)  # type: ignore[arg-type]
    results = {}
    for bs in (1, 16, 256):
        info = EagleDraftInput.__new__(EagleDraftInput)
        info.bonus_tokens = torch.zeros(bs, dtype=torch.int64)
        info.topk_p = torch.zeros(bs, 1)
        info.topk_index = torch.zeros(bs, 1, dtype=torch.int64)
        info.hidden_states = torch.zeros(bs, 128)
        sub.batch = NS(spec_info=info, seq_lens=torch.zeros(bs), forward_mode=FM())
        samples = []
        for _ in range(7):
            n = 5000
            t0 = time.perf_counter_ns()
            for _ in range(n):
                contracts.check(Mode.SPECULATING, sub)
            samples.append((time.perf_counter_ns() - t0) / n / 1000)
        results[bs] = statistics.median(samples)
        print(f"bs={bs:4d}  contract check (SPECULATING): {results[bs]:.2f} us")
    worst = max(results.values())
    print(f"contract_check_us: {worst:.2f} (budget <= 20 per decode forward; every=N divides it)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
