"""Real SGLang engine, "bigram" target (attention output projections zero) with an identical
STANDALONE draft: every draft token is accepted, so every verify commits
speculative_num_steps + 1 tokens (bonus included) for every request; chain and tree, overlap
on and off. Greedy output == a transformers reference of the bigram target."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("sglang")

from _cpu_testbed import MAX_NEW_TOKENS, engine_per_param, prompts
from specfsm_testbed.engine import CHAIN, TREE, generate

pytestmark = pytest.mark.engine

CONFIGS = [
    {"target": "bigram", "spec": "STANDALONE", "tree": False, "overlap": True},
    {"target": "bigram", "spec": "STANDALONE", "tree": True, "overlap": False},
]


@pytest.fixture(scope="module", params=CONFIGS, ids=["chain-overlap", "tree-sync"])
def engine(request: pytest.FixtureRequest) -> Iterator[Any]:
    yield from engine_per_param(request)


@pytest.fixture(scope="module")
def outputs(engine: Any) -> list[dict[str, Any]]:
    return generate(engine, prompts(), MAX_NEW_TOKENS)


def _steps(engine: Any) -> int:
    return int(engine.server_args.speculative_num_steps)


def test_engine_runs_the_requested_shape(engine: Any) -> None:
    args = engine.server_args
    shape = TREE if args.speculative_eagle_topk > 1 else CHAIN
    for key, value in shape.items():
        assert getattr(args, key) == value


def test_accept_length_is_steps_plus_one_for_every_request(
    engine: Any, outputs: list[dict[str, Any]]
) -> None:
    steps = _steps(engine)
    for out in outputs:
        meta = out["meta_info"]
        verify_ct = meta["spec_verify_ct"]
        # 1 token from prefill, then steps + 1 per verify (MAX_NEW_TOKENS is chosen so).
        assert verify_ct == (MAX_NEW_TOKENS - 1) // (steps + 1)
        assert meta["spec_num_correct_drafts"] == steps * verify_ct
        hist = meta["spec_correct_drafts_histogram"]
        assert hist[steps] == verify_ct and sum(hist) == verify_ct
        # tokens committed per verify, bonus included
        assert (meta["spec_num_correct_drafts"] + verify_ct) / verify_ct == steps + 1


def test_greedy_equals_transformers(
    outputs: list[dict[str, Any]], hf_reference: dict[str, list[list[int]]]
) -> None:
    assert [o["output_ids"] for o in outputs] == hf_reference["bigram"]
