"""tp_size=2 on the CPU engine: both scheduler ranks take identical decisions, outputs stay
identical to no speculation."""

from __future__ import annotations

from pathlib import Path

import pytest
from specfsm_testbed import engine as E
from specfsm_testbed import fsm as F

pytestmark = pytest.mark.engine


def test_tp2_identical_decisions(
    tmp_path: Path, reference: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two TP ranks log the same transitions at the same iterations; outputs equal no-spec."""
    monkeypatch.setenv("SGLANG_CPU_OMP_THREADS_BIND", "0|1")
    prompts = E.default_prompts(2, seed=3)
    eng = F.make_fsm_engine(
        tmp_path, policy={"name": "random", "seed": 4, "p": 0.5}, spec="EAGLE3", tp_size=2
    )
    try:
        out = E.generate_greedy(eng, prompts, 12)
    finally:
        eng.shutdown()
    assert out == reference(prompts, 12)  # type: ignore[operator]

    def decisions(rank: int) -> list[tuple[int, str, str, str]]:
        return [
            (x["iteration"], x["src"], x["dst"], x["trigger"])
            for x in F.transitions(tmp_path, rank)
            if x.get("event") == "specfsm.transition"
        ]

    assert decisions(0) and decisions(0) == decisions(1)
