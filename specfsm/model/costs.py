"""Cost model: step-cost tables (`specfsm.model.tables`) -> predicted milliseconds and tokens/s
for plain decode, the PLAIN variants and speculation.

Per-iteration costs (SGLang EAGLE v2 structure, ``eagle_worker_v2.py``):

* plain decode: target(bs, 1)
* speculative iteration of shape (topk, steps, K): target verify(bs, K)
  + (steps - 1) draft steps(bs, topk) + draft-extend(bs, K). (The first draft step's logits
  come from the previous draft-extend; ``draft()`` runs ``num_steps - 1`` forwards.)
* warm plain (SGLang steps=0, vLLM K=0, and specfsm's PLAIN with the SGLang adapter's ``plain:
  "warm"``: the 1-wide steps=0 runtime state): when the table holds the whole step measured in
  the engine (model ``plain_warm_step``, q=1: a 1-token verify through the tree-verify path + a
  1-token draft-extend), that measurement; at a context the rows lack, the estimate below times
  the measured/estimate ratio at the nearest measured context. Otherwise the estimate: a K=1
  target verify (~ target(bs, 1)) + a K=1 draft-extend(bs, 1). 1 token. `warm_ms`. The
  estimate was 1.06-1.16x a decode step on the in-engine H200 table; the measured step is
  2.0-2.3x (benchmarks/gpu/results/2026-11-30_specfsm).
* zero-tax plain (the SGLang adapter's default, config ``plain: "zero_tax"``: one target decode
  forward, no draft work; the tokens decoded meanwhile are the draft's lag): `zero_tax_ms`.
  Where the table holds ``plain_zero_tax_step`` rows (q=1), decode(bs) x their ratio to the
  table's own decode row at the same bs and context, interpolated in bs and clamped at the
  measured ends; at a context the rows lack, the nearest measured context's ratio. The ratio,
  not the milliseconds, is what carries: the H200 rows come from an end-to-end overlap-on run
  (1.001-1.013x the no-spec decode step measured beside it,
  benchmarks/gpu/results/2026-11-30_zero_tax/specfsm_summary.txt) while the table's decode rows
  were timed synchronized with overlap off, so the CSV stores that table's decode x the measured
  ratio. A table without the rows prices it at decode x 1.0, flagged as an estimate
  (`zero_tax_measured`, `estimates`).
* DRAINING: the simulator charges the adapter's DRAINING forward as a warm step (the adapter
  attaches the 1-wide state on entry to DRAINING).
* RESYNCING, zero-tax (`resync_ms`): one zero-tax PLAIN step + the catch-up, a batched
  draft-extend over the lag tokens (tokens decoded while PLAIN, incl. this step's), i.e.
  extend(bs, q = lag_tokens / bs), extrapolated linearly in q, in one iteration. The catch-up
  was not timed on the GPU: it is an ESTIMATE from the table's draft-extend rows (draft rows
  where the table has no separate extend model). The target hidden states for the lag positions
  are kept by the adapter's lag buffer. RESYNCING, warm: one warm step (the draft never fell
  behind).
* whole steps measured in the engine (the SGLang adapter's start-up profile, config
  ``profile``, written in this format): a ``spec_step_<topk>x<steps>x<K>`` series prices that
  shape's speculative iteration as measured (decode-to-decode wall time inside the scheduler,
  overlap as served), a ``plain_step`` series the zero-tax PLAIN step; interpolated in bs like
  any row and between the contexts they were measured at; at another context, the nearest
  measured one's value x the ratio of the same step priced from the table's forwards at the two
  contexts (linear in ctx through the table's two nearest contexts, `CostTable.ms_affine_ctx`;
  x 1 with a one-context table). A shape without its series is priced from its forwards as
  above (`CostModel.unmeasured` says which).
* prefill of n prompt tokens: n x the cheapest per-token cost in the table (target and draft at
  the largest bs x q), a stated approximation: the tables hold no prefill shapes.

Pure Python (no numpy).
"""

from __future__ import annotations

