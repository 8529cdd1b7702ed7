"""Real SGLang engine, no speculation: greedy output == a transformers reference."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("sglang")

from _cpu_testbed import MAX_NEW_TOKENS, prompts

pytestmark = pytest.mark.engine


def test_nospec_equals_transformers(
    nospec_outputs: list[dict[str, Any]], hf_reference: dict[str, list[list[int]]]
) -> None:
    got = [o["output_ids"] for o in nospec_outputs]
    assert got == hf_reference["llama"]
    assert all(len(ids) == MAX_NEW_TOKENS for ids in got)
    assert len(got) == len(prompts())


def test_nospec_reports_no_speculation(nospec_outputs: list[dict[str, Any]]) -> None:
    for out in nospec_outputs:
        assert "spec_verify_ct" not in out["meta_info"]
