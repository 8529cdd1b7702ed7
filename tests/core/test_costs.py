"""Cost model and acceptance model, checked against the packaged table's own rows (read with
the csv module) and the relations between them, never against literal milliseconds."""

from __future__ import annotations

import csv
import itertools
from importlib import resources

import pytest

from specfsm.model.acceptance import (
    DraftShape,
    accept_length,
    alpha_from_accept_length,
    chain_accept_length,
    depth_widths,
)
from specfsm.model.costs import SHARED_REF, CostModel, load_table, packaged_tables, parse_table


@pytest.fixture(scope="module")
def model() -> CostModel:
    return CostModel(load_table(SHARED_REF), DraftShape.chain(3))


def _raw_rows(name: str) -> dict[tuple[str, int, int], float]:
    """The packaged table's rows as written in its CSV (model, bs, q) -> ms, read with the csv
    module, not with specfsm's parser: the oracle the cost model is checked against, so a
    recalibrated table needs no test edit."""
    text = resources.files("specfsm").joinpath("data", "costs", f"{name}.csv").read_text()
    rows = csv.DictReader(line for line in text.splitlines() if not line.startswith("#"))
    return {(r["model"], int(r["bs"]), int(r["q"])): float(r["ms_per_step"]) for r in rows}


RAW = _raw_rows(SHARED_REF)
T, D = "llama8b", "eagle3_draft8b"  # the shared table's target and draft


def raw(model: str, bs: int, q: int) -> float:
    return RAW[(model, bs, q)]


def _grid(model: str) -> tuple[list[int], list[int]]:
    """The measured batch sizes and q values of `model` (sorted)."""
    bss = sorted({bs for m, bs, _ in RAW if m == model})
    qs = sorted({q for m, _, q in RAW if m == model})
    return bss, qs


def test_shared_table_is_packaged() -> None:
    """The shared reference table ships as package data and loads by name."""
    assert SHARED_REF in packaged_tables()
    t = load_table(SHARED_REF)
    assert t.models == sorted({m for m, _, _ in RAW}) == [D, T]
    assert t.contexts(T) == [1024]


def test_exact_rows(model: CostModel) -> None:
    """Every measured point comes back exactly as the CSV has it."""
    for (m, bs, q), ms in RAW.items():
        got = model.target_ms(bs, q) if m == T else model.draft_ms(bs, q)
        assert got == pytest.approx(ms), (m, bs, q)
    assert model.plain_ms(1) == pytest.approx(raw(T, 1, 1))


def test_interpolation_over_bs_and_q(model: CostModel) -> None:
    """Between measured bs (and q) the cost is linear: a midpoint is its neighbours' mean."""
    bss, qs = _grid(T)
    b0, b1 = next((x, y) for x, y in itertools.pairwise(bss) if (y - x) % 2 == 0 and y - x > 1)
    q0, q1 = next((x, y) for x, y in itertools.pairwise(qs) if (y - x) % 2 == 0 and y - x > 1)
    bm, qm = (b0 + b1) // 2, (q0 + q1) // 2
    assert model.target_ms(bm, 1) == pytest.approx((raw(T, b0, 1) + raw(T, b1, 1)) / 2)
    assert model.target_ms(b1, qm) == pytest.approx((raw(T, b1, q0) + raw(T, b1, q1)) / 2)
    corners = (raw(T, b0, q0) + raw(T, b0, q1) + raw(T, b1, q0) + raw(T, b1, q1)) / 4
    assert model.target_ms(bm, qm) == pytest.approx(corners)


def test_extrapolation_and_zero(model: CostModel) -> None:
    """Past the largest measured bs the last segment extends linearly; bs 0 costs nothing."""
    bss, _ = _grid(T)
    lo, hi = bss[-2], bss[-1]
    slope = (raw(T, hi, 1) - raw(T, lo, 1)) / (hi - lo)
    assert model.plain_ms(hi + 128) == pytest.approx(raw(T, hi, 1) + 128 * slope)
    assert model.plain_ms(0) == 0.0


