"""Step-cost tables: the CSV format, parsing, package data, merging and overlays.

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

Pure Python; tables load from a path or from package data via importlib.resources.
"""

from __future__ import annotations

import bisect
import csv
import math
import os
from collections.abc import Iterable, Sequence
from importlib import resources

from specfsm.model.acceptance import DraftShape

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
#: The table measured inside SGLang 0.5.17 on an H200 (both PLAIN steps measured): the default
#: of a policy that names none. (SHARED_REF's steps were timed outside the engine.)
ENGINE_TABLE = "h200_sglang0517_llama8b"


def interp(xs: Sequence[float], ys: Sequence[float], x: float) -> float:
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
            return self._ms_at_ctx(by_ctx[ctxs[0] if ctx is None else nearest(ctxs, ctx)], bs, q)
        if ctx <= ctxs[0]:
            return self._ms_at_ctx(by_ctx[ctxs[0]], bs, q)
        if ctx >= ctxs[-1]:
            return self._ms_at_ctx(by_ctx[ctxs[-1]], bs, q)
        i = bisect.bisect_right(ctxs, ctx)
        c0, c1 = ctxs[i - 1], ctxs[i]
        m0 = self._ms_at_ctx(by_ctx[c0], bs, q)
        m1 = self._ms_at_ctx(by_ctx[c1], bs, q)
        return m0 + (m1 - m0) * (ctx - c0) / (c1 - c0)

    def ms_affine_ctx(self, model: str, bs: float, q: float, ctx: float) -> float:
        """`ms` with the context dependence taken as linear through the two measured contexts
        nearest `ctx`, extrapolated beyond the ends (a decode forward's cost is affine in the
        context it reads: weights once, KV per token), floored at a quarter of the nearest
        context's value; flat with one measured context."""
        by_ctx = self._grid[model]
        ctxs = sorted(by_ctx)
        if len(ctxs) == 1 or ctxs[0] <= ctx <= ctxs[-1]:
            return self.ms(model, bs, q, ctx)
        c0, c1 = (ctxs[0], ctxs[1]) if ctx < ctxs[0] else (ctxs[-2], ctxs[-1])
        m0 = self._ms_at_ctx(by_ctx[c0], bs, q)
        m1 = self._ms_at_ctx(by_ctx[c1], bs, q)
        near = m0 if ctx < ctxs[0] else m1
        return max(0.25 * near, m0 + (m1 - m0) * (ctx - c0) / (c1 - c0))

    def whole_step_ms(
        self,
        model: str,
        bs: float,
        q: float,
        ctx: float,
        parts: Sequence[tuple[str, float, float]],
    ) -> float:
        """A whole step measured in the engine (`model`: the start-up profile's rows) priced at
        `ctx`: interpolated between its measured contexts; outside them, the nearest measured
        context's value x the ratio, at `ctx` and there, of the same step priced from the
        table's forwards (`parts`: (model, q, count) each, summed by `ms_affine_ctx`): the
        measurement fixes the engine's level, the table carries it across contexts (a profile
        at 278 tokens priced a chain-3 step at 1400 at half its served cost on the H200)."""
        ctxs = self.contexts(model)
        if ctxs[0] <= ctx <= ctxs[-1]:
            return self.ms(model, bs, q, ctx)
        near = nearest(ctxs, ctx)
        at = self.ms(model, bs, q, near)
        base = sum(n * self.ms_affine_ctx(m, bs, pq, near) for m, pq, n in parts)
        here = sum(n * self.ms_affine_ctx(m, bs, pq, ctx) for m, pq, n in parts)
        return at * here / base if base > 0.0 else at

    @staticmethod
    def _ms_at_ctx(by_q: dict[int, tuple[list[float], list[float]]], bs: float, q: float) -> float:
        qs = sorted(by_q)
        per_q = [interp(by_q[qq][0], by_q[qq][1], bs) for qq in qs]
        return interp([float(qq) for qq in qs], per_q, q)


def nearest(xs: Sequence[int], x: float) -> int:
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
