"""Each configuration value parsed and checked on its own: JSON integers, numbers, choices,
objects and their keys, draft-shape lists, a policy (built by specfsm's one registry), and the
start-up profile's object. A refused value is a `ConfigError` ``<key>: <reason>``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import attrs

from specfsm import Policy
from specfsm.model.acceptance import DraftShape, parse_shape
from specfsm.policy import checks, registry
from specfsm_sglang.refusal import ConfigError


# ------------------------------------------------------------------------------- JSON values
# The value rules are the core's (specfsm.policy.checks, which the policy registry checks with);
# here they refuse with the configuration's ConfigError.
@contextmanager
def _as_config_error() -> Iterator[None]:
    try:
        yield
    except checks.PolicySpecError as exc:
        raise ConfigError(exc.key, exc.reason) from None


def check_int(key: str, value: object, minimum: int | None = None, note: str = "") -> int:
    """`value` as an int (a JSON integer; not a bool, not a string) >= minimum."""
    with _as_config_error():
        return checks.check_int(key, value, minimum, note)


def check_number(key: str, value: object, lo: float = 0.0, hi: float | None = None) -> float:
    """`value` as a float (a JSON number, not NaN, not a bool) in [lo, hi]."""
    with _as_config_error():
        return checks.check_number(key, value, lo, hi)


def check_choice(key: str, value: object, choices: tuple[object, ...]) -> Any:
    """`value` if it is one of `choices` (a bool only matches a bool)."""
    with _as_config_error():
        return checks.check_choice(key, value, choices)


def check_object(key: str, value: object, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        kind = "null" if value is None else type(value).__name__
        raise ConfigError(key, f"expected a JSON object ({what}), got a {kind}: {value!r:.60}")
    return value


def check_keys(key: str, value: Mapping[str, Any], known: tuple[str, ...]) -> None:
    """ConfigError naming the first key of `value` not in `known`."""
    with _as_config_error():
        checks.check_keys(key, value, known)


# ------------------------------------------------------------------------------- policy, shapes
def make_policy(spec: object, key: str = "policy") -> Policy:
    """Build a policy with specfsm's one registry (`specfsm.policy.registry`, its syntax and
    names documented there); ConfigError ``<key>.<param>: <reason>``."""
    try:
        return registry.make_policy(spec, key)
    except registry.PolicySpecError as exc:
        raise ConfigError(exc.key, exc.reason) from exc


def check_shapes(key: str, value: object) -> list[DraftShape]:
    """A list of draft-shape labels ("chain5", "4,2,16", [1, 5, 6]) -> DraftShapes."""
    if not isinstance(value, (list, tuple)):
        raise ConfigError(
            key, f'expected a list of shapes such as ["chain1", "chain5"], got {value!r}'
        )
    out: list[DraftShape] = []
    for i, item in enumerate(value):
        try:
            out.append(parse_shape(item))
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{key}[{i}]", str(exc)) from exc
    return out


# ------------------------------------------------------------------------------- profile
PROFILE_KEYS = ("bs", "forwards", "prompt_tokens", "save", "max_seconds")


@attrs.frozen(kw_only=True)
class ProfileSpec:
    """The checked ``profile`` configuration."""

    #: batch sizes to measure (None: the decode CUDA-graph batch sizes, `NO_GRAPH_BS` on CPU)
    bs: tuple[int, ...] | None = None
    #: measured decode forwards per (target, batch size)
    forwards: int = 8
    #: prompt tokens of each profile request
    prompt_tokens: int = 256
    #: CSV path of the rows (None: a temporary file)
    save: str | None = None
    #: the whole profile's time budget: batch sizes left when it is spent are skipped
    max_seconds: float = 300.0


def parse_profile(key: str, value: object) -> ProfileSpec | None:
    """``profile``: null / false (off), true (defaults) or an object of `PROFILE_KEYS`."""
    if value is None or value is False:
        return None
    if value is True:
        return ProfileSpec()
    obj = check_object(
        key, value, 'true, or {"bs": [1, 8, 32], "forwards": 8, "prompt_tokens": 256, ...}'
    )
    check_keys(key, obj, PROFILE_KEYS)
    bs: tuple[int, ...] | None = None
    if obj.get("bs") is not None:
        raw = obj["bs"]
        if not isinstance(raw, list) or not raw:
            raise ConfigError(f"{key}.bs", f"expected a non-empty list of batch sizes, got {raw!r}")
        bs = tuple(sorted({check_int(f"{key}.bs", b, 1) for b in raw}))
    save = obj.get("save")
    if save is not None and (not isinstance(save, str) or not save):
        raise ConfigError(f"{key}.save", f"expected a CSV path or null, got {save!r}")
    secs = obj.get("max_seconds", 300.0)
    if isinstance(secs, bool) or not isinstance(secs, (int, float)) or not secs > 0:
        raise ConfigError(f"{key}.max_seconds", f"expected a number > 0, got {secs!r}")
    return ProfileSpec(
        bs=bs,
        forwards=check_int(f"{key}.forwards", obj.get("forwards", 8), 1),
        prompt_tokens=check_int(f"{key}.prompt_tokens", obj.get("prompt_tokens", 256), 1),
        save=save,
        max_seconds=float(secs),
    )
