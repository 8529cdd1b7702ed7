"""A step the engine measured whole (the start-up profile's ``spec_step_*`` / ``plain_step``
rows) priced at another context: the measurement fixes the level, the table's forwards carry
it across contexts. On the H200 a profile at 278 tokens, taken flat, priced a chain-3 step at
bs 128 at 23 ms where serving at ~1400 tokens measured 52 ms (and the table at 1024 says 41)."""

from __future__ import annotations

import pytest

from specfsm.model.acceptance import DraftShape
from specfsm.model.costs import CostModel, load_table
from specfsm.model.tables import CostTable, overlay_table, spec_step_model

TWO_CTX = "h200_sglang0517_llama8b+h200_sglang0517_llama8b_ctx4096"
CHAIN3 = DraftShape.chain(3)
BS = (1, 16, 64, 128, 256)
PROFILE_CTX = 278


def _profile(ctx: int = PROFILE_CTX) -> CostTable:
    """Whole-step rows as the profile writes them: chain 3 at 0.6x, PLAIN at 0.9x the table's
    forwards at 1024 (an engine cheaper than the table, and a shorter context)."""
    base = CostModel(load_table(TWO_CTX), CHAIN3)
    rows = [(spec_step_model(CHAIN3), b, 4, ctx, round(0.6 * base.spec_ms(b), 4)) for b in BS]
    rows += [("plain_step", b, 1, ctx, round(0.9 * base.plain_ms(b), 4)) for b in BS]
    return CostTable(rows, "profile")


def _parts_spec(m: CostModel, bs: float) -> float:
    return (
        m.target_ms(bs, 4) + 2 * m.draft_ms(bs, 1) + m.extend_ms(bs, 4)
    )  # verify(4) + 2 draft steps + draft-extend(4): the chain-3 forwards


def test_affine_ctx_is_linear_through_the_nearest_contexts_and_floored() -> None:
    t = load_table(TWO_CTX)
    m1, m4 = t.ms("llama8b", 64, 1, 1024), t.ms("llama8b", 64, 1, 4096)
    slope = (m4 - m1) / 3072
    assert t.ms_affine_ctx("llama8b", 64, 1, 2560) == pytest.approx(t.ms("llama8b", 64, 1, 2560))
    assert t.ms_affine_ctx("llama8b", 64, 1, 278) == pytest.approx(m1 - 746 * slope)
    assert t.ms_affine_ctx("llama8b", 64, 1, 8192) == pytest.approx(m4 + 4096 * slope)
    assert t.ms_affine_ctx("llama8b", 64, 1, -(10**7)) == pytest.approx(0.25 * m1)
    one = load_table("h200_sglang0517_llama8b")
    assert one.ms_affine_ctx("llama8b", 64, 1, 278) == one.ms("llama8b", 64, 1, 278)


def test_profile_rows_price_their_own_context_as_measured() -> None:
    prof = _profile()
    m = CostModel(overlay_table(load_table(TWO_CTX), prof), CHAIN3, ctx=PROFILE_CTX)
    for b in BS:
        assert m.spec_ms(b) == pytest.approx(prof.ms(spec_step_model(CHAIN3), b, 4))
        assert m.zero_tax_ms(b) == pytest.approx(prof.ms("plain_step", b, 1))


@pytest.mark.parametrize("ctx", [1024, 1400, 4096])
def test_profile_rows_are_carried_by_the_tables_context_dependence(ctx: int) -> None:
    table = overlay_table(load_table(TWO_CTX), _profile())
    parts = CostModel(load_table(TWO_CTX), CHAIN3)
    m = CostModel(table, CHAIN3, ctx=ctx)
    t = parts.table
    for b in BS:
        at_p = (
            t.ms_affine_ctx("llama8b", b, 4, PROFILE_CTX)
            + 2 * t.ms_affine_ctx("eagle3_draft8b", b, 1, PROFILE_CTX)
            + t.ms_affine_ctx(parts._ext(4), b, 4, PROFILE_CTX)
        )
        here = _parts_spec(parts.at_ctx(ctx), b)
        measured = _profile().ms(spec_step_model(CHAIN3), b, 4)
        assert m.spec_ms(b) == pytest.approx(measured * here / at_p)
        plain = _profile().ms("plain_step", b, 1)
        ratio = parts.at_ctx(ctx).plain_ms(b) / t.ms_affine_ctx("llama8b", b, 1, PROFILE_CTX)
        assert m.zero_tax_ms(b) == pytest.approx(plain * ratio)


def test_carried_profile_keeps_the_tables_crossover_direction() -> None:
    """Taken flat, the 278-token profile makes chain 3 look cheaper at 1400 tokens than at
    278; carried, its cost grows with the context as the table's does, faster than PLAIN's."""
    table = overlay_table(load_table(TWO_CTX), _profile())
    short, long = CostModel(table, CHAIN3, ctx=PROFILE_CTX), CostModel(table, CHAIN3, ctx=1400)
    assert long.spec_ms(128) > 1.4 * short.spec_ms(128)
    assert long.spec_ms(128) / long.zero_tax_ms(128) > short.spec_ms(128) / short.zero_tax_ms(128)


def test_one_context_table_keeps_the_profile_flat() -> None:
    """With one measured context the table has no context dependence to carry: as before."""
    prof = _profile()
    m = CostModel(overlay_table(load_table("h200_sglang0517_llama8b"), prof), CHAIN3, ctx=1024)
    for b in BS:
        assert m.spec_ms(b) == pytest.approx(prof.ms(spec_step_model(CHAIN3), b, 4))
        assert m.zero_tax_ms(b) == pytest.approx(prof.ms("plain_step", b, 1))