def test_spec_iteration_cost(model: CostModel) -> None:
    """Spec iteration = verify(q=K) + (steps-1) draft steps(q=topk) + draft-extend(q=K)."""
    assert model.spec_ms(1) == pytest.approx(raw(T, 1, 4) + 2 * raw(D, 1, 1) + raw(D, 1, 4))
    tree = DraftShape(4, 2, 16)
    assert model.spec_ms(64, tree) == pytest.approx(
        raw(T, 64, 16) + 1 * raw(D, 64, 4) + raw(D, 64, 16)
    )


def test_throughput_and_crossover(model: CostModel) -> None:
    """Plain tok/s = bs/ms; the crossover is the first bs where plain >= spec."""
    bss, _ = _grid(T)
    assert model.plain_tps(bss[-1]) == pytest.approx(1000 * bss[-1] / raw(T, bss[-1], 1))
    acc = chain_accept_length(0.8, 3)
    assert model.spec_tps(1, acc) == pytest.approx(1000 * acc / model.spec_ms(1))
    x = model.crossover_bs(acc)
    assert x is not None and 1 < x <= bss[-1]
    assert model.plain_tps(x) >= model.spec_tps(x, acc)
    assert all(model.plain_tps(b) < model.spec_tps(b, acc) for b in range(1, x))


def test_drain_resync_steps0_costs(model: CostModel) -> None:
    """DRAINING = one spec iteration; RESYNCING = plain + catch-up extend; steps0 = q1 both."""
    # 64 requests x 16 lag tokens each = draft(64, q=16)
    assert model.resync_ms(64, 64 * 16) == pytest.approx(raw(T, 64, 1) + raw(D, 64, 16))
    bss, _ = _grid(T)
    assert model.warm_ms(bss[-1]) == pytest.approx(raw(T, bss[-1], 1) + raw(D, bss[-1], 1))


def test_prefill_per_token(model: CostModel) -> None:
    """Prefill is priced per token at the largest measured forward (bs x q), target + draft."""
    tb, tq = max(_grid(T)[0]), max(_grid(T)[1])
    db, dq = max(_grid(D)[0]), max(_grid(D)[1])
    target = raw(T, tb, tq) / (tb * tq)
    draft = raw(D, db, dq) / (db * dq)
    assert model.prefill_ms(4096, with_draft=False) == pytest.approx(4096 * target)
    assert model.prefill_ms(4096) == pytest.approx(4096 * (target + draft))


def test_parse_skips_comments_and_checks_columns() -> None:
    """`#` lines are skipped; missing columns are an error."""
    t = parse_table("# hdr\nmodel,bs,q,ctx,ms_per_step\n# mid\nx,1,1,1,2.0\nx,3,1,1,4.0\n")
    assert t.ms("x", 2, 1) == pytest.approx(3.0)
    with pytest.raises(ValueError):
        parse_table("model,bs,q\nx,1,1\n")


def test_ctx_interpolation() -> None:
    """Two contexts: linear in ctx between them, clamped outside."""
    t = parse_table("model,bs,q,ctx,ms_per_step\nm,1,1,1000,1.0\nm,1,1,3000,3.0\n")
    assert t.ms("m", 1, 1, 2000) == pytest.approx(2.0)
    assert t.ms("m", 1, 1, 9000) == pytest.approx(3.0)


def test_chain_accept_formula() -> None:
    """Chain of K: (1 - a^(K+1)) / (1 - a); K=3, a=0.8 -> 2.952."""
    assert chain_accept_length(0.8, 3) == pytest.approx((1 - 0.8**4) / 0.2)
    assert accept_length(0.8, DraftShape.chain(3)) == pytest.approx(2.952)
    assert accept_length(1.0, DraftShape.chain(5)) == pytest.approx(6.0)


