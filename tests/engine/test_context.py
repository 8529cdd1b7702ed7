"""A context-aware policy on the real engine: the controller reads the decode batch's KV
lengths from host-side data and hands their mean to the policy."""

from __future__ import annotations

from pathlib import Path

import pytest
from specfsm_testbed import engine as E
from specfsm_testbed import fsm as F

pytestmark = pytest.mark.engine

PROMPT_LEN = 20
NEW = 16


def test_goodput_policy_sees_mean_context(tmp_path: Path, reference: object) -> None:
    """With a two-context cost table, every decode observation line carries the batch's mean
    KV length (prompt + generated so far), growing as decoding proceeds; outputs equal
    no-spec."""
    prompts = E.default_prompts(3, length=PROMPT_LEN, seed=5)
    policy = {
        "name": "goodput",
        "table": ["h200_sglang0517_llama8b", "h200_sglang0517_llama8b_ctx4096"],
        "shape": "chain3",
        "accept_len": 2.2,
    }
    eng = F.make_fsm_engine(tmp_path, policy=policy, config={"observe_every": 1}, spec="EAGLE3")
    try:
        out = E.generate_greedy(eng, prompts, NEW)
    finally:
        eng.shutdown()
    assert out == reference(prompts, NEW)  # type: ignore[operator]
    config = [x for x in F.transitions(tmp_path) if x.get("event") == "specfsm.config"]
    assert config and config[0]["policy"]["ctx_aware"] is True
    obs = [x for x in F.transitions(tmp_path) if x.get("event") == "specfsm.observation"]
    # the policy sees prefills too: those lines price at the last decode's context (none yet
    # before the first decode) and carry prefill_tokens
    assert any(x.get("prefill_tokens") for x in obs)
    ctx = [x["mean_ctx"] for x in obs if not x.get("prefill_tokens")]
    assert ctx, "observe_every=1 should log every decode forward"
    assert all(PROMPT_LEN <= c <= PROMPT_LEN + NEW + 4 for c in ctx), ctx
    assert ctx[-1] > ctx[0]
