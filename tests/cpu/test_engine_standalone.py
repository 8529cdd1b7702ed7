"""Real SGLang engine, STANDALONE (draft = an identical copy of the target; high acceptance, so the
tree mask decides the outcome): greedy output == no-spec, chain and tree,
overlap scheduling off and on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("sglang")

from _cpu_testbed import engine_per_param
from _spec_checks import check_each_request_individually, check_equals_nospec

pytestmark = pytest.mark.engine

CONFIGS = [
    {"spec": "STANDALONE", "tree": False, "overlap": False},
    {"spec": "STANDALONE", "tree": True, "overlap": True},
]


@pytest.fixture(scope="module", params=CONFIGS, ids=["chain-sync", "tree-overlap"])
def engine(request: pytest.FixtureRequest) -> Iterator[Any]:
    yield from engine_per_param(request)


def test_greedy_equals_nospec(engine: Any, nospec_outputs: list[dict[str, Any]]) -> None:
    check_equals_nospec(engine, nospec_outputs)


def test_single_requests_equal_nospec(engine: Any, nospec_outputs: list[dict[str, Any]]) -> None:
    check_each_request_individually(engine, nospec_outputs)
