"""Test policies: flip speculation on a fixed rhythm or at random (tests, the GPU suite).

Not in the production registry (`specfsm.policy.registry.POLICIES`): a test opts in with
``make_policy(spec, registry=with_test_policies())`` or, for engines it starts, with
``SPECFSM_TEST_POLICIES=1`` in their environment.

every   ``k`` (required, >= 1): speculate for k decode forwards, then not for k, ...
random  ``seed``, ``p`` (in [0, 1]), ``hold`` (>= 1): speculate with probability p, drawn
        anew every `hold` iterations; a pure function of (seed, iteration), so ranks agree;
        ``prefills`` (bool): asked before prefill forwards too, so it switches right before
        prefills as well.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from specfsm.fsm.decision import Policy
from specfsm.fsm.table import Mode
from specfsm.policy.checks import PolicyKind, check_choice, check_int, check_number
from specfsm.policy.simple import ScriptedPolicy


def every(k: int) -> Policy:
    """Flip every `k` iterations, starting with speculation."""
    return ScriptedPolicy(lambda i: (i // k) % 2 == 1, initial=Mode.SPECULATING)


def random_flips(seed: int = 0, p: float = 0.5, hold: int = 1, prefills: bool = False) -> Policy:
    """Speculate with probability `p`, redrawn every `hold` iterations (rank-invariant)."""
    return ScriptedPolicy(
        lambda i: random.Random(seed * 1_000_003 + i // hold).random() < p, prefills=prefills
    )


def _every(a: dict[str, Any]) -> Policy:
    return every(a["k"])


def _random(a: dict[str, Any]) -> Policy:
    return random_flips(
        a.get("seed", 0), a.get("p", 0.5), a.get("hold", 1), a.get("prefills", False)
    )


#: The test policies, in the registry's form.
TEST_POLICIES: Mapping[str, PolicyKind] = {
    "every": PolicyKind(_every, {"k": lambda k, v: check_int(k, v, 1)}, ("k",), test_only=True),
    "random": PolicyKind(
        _random,
        {
            "seed": lambda k, v: check_int(k, v),
            "p": lambda k, v: check_number(k, v, 0.0, 1.0),
            "hold": lambda k, v: check_int(k, v, 1),
            "prefills": lambda k, v: check_choice(k, v, (True, False)),
        },
        (),
        test_only=True,
    ),
}
