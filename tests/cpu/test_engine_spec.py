"""Real SGLang engine with speculative decoding on CPU: greedy output == no-spec, batched and one
request at a time, for EAGLE and EAGLE-3 (random tiny drafts) and STANDALONE (the draft is an
identical copy of the target: high acceptance, so the tree mask decides the outcome); each
algorithm runs a chain and a tree, one with overlap scheduling on and one with it off."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("sglang")

from _cpu_testbed import engine_per_param
from _spec_checks import check_each_request_individually, check_equals_nospec

pytestmark = pytest.mark.engine

CONFIGS = {
    "eagle3-chain-sync": {"spec": "EAGLE3", "tree": False, "overlap": False},
    "eagle3-tree-overlap": {"spec": "EAGLE3", "tree": True, "overlap": True},
    "eagle-chain-overlap": {"spec": "EAGLE", "tree": False, "overlap": True},
    "eagle-tree-sync": {"spec": "EAGLE", "tree": True, "overlap": False},
    "standalone-chain-sync": {"spec": "STANDALONE", "tree": False, "overlap": False},
    "standalone-tree-overlap": {"spec": "STANDALONE", "tree": True, "overlap": True},
}


@pytest.fixture(scope="module", params=list(CONFIGS.values()), ids=list(CONFIGS))
def engine(request: pytest.FixtureRequest) -> Iterator[Any]:
    yield from engine_per_param(request)


def test_greedy_equals_nospec(engine: Any, nospec_outputs: list[dict[str, Any]]) -> None:
    """A batch of greedy requests gives the no-speculation tokens."""
    check_equals_nospec(engine, nospec_outputs)


def test_single_requests_equal_nospec(engine: Any, nospec_outputs: list[dict[str, Any]]) -> None:
    """Each request sent alone gives the no-speculation tokens."""
    check_each_request_individually(engine, nospec_outputs)