from specfsm.fsm.kinds import PLAIN_VARIANTS, PlainVariant
from specfsm.model.acceptance import DraftShape, accept_length
from specfsm.model.tables import (
    COLUMNS,
    DRAFT_MODEL,
    ENGINE_TABLE,
    EXTEND_MODEL,
    PLAIN_STEP_MODEL,
    PLAIN_WARM_MODEL,
    PLAIN_ZERO_TAX_MODEL,
    SHARED_REF,
    SPEC_STEP_PREFIX,
    TARGET_MODEL,
    CostTable,
    check_models,
    interp,
    load_table,
    merge_tables,
    nearest,
    overlay_table,
    packaged_tables,
    parse_table,
    spec_step_model,
    step_model_shape,
    table_stem,
)

#: the table names callers import from here too
__all__ = [
    "COLUMNS",
    "DRAFT_MODEL",
    "ENGINE_TABLE",
    "EXTEND_MODEL",
    "PLAIN_STEP_MODEL",
    "PLAIN_VARIANTS",
    "PLAIN_WARM",
    "PLAIN_WARM_MODEL",
    "PLAIN_ZERO_TAX",
    "PLAIN_ZERO_TAX_MODEL",
    "SHARED_REF",
    "SPEC_STEP_PREFIX",
    "TARGET_MODEL",
    "CostModel",
    "CostTable",
    "check_models",
    "check_plain_variant",
    "load_table",
    "merge_tables",
    "overlay_table",
    "packaged_tables",
    "parse_table",
    "spec_step_model",
    "step_model_shape",
    "table_stem",
]

#: What PLAIN costs (`PlainVariant`): "zero_tax" (the adapter's default) is one target decode
#: forward per step, the draft catching up in RESYNCING; "warm" keeps the draft warm by a
#: 1-token verify + 1-token draft-extend every step.
PLAIN_WARM = PlainVariant.WARM
PLAIN_ZERO_TAX = PlainVariant.ZERO_TAX


def check_plain_variant(plain: str) -> PlainVariant:
    """The PLAIN implementation `plain` names ("zero-tax" is accepted for "zero_tax");
    ValueError for anything else."""
    return PlainVariant.parse(plain)