def test_tree_approximation() -> None:
    """Tree (4,2,16): 4 children per depth, b_eff 2.5; a=0.6 -> 1 + p + p^2, p = 1 - 0.4^2.5."""
    tree = DraftShape(4, 2, 16)
    assert depth_widths(tree) == [4, 4]
    p = 1 - 0.4**2.5
    assert accept_length(0.6, tree) == pytest.approx(1 + p + p * p)
    assert accept_length(0.6, tree) > accept_length(0.6, DraftShape.chain(2))


def test_alpha_inversion() -> None:
    """alpha_from_accept_length inverts accept_length."""
    for shape in (DraftShape.chain(3), DraftShape(4, 2, 16)):
        acc = accept_length(0.7, shape)
        assert alpha_from_accept_length(acc, shape) == pytest.approx(0.7, abs=1e-6)


def test_bad_shapes() -> None:
    """A chain must verify steps+1 tokens; a tree cannot have more tokens than nodes."""
    with pytest.raises(ValueError):
        DraftShape(1, 3, 8)
    with pytest.raises(ValueError):
        DraftShape(2, 2, 10)


def test_separate_draft_extend_model() -> None:
    """A table with an eagle3_draft_extend8b model (the in-SGLang tables) uses it for every
    draft-extend; below its smallest q (the warm step's 1-token extend) a draft forward of the
    same bs x q stands in."""
    text = "\n".join(
        [
            "model,bs,q,ctx,ms_per_step",
            *(f"llama8b,{b},{q},1024,{10 * b + q}" for b in (1, 8) for q in (1, 4)),
            *(f"eagle3_draft8b,{b},1,1024,{0.5 + b / 100}" for b in (1, 8)),
            *(
                f"eagle3_draft_extend8b,{b},{q},1024,{1 + b / 10 + q / 100}"
                for b in (1, 8)
                for q in (4, 16)
            ),
        ]
    )  # fmt: skip
    m = CostModel(parse_table(text, "t"), DraftShape.chain(3))
    assert m.extend == "eagle3_draft_extend8b"
    # spec = verify(8, 4) + 2 draft steps(8, 1) + extend(8, 4)
    assert m.spec_ms(8) == pytest.approx(84 + 2 * 0.58 + 1.84)
    assert m.warm_ms(8) == pytest.approx(81 + 0.58)  # extend q=1 < 4: draft forward stands in
    assert m.catchup_ms(8, 8 * 16) == pytest.approx(1 + 0.8 + 0.16)
    assert m.prefill_ms_per_token_draft == pytest.approx((1.8 + 0.16) / (8 * 16))
    assert CostModel(parse_table(text, "t"), extend="eagle3_draft8b").extend == "eagle3_draft8b"


@pytest.mark.parametrize("name", packaged_tables())
def test_every_packaged_table_builds_a_cost_model(name: str) -> None:
    """Every shipped table loads, prices a chain and a tree iteration, and names its source; a
    served table (whole steps only, ``*_served``) does so over the in-engine table it names."""
    table = load_table(f"h200_sglang0517_llama8b+{name}" if name.endswith("_served") else name)
    assert "llama8b" in table.models and "eagle3_draft8b" in table.models
    for shape in (DraftShape.chain(3), DraftShape(4, 2, 16)):
        m = CostModel(table, shape)
        assert 0 < m.plain_ms(1) < m.spec_ms(1)
        assert m.plain_ms(1) <= m.plain_ms(64)


def test_in_engine_ctx4096_crosses_over_earlier() -> None:
    """The in-engine tables: at ctx 4096 speculation stops paying at a smaller batch
    than at ctx 1024 (verify reads 4x the KV per request), for the chain and for the tree."""
    for shape in (DraftShape.chain(3), DraftShape(4, 2, 16)):
        short = CostModel(load_table("h200_sglang0517_llama8b"), shape)
        long = CostModel(load_table("h200_sglang0517_llama8b_ctx4096"), shape)
        acc = accept_length(0.6, shape)
        x_short, x_long = short.crossover_bs(acc), long.crossover_bs(acc)
        assert x_short is not None and x_long is not None
        assert x_long < x_short


