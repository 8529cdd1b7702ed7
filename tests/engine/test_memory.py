"""KV accounting under memory pressure: requests retracted back to the queue in every mode,
and SGLang's own pool invariant after all requests finished."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from specfsm_sglang.testbed import engine as E
from specfsm_sglang.testbed import fsm as F

pytestmark = pytest.mark.engine


@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlap"])
def test_retraction_under_switching(tmp_path: Path, reference: object, overlap: bool) -> None:
    """A KV pool too small for the batch forces retractions while modes flip; outputs are
    still identical and SGLang's idle leak check passes afterwards."""
    prompts = E.default_prompts(8, length=16, seed=21)
    eng = F.make_fsm_engine(
        tmp_path,
        policy={"name": "every", "k": 2},
        spec="EAGLE3",
        overlap=overlap,
        max_total_tokens=640,
        max_running_requests=8,
    )
    try:
        out = E.generate_greedy(eng, prompts, 96)
        time.sleep(1.0)
        c = F.counters(tmp_path, wait_s=5)
        n0 = c["idle_checks"]
        assert eng.generate(input_ids=prompts[0], sampling_params=E.sampling_params(2))[
            "output_ids"
        ]
        deadline = time.time() + 20
        while time.time() < deadline and F.counters(tmp_path)["idle_checks"] <= n0:
            time.sleep(0.3)
        c = F.counters(tmp_path)
    finally:
        eng.shutdown()
    assert out == reference(prompts, 96)  # type: ignore[operator]
    assert c.get("retracted", 0) > 0, "the pool was meant to force retractions"
    assert c["idle_checks"] > n0 and not c["failed"]
    assert sum(c["transitions"].values()) > 4
