"""A burst of prefills, then decodes alone, through a policy in PLAIN: the shared driver of the
prefill-pressure tests (the policy's own and the shipped shapes example's)."""

from __future__ import annotations

from collections.abc import Callable

from specfsm import Mode, Observation
from specfsm.fsm.decision import Policy
from specfsm.fsm.verdict import Verdict

#: (iteration, batch size, step ms) -> a decode observation
Decode = Callable[[int, int, float], Observation]


def prefill(it: int, bs: int, queued: int = 0, tokens: int = 8192) -> Observation:
    return Observation(iteration=it, decode_bs=bs, running=bs, queued=queued, prefill_tokens=tokens)


def burst(pol: Policy, bs: int, ms: float, decode: Decode) -> list[Verdict | None]:
    """100 iterations of a 1300-token prefill (~30 ms of prefill each) between two decodes."""
    got = []
    for i in range(1, 201, 2):
        got.append(pol.decide(Mode.PLAIN, prefill(i, bs, tokens=1300)))
        got.append(pol.decide(Mode.PLAIN, decode(i + 1, bs, ms)))
    return got


def quiet(pol: Policy, bs: int, ms: float, decode: Decode) -> Verdict | None:
    """After `burst`: decodes alone until the first verdict (None: none in 199 iterations)."""
    for i in range(201, 400):
        v = pol.decide(Mode.PLAIN, decode(i, bs, ms))
        if v is not None:
            return v
    return None
