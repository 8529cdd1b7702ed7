"""Checks shared by the speculative engine test modules."""

from __future__ import annotations

from typing import Any

from _cpu_testbed import MAX_NEW_TOKENS, prompts
from specfsm_testbed.engine import generate


def check_equals_nospec(engine: Any, nospec_outputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Greedy outputs of ``engine`` == the no-spec engine's, token for token; returns them."""
    outs = generate(engine, prompts(), MAX_NEW_TOKENS)
    assert [o["output_ids"] for o in outs] == [o["output_ids"] for o in nospec_outputs]
    for o in outs:
        assert o["meta_info"]["spec_verify_ct"] > 0  # speculation really ran
    return outs


def check_each_request_individually(engine: Any, nospec_outputs: list[dict[str, Any]]) -> None:
    """Batch size 1 (other shapes than the batched run) gives the same tokens."""
    for p, ref in zip(prompts()[:2], nospec_outputs[:2], strict=True):
        (out,) = generate(engine, [p], MAX_NEW_TOKENS)
        assert out["output_ids"] == ref["output_ids"]
