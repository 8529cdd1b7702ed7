"""Contracts: what spec state may exist on a batch in each mode.

An engine adapter declares, per mode, a tuple of checks over its batch object; `Contracts.check`
runs the current mode's checks and raises `SpecStateError` naming the mode, the field, the
expected and the actual shape/type. This turns "The size of tensor a (160) must match the size
of tensor b (2)" deep inside a forward into a one-line diagnosis before the forward starts.

The core knows nothing about tensors: shapes are read duck-typed (`.shape`, `.dtype`).
Checks have their own budget: `every=N` runs them on one forward in N (1 = every forward).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Generic, TypeVar

import attrs

from specfsm.fsm.errors import SpecStateError
from specfsm.fsm.table import Mode

S = TypeVar("S")


@attrs.frozen(slots=True)
class Violation:
    """One broken expectation: which field, what was expected, what was found."""

    field: str
    expected: str
    actual: str


Check = Callable[[S], Violation | None]


def describe(value: object) -> str:
    """A short type/shape description, e.g. `Tensor[160, 4] torch.int64` or `None`."""
    if value is None:
        return "None"
    shape = getattr(value, "shape", None)
    if shape is not None:
        dtype = getattr(value, "dtype", None)
        dims = ", ".join(str(int(d)) for d in shape)
        return f"{type(value).__name__}[{dims}]" + (f" {dtype}" if dtype is not None else "")
    return type(value).__name__


def is_none(field: str, get: Callable[[S], object]) -> Check[S]:
    """The field must be absent (None)."""

    def check(subject: S) -> Violation | None:
        value = get(subject)
        return None if value is None else Violation(field, "None", describe(value))

    return check


def is_instance(
    field: str, get: Callable[[S], object], *types: type, allow_none: bool = False
) -> Check[S]:
    """The field must be an instance of one of `types` (or None when allowed)."""
    names = " | ".join(t.__name__ for t in types) + (" | None" if allow_none else "")

    def check(subject: S) -> Violation | None:
        value = get(subject)
        if value is None and allow_none:
            return None
        return None if isinstance(value, types) else Violation(field, names, describe(value))

    return check


def has_dim(
    field: str,
    get: Callable[[S], object],
    dim: int,
    want: Callable[[S], int],
    what: str,
) -> Check[S]:
    """The field's size along `dim` must equal `want(subject)`; `what` names that size.

    A missing field (None) passes: pair with `is_instance`/`is_none` to require presence.
    """

    def check(subject: S) -> Violation | None:
        value = get(subject)
        if value is None:
            return None
        shape = getattr(value, "shape", None)
        expected = want(subject)
        if shape is None or len(shape) <= dim:
            return Violation(field, f"dim {dim} == {what} ({expected})", describe(value))
        if int(shape[dim]) != expected:
            return Violation(field, f"dim {dim} == {what} ({expected})", describe(value))
        return None

    return check


def equals(
    field: str, get: Callable[[S], object], want: Callable[[S], object], what: str
) -> Check[S]:
    """A scalar field must equal `want(subject)`."""

    def check(subject: S) -> Violation | None:
        value, expected = get(subject), want(subject)
        return (
            None if value == expected else Violation(field, f"{what} ({expected!r})", repr(value))
        )

    return check


class Contracts(Generic[S]):
    """Per-mode checks over an engine's batch object, with a sampling budget."""

    def __init__(self, rules: Mapping[Mode, Sequence[Check[S]]], every: int = 1) -> None:
        if every < 1:
            raise ValueError(
                f"Contracts: every must be >= 1 (1 = check every forward), got {every}"
            )
        missing = [m.name for m in Mode if m not in rules]
        if missing:
            raise ValueError(f"Contracts: no rules for modes {missing} (use () for none)")
        self._rules = {mode: tuple(checks) for mode, checks in rules.items()}
        self.every = every
        self._count = 0
        self.checked = 0

    def check(self, mode: Mode, subject: S) -> None:
        """Check one forward in `every`; raise SpecStateError on the first violation."""
        self._count += 1
        if self._count < self.every:
            return
        self._count = 0
        self.check_now(mode, subject)

    def check_now(self, mode: Mode, subject: S) -> None:
        """Check unconditionally; raise SpecStateError on the first violation."""
        self.checked += 1
        for rule in self._rules[mode]:
            violation = rule(subject)
            if violation is not None:
                raise SpecStateError(mode, violation.field, violation.expected, violation.actual)