def test_merged_tables_interpolate_over_ctx() -> None:
    """Loading "a+b" merges two tables (one engine at two contexts); a CostModel at a context
    between them interpolates, and a point measured twice is refused."""
    t = load_table("h200_sglang0517_llama8b+h200_sglang0517_llama8b_ctx4096")
    assert t.contexts("llama8b") == [1024, 4096]
    m = CostModel(t, DraftShape.chain(3))
    assert m.contexts == [1024, 4096] and m.ctx == 1024
    d1, d4 = m.plain_ms(64), m.at_ctx(4096).plain_ms(64)
    assert d1 == pytest.approx(load_table("h200_sglang0517_llama8b").ms("llama8b", 64, 1))
    assert m.at_ctx(2560).plain_ms(64) == pytest.approx((d1 + d4) / 2)
    with pytest.raises(ValueError, match="both give"):
        load_table("h200_sglang0517_llama8b+h200_sglang0517_llama8b")


def test_warm_plain_is_priced_from_the_engine_measured_step() -> None:
    """The in-engine table's measured warm PLAIN step (plain_warm_step) prices warm_ms exactly;
    a table without it falls back to the parts (verify ~ decode + 1-token draft-extend); at a
    context without measured rows the measured/estimate ratio of the nearest context carries."""
    from specfsm.model.costs import PLAIN_WARM_MODEL

    table = load_table("h200_sglang0517_llama8b")
    model = CostModel(table)
    assert model.plain_warm_measured
    for bs in (1, 16, 64, 256):
        assert model.warm_ms(bs) == pytest.approx(table.ms(PLAIN_WARM_MODEL, bs, 1, 1024))
        assert model.warm_ms(bs) > 1.5 * model.plain_ms(bs)  # the H200 says ~2x, not 1.1x
        assert model.warm_ms(bs) != pytest.approx(model.warm_estimate_ms(bs))
    ref = CostModel(load_table("h200_llama8b_shared_ref"))
    assert not ref.plain_warm_measured
    assert ref.warm_ms(64) == pytest.approx(ref.warm_estimate_ms(64))
    both = CostModel(load_table("h200_sglang0517_llama8b+h200_sglang0517_llama8b_ctx4096"))
    long = both.at_ctx(4096)
    ratio = table.ms(PLAIN_WARM_MODEL, 64, 1, 1024) / both.at_ctx(1024).warm_estimate_ms(64)
    assert long.warm_ms(64) == pytest.approx(long.warm_estimate_ms(64) * ratio)
    assert long.off_tps(64, "warm") == pytest.approx(64_000 / long.warm_ms(64))


ENGINE = "h200_sglang0517_llama8b"
ENGINE_4096 = "h200_sglang0517_llama8b_ctx4096"


def test_zero_tax_plain_is_priced_from_the_measured_rows() -> None:
    """The in-engine table's plain_zero_tax_step rows price zero-tax PLAIN (the adapter's
    default): within 2 % of a decode step and never cheaper at every bs (measured 1.001-1.013x
    end to end on the H200); at a measured bs exactly the CSV's row; warm PLAIN (the measured
    steps=0 step) costs more than 1.5x a decode step; off_ms prices by the implementation."""
    from specfsm.model.costs import PLAIN_ZERO_TAX_MODEL

    rows = _raw_rows(ENGINE)
    m = CostModel(load_table(ENGINE), DraftShape.chain(3))
    assert m.zero_tax_measured and m.plain_warm_measured
    measured = sorted(bs for name, bs, _ in rows if name == PLAIN_ZERO_TAX_MODEL)
    assert len(measured) >= 2
    for bs in measured:
        assert m.zero_tax_ms(bs) == pytest.approx(rows[(PLAIN_ZERO_TAX_MODEL, bs, 1)])
    for bs in (1, 2, 3, 8, 16, 40, 64, 100, 256, 512):
        assert m.plain_ms(bs) <= m.zero_tax_ms(bs) <= 1.02 * m.plain_ms(bs), bs
        assert m.warm_ms(bs) > 1.5 * m.plain_ms(bs), bs
        assert m.off_ms(bs) == m.off_ms(bs, "zero_tax") == m.zero_tax_ms(bs)
        assert m.off_ms(bs, "warm") == m.warm_ms(bs)
    assert m.estimates("warm") == []
    assert [e for e in m.estimates() if "zero_tax PLAIN" in e] == []


