"""Cost model: step-cost tables -> predicted tokens/s for plain decode and for speculation.

A table is a CSV with columns ``model,bs,q,ctx,ms_per_step`` (lines starting with ``#`` are
comments): milliseconds for one forward of `bs` requests with `q` new tokens each over a KV
context of `ctx` tokens. Two models are expected: the target (default ``llama8b``; q=1 is a
plain decode step, q=k a verify of k tokens) and the draft (default ``eagle3_draft8b``; q=topk
is one draft step, q=k a draft-extend of k tokens). A table may also hold the draft-extend as
its own model (``eagle3_draft_extend8b``, as the in-SGLang tables do, q = draft tokens); it is
then used for every draft-extend (after a verify, the warm step's, the catch-up, and the draft's
prefill rate). Below its smallest measured q (the warm step's 1-token extend) one draft forward
of the same bs x q shape stands in.

Interpolation: piecewise linear in bs between measured batch sizes (linear extrapolation past
the largest, using the last two points; bs below the smallest uses the smallest); piecewise
linear in q the same way; linear in ctx between measured contexts (clamped at the ends).

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
  target verify (~ target(bs, 1)) + a K=1 draft-extend(bs, 1). 1 token. `warm_ms` (alias
  `steps0_ms`). The estimate was 1.06-1.16x a decode step on the in-engine H200 table; the
  measured step is 2.0-2.3x (benchmarks/gpu/results/2026-11-30_specfsm).
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
* DRAINING (`drain_ms`): one speculative iteration of the in-flight batch. The simulator
  charges the adapter's DRAINING forward as a warm step instead (the adapter attaches the
  1-wide state on entry to DRAINING); this method is kept for analytic estimates.
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
  any row, flat in ctx outside the context they were measured at. A shape without its series is
  priced from its forwards as above (`CostModel.unmeasured` says which).
* prefill of n prompt tokens: n x the cheapest per-token cost in the table (target and draft at
  the largest bs x q), a stated approximation: the tables hold no prefill shapes.

Pure Python (no numpy); tables load from a path or from package data via importlib.resources.
"""

from __future__ import annotations

import bisect
import csv
import math
import os
from collections.abc import Iterable, Sequence
from importlib import resources

from specfsm.fsm.kinds import PLAIN_VARIANTS as PLAIN_VARIANTS
from specfsm.fsm.kinds import PlainVariant
from specfsm.model.acceptance import DraftShape, accept_length

TARGET_MODEL = "llama8b"
DRAFT_MODEL = "eagle3_draft8b"
EXTEND_MODEL = "eagle3_draft_extend8b"
#: The whole warm PLAIN step measured inside the engine (q=1); see `CostModel.warm_ms`.
PLAIN_WARM_MODEL = "plain_warm_step"
#: The zero-tax PLAIN step measured inside the engine (q=1), stored as the table's decode row x the
#: measured zero-tax/decode ratio; see `CostModel.zero_tax_ms`.
PLAIN_ZERO_TAX_MODEL = "plain_zero_tax_step"

#: Whole steps measured inside the engine by its start-up profile (the SGLang adapter's config
#: ``profile``): one speculative iteration of a shape (model ``spec_step_<topk>x<steps>x<K>``,
#: q = K) and one zero-tax PLAIN step (``plain_step``, q=1), milliseconds as measured (not a
#: ratio). Where a table holds them they price that shape's iteration / the zero-tax step
#: directly, instead of the sum of its forwards; see `CostModel.spec_ms` and `zero_tax_ms`.
SPEC_STEP_PREFIX = "spec_step_"
PLAIN_STEP_MODEL = "plain_step"


def spec_step_model(shape: DraftShape) -> str:
    """The whole-step model name of `shape`'s speculative iteration (``spec_step_1x3x4``)."""
    return f"{SPEC_STEP_PREFIX}{shape.topk}x{shape.steps}x{shape.draft_tokens}"


#: Package-data table names (specfsm/data/costs/<name>.csv).
SHARED_REF = "h200_llama8b_shared_ref"

#: What PLAIN costs (`PlainVariant`): "zero_tax" (the adapter's default) is one target decode
#: forward per step, the draft catching up in RESYNCING; "warm" keeps the draft warm by a
#: 1-token verify + 1-token draft-extend every step.
PLAIN_WARM = PlainVariant.WARM
PLAIN_ZERO_TAX = PlainVariant.ZERO_TAX


