"""What the registry checks a policy description with: the value checks (each raising
`PolicySpecError` ``<key>: <reason>``) and the record of one policy kind."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from specfsm.fsm.decision import Policy


class PolicySpecError(ValueError):
    """A refused policy text or object: ``<key>: <reason>``."""

    def __init__(self, key: str, reason: str) -> None:
        self.key, self.reason = key, reason
        super().__init__(f"{key}: {reason}")


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_int(key: str, value: object, minimum: int | None = None, note: str = "") -> int:
    """`value` as an int (a JSON integer; not a bool, not a string) >= minimum."""
    if not _is_int(value) or (minimum is not None and value < minimum):  # type: ignore[operator]
        bound = f" >= {minimum}" if minimum is not None else ""
        raise PolicySpecError(key, f"expected an integer{bound}{note}, got {value!r}")
    return int(value)  # type: ignore[call-overload,no-any-return]


def check_number(key: str, value: object, lo: float = 0.0, hi: float | None = None) -> float:
    """`value` as a float (a JSON number, not NaN, not a bool) in [lo, hi]."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
    if not ok or value < lo or (hi is not None and value > hi):  # type: ignore[operator]
        rng = f"in [{lo:g}, {hi:g}]" if hi is not None else f">= {lo:g}"
        raise PolicySpecError(key, f"expected a number {rng}, got {value!r}")
    return float(value)  # type: ignore[arg-type]


def check_choice(key: str, value: object, choices: tuple[object, ...]) -> Any:
    """`value` if it is one of `choices` (a bool only matches a bool)."""
    if value not in choices or isinstance(value, bool) != any(isinstance(c, bool) for c in choices):
        allowed = " or ".join(json.dumps(c) for c in choices)
        raise PolicySpecError(key, f"expected {allowed}, got {value!r}")
    return value


def check_keys(key: str, value: Mapping[str, Any], known: tuple[str, ...]) -> None:
    """PolicySpecError naming the first key of `value` not in `known`."""
    unknown = sorted(set(value) - set(known))
    if unknown:
        raise PolicySpecError(
            f"{key}.{unknown[0]}" if key else unknown[0],
            f"unknown configuration keys {unknown} (known: {', '.join(known)})",
        )


Check = Callable[[str, object], Any]


@attrs.frozen
class PolicyKind:
    """One named policy: its parameters' checks, the required ones, and its builder.

    `params` None: the builder checks its own arguments (raising ValueError with the reason).
    """

    build: Callable[[dict[str, Any]], Policy]
    params: Mapping[str, Check] | None = None
    required: tuple[str, ...] = ()
    test_only: bool = False