class CostModel:
    """Per-iteration costs (ms) and throughputs (tokens/s) from one table, one ctx, one shape."""

    def __init__(
        self,
        table: CostTable,
        shape: DraftShape | None = None,
        *,
        ctx: int | None = None,
        target: str = TARGET_MODEL,
        draft: str = DRAFT_MODEL,
        extend: str | None = None,
    ) -> None:
        self.table = table
        self.shape = shape if shape is not None else DraftShape.chain(3)
        self.target = target
        self.draft = draft
        if extend is None:
            extend = EXTEND_MODEL if EXTEND_MODEL in table.models else draft
        check_models(table, target, draft, extend)
        self.extend = extend
        self.ctx = ctx if ctx is not None else table.contexts(target)[0]
        self._extend_min_q = min(table.qs(extend, table.contexts(extend)[0]))
        t_bs = max(table.batch_sizes(target))
        t_q = max(table.qs(target, table.contexts(target)[0]))
        d_bs = max(table.batch_sizes(extend))
        d_q = max(table.qs(extend, table.contexts(extend)[0]))
        self._memo: dict[tuple[str, float, float], float] = {}
        self._near: dict[int, CostModel] = {}  # at_ctx_bucket's models, by bucketed ctx
        self.plain_warm_measured = PLAIN_WARM_MODEL in table.models
        #: shapes whose whole speculative iteration the table measures (`spec_step_model`)
        self.step_shapes = frozenset(
            s
            for m in table.models
            if m.startswith(SPEC_STEP_PREFIX) and (s := step_model_shape(m)) is not None
        )
        #: the zero-tax PLAIN step measured whole (``plain_step``, absolute ms)
        self.plain_step_measured = PLAIN_STEP_MODEL in table.models
        self.zero_tax_measured = self.plain_step_measured or PLAIN_ZERO_TAX_MODEL in table.models
        self.prefill_ms_per_token_target = self.target_ms(t_bs, t_q) / (t_bs * t_q)
        self.prefill_ms_per_token_draft = self.extend_ms(d_bs, d_q) / (d_bs * d_q)

    @property
    def contexts(self) -> list[int]:
        """The target's measured context lengths (more than one: lookups interpolate in ctx)."""
        return self.table.contexts(self.target)

    def at_ctx(self, ctx: int) -> CostModel:
        """The same table, shape and models, priced at context length `ctx`."""
        return CostModel(
            self.table,
            self.shape,
            ctx=ctx,
            target=self.target,
            draft=self.draft,
            extend=self.extend,
        )

    @staticmethod
    def ctx_bucket_of(ctx: float, bucket: int = 256) -> int:
        """`ctx` rounded to a multiple of `bucket` (at least one bucket)."""
        return max(1, round(ctx / bucket)) * bucket

    def at_ctx_bucket(self, ctx: float, bucket: int = 256) -> CostModel:
        """`at_ctx` at `ctx` rounded to a multiple of `bucket`, built once per bucket: what a
        per-iteration caller (a context-aware policy, the simulator) uses."""
        b = self.ctx_bucket_of(ctx, bucket)
        m = self._near.get(b)
        if m is None:
            m = self._near[b] = self.at_ctx(b)
        return m

    def with_shape(self, shape: DraftShape) -> CostModel:
        return CostModel(
            self.table,
            shape,
            ctx=self.ctx,
            target=self.target,
            draft=self.draft,
            extend=self.extend,
        )

    # ---------------------------------------------------------------- raw forwards
    def _lookup(self, model: str, bs: float, q: float) -> float:
        key = (model, bs, q)
        v = self._memo.get(key)
        if v is None:
            v = self.table.ms(model, bs, q, self.ctx)
            if len(self._memo) < 65536:
                self._memo[key] = v
        return v

    def _whole_step(self, model: str, bs: float, shape: DraftShape | None) -> float:
        """A step the table measures whole (`spec_step_model(shape)`, or ``plain_step`` for
        None), carried from its measured contexts to this one (`CostTable.whole_step_ms`)."""
        key = (model, bs, -1.0)
        v = self._memo.get(key)
        if v is None:
            q = 1 if shape is None else shape.draft_tokens
            parts: list[tuple[str, float, float]] = [(self.target, q, 1.0)]
            if shape is not None:
                parts += [(self.draft, shape.topk, shape.steps - 1.0), (self._ext(q), q, 1.0)]
            v = self.table.whole_step_ms(model, bs, q, self.ctx, parts)
            if len(self._memo) < 65536:
                self._memo[key] = v
        return v

    def target_ms(self, bs: float, q: float) -> float:
        return self._lookup(self.target, bs, q)

    def draft_ms(self, bs: float, q: float) -> float:
        return self._lookup(self.draft, bs, q)

    def extend_ms(self, bs: float, q: float) -> float:
        """A draft-extend of q tokens per request (the extend model; see the module docstring)."""
        return self._lookup(self._ext(q), bs, q)

    def _ext(self, q: float) -> str:
        return self.extend if self.extend == self.draft or q >= self._extend_min_q else self.draft

    # ---------------------------------------------------------------- iterations
    def plain_ms(self, bs: float) -> float:
        """One plain decode step (a server without speculation; zero-tax PLAIN: `zero_tax_ms`)."""
        return self.target_ms(bs, 1)

    def spec_ms(self, bs: float, shape: DraftShape | None = None) -> float:
        """One speculative iteration: verify(K) + (steps-1) draft steps(topk) + draft-extend(K)."""
        s = shape if shape is not None else self.shape
        if bs <= 0:
            return 0.0
        if s in self.step_shapes:  # measured whole in the engine (start-up profile)
            return self._whole_step(spec_step_model(s), bs, s)
        return (
            self.target_ms(bs, s.draft_tokens)
            + (s.steps - 1) * self.draft_ms(bs, s.topk)
            + self.extend_ms(bs, s.draft_tokens)
        )

    def unmeasured(self, shape: DraftShape | None = None) -> list[str]:
        """Why `shape`'s speculative iteration is interpolated rather than priced from measured
        rows: one line per forward whose q the table lacks at this model's context (the
        verify width draft_tokens of the target, the draft step's q = topk when steps > 1,
        the draft-extend's q = draft_tokens); empty when every forward is measured."""
        s = shape if shape is not None else self.shape
        out: list[str] = []
        if s in self.step_shapes:
            return out

        def qs(model: str) -> list[int]:
            ctxs = self.table.contexts(model)
            return self.table.qs(model, nearest(ctxs, self.ctx))

        tq = qs(self.target)
        if s.draft_tokens not in tq:
            out.append(f"verify q={s.draft_tokens} not measured ({self.target} q in {tq})")
        if s.steps > 1:
            dq = qs(self.draft)
            if s.topk not in dq:
                out.append(f"draft step q={s.topk} not measured ({self.draft} q in {dq})")
        eq = qs(self.extend)
        if s.draft_tokens not in eq:
            if self.extend != self.draft and s.draft_tokens < self._extend_min_q:
                dq = qs(self.draft)
                if s.draft_tokens not in dq:
                    out.append(
                        f"draft-extend q={s.draft_tokens} not measured (below {self.extend}'s "
                        f"q {eq}; {self.draft} q in {dq})"
                    )
            else:
                out.append(
                    f"draft-extend q={s.draft_tokens} not measured ({self.extend} q in {eq})"
                )
        return out

    def warm_estimate_ms(self, bs: float) -> float:
        """Warm plain step estimated from its parts: K=1 verify ~ decode, + K=1 draft-extend."""
        return self.target_ms(bs, 1) + self.extend_ms(bs, 1)

    def warm_ms(self, bs: float) -> float:
        """Warm plain step (SGLang steps=0): the engine's measured whole step where the table has
        it (``plain_warm_step``), else `warm_estimate_ms` (see the module docstring)."""
        if not self.plain_warm_measured or bs <= 0:
            return self.warm_estimate_ms(bs)
        ctxs = self.table.contexts(PLAIN_WARM_MODEL)
        if self.ctx in ctxs:
            return self._lookup(PLAIN_WARM_MODEL, bs, 1)
        key = ("warm-ratio", bs, 1.0)
        ratio = self._memo.get(key)
        if ratio is None:
            near = nearest(ctxs, self.ctx)
            at_near = self.at_ctx(near)
            ratio = self.table.ms(PLAIN_WARM_MODEL, bs, 1, near) / at_near.warm_estimate_ms(bs)
            if len(self._memo) < 65536:
                self._memo[key] = ratio
        return self.warm_estimate_ms(bs) * ratio

    def zero_tax_ratio(self, bs: float) -> float:
        """Zero-tax PLAIN step / decode step at batch size bs: from the ``plain_zero_tax_step``
        rows (each divided by the table's decode row at its bs and context; the context nearest
        this model's), linear in bs between the measured batch sizes and clamped outside them;
        1.0 (an estimate) when the table has no such rows."""
        if not self.zero_tax_measured:
            return 1.0
        key = ("zero-tax-ratio", float(bs), 1.0)
        ratio = self._memo.get(key)
        if ratio is None:
            near = nearest(self.table.contexts(PLAIN_ZERO_TAX_MODEL), self.ctx)
            bss = [float(b) for b in self.table.batch_sizes(PLAIN_ZERO_TAX_MODEL)]
            ratios = [
                self.table.ms(PLAIN_ZERO_TAX_MODEL, b, 1, near)
                / self.table.ms(self.target, b, 1, near)
                for b in bss
            ]
            x = min(max(float(bs), bss[0]), bss[-1])  # clamped: no extrapolation of a ratio
            ratio = interp(bss, ratios, x)
            if len(self._memo) < 65536:
                self._memo[key] = ratio
        return ratio

    def zero_tax_ms(self, bs: float) -> float:
        """Zero-tax PLAIN step (one target decode forward, no draft work): decode(bs) x
        `zero_tax_ratio` (see the module docstring)."""
        if bs <= 0:
            return 0.0
        if self.plain_step_measured:  # measured whole in the engine (start-up profile)
            return self._whole_step(PLAIN_STEP_MODEL, bs, None)
        return self.plain_ms(bs) * self.zero_tax_ratio(bs)

    def off_ms(self, bs: float, plain: str = PLAIN_ZERO_TAX) -> float:
        """One PLAIN step of the given implementation: "zero_tax" (`zero_tax_ms`, the default)
        or "warm" (`warm_ms`)."""
        if check_plain_variant(plain) == PLAIN_WARM:
            return self.warm_ms(bs)
        return self.zero_tax_ms(bs)

    def estimates(self, plain: str = PLAIN_ZERO_TAX) -> list[str]:
        """One line per cost this model prices for PLAIN `plain` (and its RESYNCING) that is an
        estimate, not a measured row of the table (what `specfsm tune` prints)."""
        src = self.table.source or "the table"
        if check_plain_variant(plain) == PLAIN_WARM:
            if self.plain_warm_measured:
                return []
            return [
                f"warm PLAIN: {src} has no {PLAIN_WARM_MODEL} rows; estimated from its parts "
                "(decode + a 1-token draft-extend), which understated the H200's measured step "
                "~2x"
            ]
        out = []
        if not self.zero_tax_measured:
            out.append(
                f"zero_tax PLAIN: {src} has no {PLAIN_ZERO_TAX_MODEL} rows; priced as the "
                "decode step x 1.0 (an estimate; measured on the H200: 1.001-1.013x)"
            )
        which = "draft-extend" if self.extend != self.draft else "draft"
        out.append(
            "RESYNCING catch-up: an estimate, not a GPU measurement: one batched "
            f"draft-extend over the lag tokens priced from the table's {which} rows "
            f"({self.extend}, linear in q past the measured q)"
        )
        return out

    def catchup_ms(self, bs: float, lag_tokens: float) -> float:
        """Batched draft-extend over `lag_tokens` tokens in total across `bs` requests."""
        if bs <= 0 or lag_tokens <= 0:
            return 0.0
        return self.extend_ms(bs, lag_tokens / bs)

    def resync_ms(self, bs: float, lag_tokens: float, plain: str = PLAIN_ZERO_TAX) -> float:
        """One RESYNCING iteration. Zero-tax: one zero-tax PLAIN step plus the catch-up
        draft-extend over `lag_tokens` in total (estimated, `catchup_ms`). Warm: one warm step
        (the draft never fell behind: `lag_tokens` is ignored)."""
        if check_plain_variant(plain) == PLAIN_WARM:
            return self.warm_ms(bs)
        return self.zero_tax_ms(bs) + self.catchup_ms(bs, lag_tokens)

    def prefill_ms(self, tokens: float, with_draft: bool = True) -> float:
        """Prompt prefill (approximation: the table's cheapest per-token cost)."""
        per = self.prefill_ms_per_token_target
        if with_draft:
            per += self.prefill_ms_per_token_draft
        return tokens * per

    # ---------------------------------------------------------------- throughput
    def plain_tps(self, bs: float) -> float:
        """Plain decode output tokens/s at batch size bs."""
        return 1000.0 * bs / self.plain_ms(bs) if bs > 0 else 0.0

    def spec_tps(self, bs: float, accept_len: float, shape: DraftShape | None = None) -> float:
        """Speculative output tokens/s at batch bs with mean accept length (incl. bonus)."""
        return 1000.0 * bs * accept_len / self.spec_ms(bs, shape) if bs > 0 else 0.0

    def spec_tps_alpha(self, bs: float, alpha: float, shape: DraftShape | None = None) -> float:
        s = shape if shape is not None else self.shape
        return self.spec_tps(bs, accept_length(alpha, s), s)

    def off_tps(self, bs: float, plain: str = PLAIN_ZERO_TAX) -> float:
        """Output tokens/s of the given PLAIN variant at batch size bs."""
        return 1000.0 * bs / self.off_ms(bs, plain) if bs > 0 else 0.0

    def speedup(self, bs: float, accept_len: float) -> float:
        """spec tokens/s divided by plain tokens/s."""
        return self.spec_tps(bs, accept_len) / self.plain_tps(bs)

    def crossover_bs(
        self, accept_len: float, max_bs: int = 1024, plain: str = PLAIN_ZERO_TAX
    ) -> int | None:
        """Smallest integer bs at which not speculating is at least as fast as speculating.

        `plain` picks what "not speculating" costs: "zero_tax" (`zero_tax_ms`, ~ a decode step)
        or "warm" (`warm_ms`: a 1-token verify + 1-token draft-extend, as SGLang steps=0 / vLLM
        K=0 / specfsm's warm PLAIN pay).
        None when speculation wins at every bs up to max_bs; 1 when it never wins.
        """
        for bs in range(1, max_bs + 1):
            if self.off_tps(bs, plain) >= self.spec_tps(bs, accept_len):
                return bs
        return None

    def describe(self) -> dict[str, object]:
        return {
            "table": self.table.source,
            "ctx": self.ctx,
            "shape": self.shape.label(),
            "target": self.target,
            "draft": self.draft,
            "extend": self.extend,
        }