def check_plain_variant(plain: str) -> PlainVariant:
    """The PLAIN implementation `plain` names ("zero-tax" is accepted for "zero_tax");
    ValueError for anything else."""
    return PlainVariant.parse(plain)


def _interp(xs: Sequence[float], ys: Sequence[float], x: float) -> float:
    """Piecewise-linear in x; linear extrapolation above the last point; clamp below the first."""
    n = len(xs)
    if n == 1 or x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        x0, x1, y0, y1 = xs[-2], xs[-1], ys[-2], ys[-1]
    else:
        i = bisect.bisect_right(xs, x)
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


class CostTable:
    """Rows of (model, bs, q, ctx) -> ms, with lookups by interpolation."""

    def __init__(self, rows: Iterable[tuple[str, int, int, int, float]], source: str = "") -> None:
        self.source = source
        self.rows: list[tuple[str, int, int, int, float]] = list(rows)
        data: dict[str, dict[int, dict[int, dict[int, float]]]] = {}
        for model, bs, q, ctx, ms in self.rows:
            data.setdefault(model, {}).setdefault(ctx, {}).setdefault(q, {})[bs] = ms
        if not data:
            raise ValueError(f"cost table {source!r} has no rows")
        # model -> ctx -> q -> (bs list, ms list)
        self._grid: dict[str, dict[int, dict[int, tuple[list[float], list[float]]]]] = {}
        for model, by_ctx in data.items():
            self._grid[model] = {}
            for ctx, by_q in by_ctx.items():
                self._grid[model][ctx] = {}
                for q, by_bs in by_q.items():
                    bss = sorted(by_bs)
                    self._grid[model][ctx][q] = ([float(b) for b in bss], [by_bs[b] for b in bss])

    @property
    def models(self) -> list[str]:
        return sorted(self._grid)

    def contexts(self, model: str) -> list[int]:
        return sorted(self._grid[model])

    def qs(self, model: str, ctx: int) -> list[int]:
        return sorted(self._grid[model][ctx])

    def batch_sizes(self, model: str) -> list[int]:
        return sorted(
            {int(b) for c in self._grid[model].values() for bl, _ in c.values() for b in bl}
        )

    def ms(self, model: str, bs: float, q: float, ctx: float | None = None) -> float:
        """Interpolated ms for one forward of `bs` requests x `q` tokens at context `ctx`."""
        if bs <= 0:
            return 0.0
        try:
            by_ctx = self._grid[model]
        except KeyError:
            raise KeyError(f"model {model!r} not in cost table {self.source!r}") from None
        ctxs = sorted(by_ctx)
        if ctx is None or len(ctxs) == 1:
            return self._ms_at_ctx(by_ctx[ctxs[0] if ctx is None else _nearest(ctxs, ctx)], bs, q)
        if ctx <= ctxs[0]:
            return self._ms_at_ctx(by_ctx[ctxs[0]], bs, q)
        if ctx >= ctxs[-1]:
            return self._ms_at_ctx(by_ctx[ctxs[-1]], bs, q)
        i = bisect.bisect_right(ctxs, ctx)
        c0, c1 = ctxs[i - 1], ctxs[i]
        m0 = self._ms_at_ctx(by_ctx[c0], bs, q)
        m1 = self._ms_at_ctx(by_ctx[c1], bs, q)
        return m0 + (m1 - m0) * (ctx - c0) / (c1 - c0)

    @staticmethod
    def _ms_at_ctx(by_q: dict[int, tuple[list[float], list[float]]], bs: float, q: float) -> float:
        qs = sorted(by_q)
        per_q = [_interp(by_q[qq][0], by_q[qq][1], bs) for qq in qs]
        return _interp([float(qq) for qq in qs], per_q, q)


def _nearest(xs: Sequence[int], x: float) -> int:
    return min(xs, key=lambda v: abs(v - x))


COLUMNS = ("model", "bs", "q", "ctx", "ms_per_step")


