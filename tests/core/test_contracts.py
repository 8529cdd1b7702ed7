"""Contracts: per-mode checks, the one-line SpecStateError, and the sampling budget."""

from __future__ import annotations

import attrs
import pytest

from specfsm import Contracts, Mode, SpecStateError
from specfsm.fsm.contracts import describe, equals, has_dim, is_instance, is_none


@attrs.frozen
class FakeTensor:
    """Duck-typed tensor: the core reads only .shape and .dtype."""

    shape: tuple[int, ...]
    dtype: str = "int64"


@attrs.define
class Batch:
    bs: int
    spec_info: object = None
    width: int = 1


class DraftInput:
    def __init__(self, rows: int) -> None:
        self.hidden = FakeTensor((rows, 128), "float32")


def rules(width: int) -> Contracts[Batch]:
    spec = [
        is_instance("spec_info", lambda b: b.spec_info, DraftInput),
        has_dim(
            "spec_info.hidden",
            lambda b: getattr(b.spec_info, "hidden", None),
            0,
            lambda b: b.bs,
            "batch size",
        ),
        equals("width", lambda b: b.width, lambda b: width, "draft width"),
    ]
    plain = [
        is_none("spec_info", lambda b: b.spec_info),
        equals("width", lambda b: b.width, lambda b: 1, "plain width"),
    ]
    return Contracts(
        {Mode.SPECULATING: spec, Mode.DRAINING: (), Mode.PLAIN: plain, Mode.RESYNCING: ()}
    )


def test_clean_state_passes() -> None:
    """State that matches the mode raises nothing."""
    c = rules(16)
    c.check(Mode.SPECULATING, Batch(bs=10, spec_info=DraftInput(10), width=16))
    c.check(Mode.PLAIN, Batch(bs=10))
    assert c.checked == 2


def test_stale_spec_state_in_plain_is_one_line() -> None:
    """The seeds' bug class: K-wide state reaching a plain step is named in one line."""
    c = rules(16)
    stale = Batch(bs=10, spec_info=FakeTensor((160,)), width=16)
    with pytest.raises(SpecStateError) as info:
        c.check(Mode.PLAIN, stale)
    msg = str(info.value)
    assert (
        msg == "spec state violates mode PLAIN: spec_info: expected None, got FakeTensor[160] int64"
    )
    assert "\n" not in msg
    assert (info.value.mode, info.value.field) == (Mode.PLAIN, "spec_info")


def test_row_mismatch_names_expected_and_actual() -> None:
    """A rows != batch size mismatch names both sizes."""
    with pytest.raises(
        SpecStateError, match=r"dim 0 == batch size \(10\), got FakeTensor\[9, 128\]"
    ):
        rules(16).check(Mode.SPECULATING, Batch(bs=10, spec_info=DraftInput(9), width=16))


def test_sampling_budget() -> None:
    """every=N checks one forward in N."""
    c = Contracts({m: () for m in Mode}, every=4)
    for _ in range(12):
        c.check(Mode.PLAIN, Batch(bs=1))
    assert c.checked == 3


def test_constructor_validation() -> None:
    """Missing modes and every < 1 are refused."""
    with pytest.raises(ValueError, match="no rules"):
        Contracts({Mode.PLAIN: ()})
    with pytest.raises(ValueError, match="every"):
        Contracts({m: () for m in Mode}, every=0)


def test_describe() -> None:
    """describe() renders None, shapes and plain types."""
    assert describe(None) == "None"
    assert describe(FakeTensor((2, 3), "bf16")) == "FakeTensor[2, 3] bf16"
    assert describe(3) == "int"