def test_resyncing_is_a_plain_step_plus_the_catch_up_estimate() -> None:
    """Zero-tax RESYNCING = a zero-tax PLAIN step + one batched draft-extend over the lag (the
    extend model at q = lag / bs), dearer than a PLAIN step and growing with the lag; warm
    RESYNCING is one warm step. The catch-up is flagged as an estimate."""
    m = CostModel(load_table(ENGINE), DraftShape.chain(3))
    for bs in (1, 16, 64, 256):
        assert m.resync_ms(bs, bs * 16) == pytest.approx(m.zero_tax_ms(bs) + m.extend_ms(bs, 16))
        assert m.resync_ms(bs, bs) > m.off_ms(bs)
        assert m.resync_ms(bs, bs * 128) > m.resync_ms(bs, bs * 16)
        assert m.resync_ms(bs, bs * 128, "warm") == m.warm_ms(bs)
    assert m.resync_ms(64, 0) == m.zero_tax_ms(64)
    assert any("catch-up" in e and "estimate" in e for e in m.estimates())


def test_zero_tax_ratio_carries_to_other_contexts_and_falls_back_to_decode() -> None:
    """Merged with the ctx 4096 table (no zero-tax rows), zero-tax PLAIN at 4096 is that
    context's decode x the ratio measured at 1024; the ctx 4096 table alone prices it as a
    decode step x 1.0 and flags that as an estimate."""
    from specfsm.model.costs import PLAIN_ZERO_TAX_MODEL

    one = load_table(ENGINE)
    both = CostModel(load_table(f"{ENGINE}+{ENGINE_4096}"), DraftShape.chain(3)).at_ctx(4096)
    ratio = one.ms(PLAIN_ZERO_TAX_MODEL, 64, 1) / one.ms("llama8b", 64, 1)
    assert both.zero_tax_ms(64) == pytest.approx(both.plain_ms(64) * ratio)
    alone = CostModel(load_table(ENGINE_4096), DraftShape.chain(3))
    assert not alone.zero_tax_measured
    assert alone.zero_tax_ms(64) == alone.plain_ms(64)
    flagged = [e for e in alone.estimates() if "zero_tax PLAIN" in e]
    assert len(flagged) == 1 and "estimate" in flagged[0] and PLAIN_ZERO_TAX_MODEL in flagged[0]


def test_plain_variant_names() -> None:
    """PLAIN implementations are named as the adapter's config names them; "zero-tax" is
    accepted for "zero_tax"; anything else is refused."""
    from specfsm.model.costs import PLAIN_VARIANTS, check_plain_variant

    assert PLAIN_VARIANTS == ("zero_tax", "warm")
    assert check_plain_variant("zero-tax") == "zero_tax" == check_plain_variant("zero_tax")
    with pytest.raises(ValueError, match="plain must be one of"):
        check_plain_variant("cold")


def test_in_engine_crossover_exists_against_zero_tax_plain_only() -> None:
    """On the in-engine table (chain3, alpha 0.7) switching to zero-tax PLAIN pays at some
    batch size, at a smaller one at ctx 4096; against warm PLAIN speculation always wins."""
    shape = DraftShape.chain(3)
    acc = accept_length(0.7, shape)
    m = CostModel(load_table(f"{ENGINE}+{ENGINE_4096}"), shape)
    x1, x4 = m.crossover_bs(acc), m.at_ctx(4096).crossover_bs(acc)
    assert x1 is not None and x4 is not None and x4 < x1 <= 256
    assert m.crossover_bs(acc, plain="warm") is None