def parse_table(text: str, source: str = "") -> CostTable:
    """Parse CSV text (``#`` comment lines skipped) into a CostTable.

    Every row is checked: five fields or more (extra columns are ignored), integer bs, q and
    ctx >= 1, a finite ms_per_step > 0, and no (model, bs, q, ctx) given twice. A refused row
    raises ValueError naming the source and its line number (1-based, comments counted)."""
    where = source or "<text>"
    numbered = [
        (n, ln)
        for n, ln in enumerate(text.splitlines(), 1)
        if ln.strip() and not ln.lstrip().startswith("#")
    ]
    if not numbered:
        raise ValueError(f"cost table {where}: empty (need a header {','.join(COLUMNS)} and rows)")
    header_no, header_line = numbered[0]
    header = [h.strip() for h in next(csv.reader([header_line]))]
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise ValueError(
            f"cost table {where} line {header_no}: the header must name the columns "
            f"{','.join(COLUMNS)}; it lacks {','.join(missing)}"
        )
    col = {c: header.index(c) for c in COLUMNS}
    need = max(col.values()) + 1
    rows: list[tuple[str, int, int, int, float]] = []
    seen: dict[tuple[str, int, int, int], int] = {}
    for n, line in numbered[1:]:
        fields = next(csv.reader([line]))
        at = f"cost table {where} line {n}"
        if len(fields) < need:
            raise ValueError(f"{at}: {len(fields)} fields, need {need} ({','.join(header)})")
        cell = {c: fields[i].strip() for c, i in col.items()}
        ints: list[int] = []
        for c in ("bs", "q", "ctx"):
            try:
                v = int(cell[c])
            except ValueError:
                v = 0
            if v < 1:
                raise ValueError(f"{at}: {c} must be an integer >= 1, got {cell[c]!r}")
            ints.append(v)
        try:
            ms = float(cell["ms_per_step"])
        except ValueError:
            ms = math.nan
        if not (math.isfinite(ms) and ms > 0):
            raise ValueError(
                f"{at}: ms_per_step must be a number of milliseconds > 0, "
                f"got {cell['ms_per_step']!r}"
            )
        if not cell["model"]:
            raise ValueError(f"{at}: empty model name")
        key = (cell["model"], ints[0], ints[1], ints[2])
        if key in seen:
            raise ValueError(f"{at}: (model, bs, q, ctx) {key} already given on line {seen[key]}")
        seen[key] = n
        rows.append((*key, ms))
    return CostTable(rows, source)


def packaged_tables() -> list[str]:
    """Names of the tables shipped as package data (without .csv)."""
    d = resources.files("specfsm").joinpath("data", "costs")
    if not d.is_dir():
        return []
    return sorted(p.name[:-4] for p in d.iterdir() if p.name.endswith(".csv"))


def merge_tables(tables: Sequence[CostTable]) -> CostTable:
    """One table holding the rows of several (e.g. the same engine measured at two context
    lengths, so that lookups interpolate over ctx). A (model, bs, q, ctx) given twice is an
    error, not a silent override."""
    seen: dict[tuple[str, int, int, int], str] = {}
    rows: list[tuple[str, int, int, int, float]] = []
    for t in tables:
        for row in t.rows:
            key = row[:4]
            if key in seen:
                raise ValueError(
                    f"cost tables {seen[key]!r} and {t.source!r} both give {key} "
                    "(model, bs, q, ctx): merge only tables that measure different points"
                )
            seen[key] = t.source
            rows.append(row)
    return CostTable(rows, "+".join(t.source for t in tables))


def overlay_table(prior: CostTable, profile: CostTable) -> CostTable:
    """`prior` with `profile` laid over it: every (model, q, ctx) series the profile measures
    (at any batch size) replaces the prior's series of that (model, q, ctx) entirely, so one
    curve never mixes two engines' batch sizes; the prior's other series stay (the engine's
    start-up profile over a shipped table)."""
    have = {(m, q, c) for m, _, q, c, _ in profile.rows}
    rows = [r for r in prior.rows if (r[0], r[2], r[3]) not in have]
    return CostTable([*rows, *profile.rows], f"{profile.source or 'profile'}>{prior.source}")


def step_model_shape(model: str) -> DraftShape | None:
    """The shape a ``spec_step_<topk>x<steps>x<K>`` model name measures, or None."""
    parts = model[len(SPEC_STEP_PREFIX) :].split("x")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        return None
    topk, steps, k = (int(p) for p in parts)
    try:
        return DraftShape(topk, steps, k)
    except ValueError:
        return None


def load_table(name_or_path: str) -> CostTable:
    """Load a table from a file path, or by package-data name (e.g. ``h200_llama8b_shared_ref``).
    ``"a+b"`` loads both and merges them (`merge_tables`), e.g.
    ``"h200_sglang0517_llama8b+h200_sglang0517_llama8b_ctx4096"`` for ctx 1024 and 4096."""
    if "+" in name_or_path and not os.path.exists(name_or_path):
        return merge_tables([load_table(part) for part in name_or_path.split("+") if part])
    if os.path.exists(name_or_path):
        with open(name_or_path, encoding="utf-8") as f:
            return parse_table(f.read(), name_or_path)
    name = name_or_path[:-4] if name_or_path.endswith(".csv") else name_or_path
    res = resources.files("specfsm").joinpath("data", "costs", f"{name}.csv")
    if not res.is_file():
        raise FileNotFoundError(
            f"no cost table {name_or_path!r}: not a path, and not one of {packaged_tables()}"
        )
    return parse_table(res.read_text(encoding="utf-8"), name)


