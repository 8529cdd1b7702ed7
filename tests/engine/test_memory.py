"""KV accounting under memory pressure: requests retracted back to the queue in every mode,
and SGLang's own pool invariant after all requests finished."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from specfsm_testbed import engine as E
from specfsm_testbed import fsm as F

pytestmark = pytest.mark.engine


@pytest.mark.parametrize(
    ("overlap", "agree"),
    [(False, None), (True, None), (False, "full")],
    ids=["sync", "overlap", "sync-agree-full"],
)
def test_retraction_under_switching(
    tmp_path: Path,
    request: pytest.FixtureRequest,
    overlap: bool,
    agree: str | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Retractions (SGLang's own SGLANG_TEST_RETRACT switch, every 7th forward, on top of a
    small KV pool) while modes flip: outputs still identical, retracted requests re-admitted in
    every mode, and SGLang's idle leak check passes afterwards. EAGLE-3 (random draft) and the
    agreeing ``full`` EAGLE draft (every draft token accepted: 4 tokens per verify)."""
    from specfsm_sglang import hooks

    # SGLang's admission control is conservative enough that a small pool alone rarely
    # retracts on this workload; its test switch forces decode retraction periodically.
    monkeypatch.setenv("SGLANG_TEST_RETRACT", "1")
    monkeypatch.setenv("SGLANG_TEST_RETRACT_INTERVAL", "7")
    prompts = E.default_prompts(8, length=16, seed=21)
    spec = {"spec": "EAGLE", "agree": agree} if agree else {"spec": "EAGLE3"}
    reference = E.AgreeReference() if agree else request.getfixturevalue("reference")
    eng = F.make_fsm_engine(
        tmp_path,
        policy={"name": "every", "k": 2},
        overlap=overlap,
        **spec,
        max_total_tokens=640,
        max_running_requests=8,
    )
    hooks.ensure_tokenizer_side()
    try:
        outs = E.generate(eng, prompts, 96)
        out = [o["output_ids"] for o in outs]
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
    accept = E.accept_length([o["meta_info"] for o in outs])
    print(
        f"retraction ({request.node.callspec.id}): {c.get('retracted', 0)} retracted, "
        f"accept length {accept:.2f}"
    )
    assert out == reference(prompts, 96)
    if agree:
        assert accept > 1.8, f"the accepting draft accepted {accept:.2f} tokens per verify"
    assert c.get("retracted", 0) > 0, "retractions were meant to happen"
    readmitted = c.get("arrivals_by_mode", {})
    assert sum(readmitted.values()) > len(prompts), "retracted requests were re-admitted"
    assert c["idle_checks"] > n0 and not c["failed"]
    assert sum(c["transitions"].values()) > 4