def table_stem(name_or_path: str) -> str:
    """The stem of output file names built from a table argument (as `load_table` takes it):
    the base name without ``.csv`` (``some/dir/t.csv`` -> ``t``), each part of a merged
    ``"a+b"`` alike; any character but a letter, digit or ``._+-`` becomes ``_``, so the stem
    is one path component on every platform."""
    if "+" in name_or_path and not os.path.exists(name_or_path):
        return "+".join(table_stem(p) for p in name_or_path.split("+") if p) or "table"
    base = name_or_path.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    base = base[:-4] if base.endswith(".csv") else base
    safe = "".join(c if c.isascii() and (c.isalnum() or c in "._+-") else "_" for c in base)
    return safe.lstrip(".") or "table"


def check_models(
    table: CostTable, target: str = TARGET_MODEL, draft: str = DRAFT_MODEL, extend: str = ""
) -> None:
    """ValueError naming the table and listing the rows a CostModel needs, when any is absent."""
    need = {
        target: "the target (q=1 decode, q=K verify)",
        draft: "the draft (q=topk draft steps"
        + (")" if extend and extend != draft else ", q=K draft-extends)"),
    }
    if extend and extend != draft:
        need[extend] = "the draft-extend (q=K)"
    missing = [m for m in need if m not in table.models]
    if missing:
        rows = "; ".join(f"{m}: {what}" for m, what in need.items())
        raise ValueError(
            f"cost table {table.source or '<text>'} has no rows for model {', '.join(missing)}; "
            f"needs rows (model,bs,q,ctx,ms_per_step) for {rows}; "
            f"it has {', '.join(table.models)}"
        )


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

    def target_ms(self, bs: float, q: float) -> float:
        return self._lookup(self.target, bs, q)

    def draft_ms(self, bs: float, q: float) -> float:
        return self._lookup(self.draft, bs, q)

    def extend_ms(self, bs: float, q: float) -> float:
        """A draft-extend of q tokens per request (the extend model; see the module docstring)."""
        if self.extend == self.draft or q >= self._extend_min_q:
            return self._lookup(self.extend, bs, q)
        return self._lookup(self.draft, bs, q)

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
            return self._lookup(spec_step_model(s), bs, s.draft_tokens)
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
            return self.table.qs(model, _nearest(ctxs, self.ctx))

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
            near = _nearest(ctxs, self.ctx)
            at_near = self.at_ctx(near)
            ratio = self.table.ms(PLAIN_WARM_MODEL, bs, 1, near) / at_near.warm_estimate_ms(bs)
            if len(self._memo) < 65536:
                self._memo[key] = ratio
        return self.warm_estimate_ms(bs) * ratio

    def steps0_ms(self, bs: float) -> float:
        """SGLang adaptive at steps=0 (= `warm_ms`)."""
        return self.warm_ms(bs)

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
            near = _nearest(self.table.contexts(PLAIN_ZERO_TAX_MODEL), self.ctx)
            bss = [float(b) for b in self.table.batch_sizes(PLAIN_ZERO_TAX_MODEL)]
            ratios = [
                self.table.ms(PLAIN_ZERO_TAX_MODEL, b, 1, near)
                / self.table.ms(self.target, b, 1, near)
                for b in bss
            ]
            x = min(max(float(bs), bss[0]), bss[-1])  # clamped: no extrapolation of a ratio
            ratio = _interp(bss, ratios, x)
            if len(self._memo) < 65536:
                self._memo[key] = ratio
        return ratio

    def zero_tax_ms(self, bs: float) -> float:
        """Zero-tax PLAIN step (one target decode forward, no draft work): decode(bs) x
        `zero_tax_ratio` (see the module docstring)."""
        if bs <= 0:
            return 0.0
        if self.plain_step_measured:  # measured whole in the engine (start-up profile)
            return self._lookup(PLAIN_STEP_MODEL, bs, 1)
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

    def drain_ms(self, bs: float) -> float:
        """DRAINING: the in-flight speculative batch completes (one speculative iteration)."""
        return self.spec_ms(bs)

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
