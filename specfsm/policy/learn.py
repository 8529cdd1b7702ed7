"""What the goodput policy learns online: per-depth acceptance and per-step cost corrections.

`DepthAcceptance`: per-depth acceptance counts from the verifies' accept lengths. A verify of a
shape with per-depth widths b_1..b_K (`depth_widths`: 1 for a chain; for a tree the children an
accepted node tries) that accepted n drafts says: depth j was reached and accepted for j <= n,
and depth n+1 was tried and missed when n < K. Counts are kept per (width, depth) and decay
per verify (a verify weighs `ema_alpha`; an iteration of n verifies decays the old counts by
(1 - ema_alpha)^n, but by no more than 1 - 1/`min_window`, so that at a large batch the window
still spans `min_window` iterations; lazily, through one growing scale, so an update costs
O(bs + K) and no pass over the keys). The
prediction for any shape, depth d of width b:

    p_(b,d) = (hits_(b,d) + w0 * f_b(alpha_fit)) / (trials_(b,d) + w0)

where f_b(a) = 1 - (1 - a)^(1 + rho (b - 1)) is the module's stated tree approximation
(`specfsm.model.acceptance`; f_1(a) = a for a chain) and alpha_fit pools every counted depth,
each inverted through f_b, with pseudo-trials at the prior alpha (the alpha implied by the
configured accept length at the launch shape): `initial_weight` of them decaying like the
counts (the prior dominates the first few verifies, a lucky first batch does not swing the
choice) and `prior_weight` that stay (the level the counts relax to in PLAIN). So a depth
never observed (a chain of 7 while only chains of 3 ran, or a tree before any tree ran) is
predicted from the alpha fitted to the depths that were, falling back to the prior with no
data; a depth with data moves toward its own rate once its trials outweigh `depth_weight`
(w0). In PLAIN there are no verifies: `relax` decays the counts (half-life
`relax_half_life` PLAIN iterations) so that a low stretch that sent the policy to PLAIN does
not keep it there for good.

`StepCalibration`: measured / predicted step time per (kind, shape) and log2 batch-size bucket
(`per_octave` buckets per doubling), an EMA (the first measurement of a key sets it); between
the observed buckets of a key linear in log2(bs), flat outside them. A step is a smooth
function of the batch size, and one interval far off its neighbours is a stall (a first-seen
kernel compiling, a prefill's GPU time landing in a decode interval), not the step: once a key
has a factor, a measurement at a bucket that has one is clipped to within `clip` x it, and the
first measurement of a new bucket, when it is more than `clip` x off the key's factor there
(interpolated; for a key never measured, the factor it is priced with: `factor`), is held
until the bucket's second, which starts the bucket with whichever of the two is nearer that
factor. On the H200 the first chain-3 interval at bs 2, 94 ms, set
that bucket's factor to 11.4 beside profiled neighbours at 1.0; the goodput policy then priced
speculation at 2 requests at 5-11x its step for minutes and left SPECULATING there four times
per bursty run, where the next intervals measured 8.1-8.6 ms. A real step that differs from its
neighbours by more than `clip` (a table fitted at another context) still starts its bucket at
the second measurement and moves the factor by the EMA.

A speculative shape never measured is interpolated in log2(verify width) between the measured
speculative shapes and the measured plain step as width 1 (flat outside them); `optimistic`,
it takes the smallest of the measured shapes' factors x (1 - `probe_discount`). The policy
prices leaving SPECULATING for PLAIN with the first, and its choice among shapes and leaving
PLAIN with the second (at most one probe per never-measured shape; optimism under
uncertainty: a shape that may be `probe_discount` cheaper than the cheapest measured one gets
tried, one step measures it, and the policy leaves it after one iteration when it was no
better, instead of never trying a better shape priced with another shape's factor: how a GPU
differs from the table depends on the shape; on the Triton-attention table a 16-wide tree
verify is 1.09x the FlashInfer table's at bs 1, a chain of 3 1.16x; at ctx 4096 a chain of 3
is 0.92x the ctx-1024 table's at bs 1, the tree 1.19x).
While no speculative step was measured (the policy left the launch shape at once), a shape
takes the plain step's factor, optimistically that x (1 - `probe_discount`): another
model on another GPU changes speculation's cost relative to decode (a 32B target is more
weight-bound than the 8B the table measured), so PLAIN probes speculation once when the
optimistic price says it may pay. A PLAIN or warm step never measured keeps the prior (1.0, the
table's decode row), the same optimism: one visit corrects it. `version` bumps only when a
factor moved by more than `tolerance` since the last bump, so a caller caching corrected
costs invalidates rarely.

Pure Python, deterministic.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

from specfsm.model.acceptance import DraftShape, depth_widths

_RENORM = 1e150
_PRIOR = (0, 0)  # the key of the initial (decaying) prior pseudo-trials


def _width_eff(b: int, rho: float) -> float:
    return 1.0 + rho * (b - 1)


class DepthAcceptance:
    """Per-(width, depth) acceptance counts with EMA decay; accept-length predictions."""

    def __init__(
        self,
        prior_alpha: float,
        *,
        rho: float = 0.5,
        ema_alpha: float = 0.01,
        min_window: int = 64,
        prior_weight: float = 16.0,
        initial_weight: float = 256.0,
        depth_weight: float = 64.0,
        relax_half_life: int = 512,
    ) -> None:
        if not 0.0 <= prior_alpha <= 1.0:
            raise ValueError(f"DepthAcceptance: prior_alpha must be in [0, 1]: {prior_alpha}")
        self.prior_alpha = prior_alpha
        self.rho = rho
        self.ema_alpha = ema_alpha
        self.prior_weight = prior_weight
        self.depth_weight = depth_weight
        self._relax = 0.5 ** (1.0 / relax_half_life) if relax_half_life else 1.0
        self._hits: dict[tuple[int, int], float] = {}  # scaled by _g
        self._trials: dict[tuple[int, int], float] = {}
        self._g = 1.0  # effective count = stored / _g
        #: an iteration decays the counts by at most 1 - 1/min_window, however many verifies
        #: it holds: at a large batch the window still spans min_window iterations
        self.min_window = min_window
        self._decay: dict[int, float] = {}  # verifies per iteration -> 1 / (1 - ema_alpha)^n
        self._widths: dict[DraftShape, tuple[int, ...]] = {}
        self._alpha: float | None = None  # alpha_fit cache (None: recompute)
        if initial_weight > 0:  # the prior as decaying pseudo-trials under key (0, 0)
            self._trials[_PRIOR] = initial_weight
            self._hits[_PRIOR] = initial_weight * prior_alpha
        #: bumps on every update (callers refresh predictions when it moved)
        self.version = 0

    def widths(self, shape: DraftShape) -> tuple[int, ...]:
        w = self._widths.get(shape)
        if w is None:
            w = self._widths[shape] = tuple(depth_widths(shape))
        return w

    def _grow(self, factor: float) -> None:
        self._g *= factor
        if self._g > _RENORM:
            g = self._g
            for k in self._hits:
                self._hits[k] /= g
                self._trials[k] /= g
            self._g = 1.0

    def observe(self, shape: DraftShape, accept_lens: Sequence[int]) -> None:
        """One iteration's verifies of `shape` (tokens per verify incl. the bonus)."""
        n = len(accept_lens)
        if not n:
            return
        widths = self.widths(shape)
        k = len(widths)
        d = self._decay.get(n)
        if d is None:
            keep = (1.0 - self.ema_alpha) ** n
            if self.min_window > 0:
                keep = max(keep, 1.0 - 1.0 / self.min_window)
            d = self._decay[n] = 1.0 / keep
        self._grow(d)
        g = self._g
        counts = [0] * (k + 1)
        for a in accept_lens:
            x = a - 1
            counts[0 if x < 0 else (k if x > k else x)] += 1
        reach = n  # verifies with >= depth-1 drafts accepted
        hits, trials = self._hits, self._trials
        for depth in range(1, k + 1):
            if reach <= 0:
                break
            tried = reach
            reach -= counts[depth - 1]
            key = (widths[depth - 1], depth)
            hits[key] = hits.get(key, 0.0) + reach * g
            trials[key] = trials.get(key, 0.0) + tried * g
        self._alpha = None
        self.version += 1

    def relax(self) -> None:
        """One iteration without verifies (PLAIN): the counts decay toward the prior."""
        if self._relax < 1.0 and self._trials:
            self._grow(1.0 / self._relax)
            self._alpha = None
            self.version += 1

    def alpha_fit(self) -> float:
        """The per-token alpha fitted to every counted depth (with the prior's pseudo-trials)."""
        if self._alpha is not None:
            return self._alpha
        num = self.prior_weight * self.prior_alpha
        den = self.prior_weight
        g = self._g
        for key, t in self._trials.items():
            tt = t / g
            if tt <= 0.0:
                continue
            p = min(1.0, max(0.0, self._hits[key] / t))
            b = key[0]
            a = p if b <= 1 else 1.0 - (1.0 - p) ** (1.0 / _width_eff(b, self.rho))
            num += tt * a
            den += tt
        self._alpha = num / den
        return self._alpha

    def alpha_sd(self) -> float:
        """The standard error of `alpha_fit` (binomial, over the effective trials and the
        prior's pseudo-trials)."""
        a = self.alpha_fit()
        t = self.prior_weight + sum(self._trials.values()) / self._g
        return math.sqrt(max(a * (1.0 - a), 1e-4) / t)

    def depth_probs(self, shape: DraftShape) -> list[float]:
        """Predicted p_d for each depth of `shape` (see the module docstring)."""
        a = self.alpha_fit()
        g, w0 = self._g, self.depth_weight
        out = []
        for depth, b in enumerate(self.widths(shape), 1):
            f = a if b == 1 else 1.0 - (1.0 - a) ** _width_eff(b, self.rho)
            key = (b, depth)
            t = self._trials.get(key, 0.0) / g
            h = self._hits.get(key, 0.0) / g
            out.append((h + w0 * f) / (t + w0))
        return out

    def accept_length(self, shape: DraftShape) -> float:
        """Predicted mean tokens per verify of `shape`, incl. the bonus."""
        total, run = 1.0, 1.0
        for p in self.depth_probs(shape):
            run *= p
            total += run
        return total

    def accept_length_upper(self, shape: DraftShape, z: float) -> float:
        """`accept_length` with each depth's p_d raised by z standard errors
        (sqrt(p (1 - p) / (trials + w0))), but never above the larger of p_d and the prior's
        f_b(prior_alpha): an upper bound for judging a probe that ran on few verifies, no more
        optimistic than the prior."""
        a = self.alpha_fit()
        g, w0, a0 = self._g, self.depth_weight, self.prior_alpha
        total, run = 1.0, 1.0
        for depth, b in enumerate(self.widths(shape), 1):
            we = _width_eff(b, self.rho)
            f = a if b == 1 else 1.0 - (1.0 - a) ** we
            f0 = a0 if b == 1 else 1.0 - (1.0 - a0) ** we
            key = (b, depth)
            n = self._trials.get(key, 0.0) / g + w0
            p = (self._hits.get(key, 0.0) / g + w0 * f) / n
            q = min(p + z * math.sqrt(max(p * (1.0 - p), 0.0) / n), max(p, f0))
            run *= q
            total += run
        return total

    def trials(self, width: int, depth: int) -> float:
        """Effective (decayed) trials counted at (width, depth)."""
        return self._trials.get((width, depth), 0.0) / self._g


class StepCalibration:
    """Measured / predicted step-time factors per (kind, shape) and log2-bs bucket."""

    def __init__(
        self,
        *,
        ema: float = 0.1,
        per_octave: int = 2,
        tolerance: float = 0.01,
        probe_discount: float = 0.1,
        clip: float = 4.0,
    ) -> None:
        if not 0.0 < ema <= 1.0:
            raise ValueError(f"StepCalibration: ema must be in (0, 1]: {ema}")
        if clip != 0.0 and clip <= 1.0:
            raise ValueError(f"StepCalibration: clip must be > 1 (0: off): {clip}")
        self.ema = ema
        self.clip = clip
        #: a new bucket's first measurement, held while it is more than `clip` off (key, bucket)
        self._held: dict[tuple[tuple[str, DraftShape | None], int], float] = {}
        self.per_octave = per_octave
        self.tolerance = tolerance
        self.probe_discount = probe_discount
        # (kind, shape or None) -> {bucket: factor}; sorted bucket lists beside
        self._f: dict[tuple[str, DraftShape | None], dict[int, float]] = {}
        self._b: dict[tuple[str, DraftShape | None], list[int]] = {}
        self._ref: dict[tuple[tuple[str, DraftShape | None], int], float] = {}
        #: bumps when a factor moved by more than `tolerance` since the last bump
        self.version = 0
        self.samples = 0

    def bucket(self, bs: float) -> int:
        return round(math.log2(max(1.0, bs)) * self.per_octave)

    def _update(self, key: tuple[str, DraftShape | None], b: int, ratio: float) -> None:
        by = self._f.get(key)
        if by is None:
            by = self._f[key] = {}
            self._b[key] = []
        old = by.get(b)
        if old is None:
            by[b] = ratio
            bisect.insort(self._b[key], b)
        else:
            by[b] = old + self.ema * (ratio - old)
        ref = self._ref.get((key, b))
        if ref is None or abs(by[b] / ref - 1.0) > self.tolerance:
            self._ref[(key, b)] = by[b]
            self.version += 1

    def observe(self, kind: str, shape: DraftShape | None, bs: int, ratio: float) -> None:
        """One measured step: `ratio` = measured ms / the prior's ms for it."""
        if not (ratio > 0.0 and math.isfinite(ratio)) or bs <= 0:
            return
        b = self.bucket(bs)
        self.samples += 1
        key = (kind, shape)
        if self.clip:
            ratio = self._robust(key, b, bs, ratio)
            if ratio <= 0.0:
                return
        self._update(key, b, ratio)

    def _robust(self, key: tuple[str, DraftShape | None], b: int, bs: int, ratio: float) -> float:
        """`ratio` clipped to within `clip` x the bucket's factor, or for a new bucket the
        measurement to start it with (0.0: held, see the module docstring)."""
        by = self._f.get(key)
        c = self.clip
        if by is None:  # the key's first measurement: against the factor it is priced with
            near = self.factor(key[0], key[1], bs)
        else:
            old = by.get(b)
            if old is not None:
                return min(max(ratio, old / c), old * c)
            at = self._at(key, bs)
            assert at is not None
            near = at
        held = self._held.pop((key, b), None)
        if held is None:
            if near / c <= ratio <= near * c:
                return ratio
            self._held[(key, b)] = ratio
            return 0.0
        return min(held, ratio, key=lambda r: abs(math.log(r / near)))

    def _at(self, key: tuple[str, DraftShape | None], bs: float) -> float | None:
        bl = self._b.get(key)
        if not bl:
            return None
        by = self._f[key]
        x = math.log2(max(1.0, bs)) * self.per_octave
        if x <= bl[0]:
            return by[bl[0]]
        if x >= bl[-1]:
            return by[bl[-1]]
        i = bisect.bisect_right(bl, x)
        x0, x1 = bl[i - 1], bl[i]
        return by[x0] + (by[x1] - by[x0]) * (x - x0) / (x1 - x0)

    def measured(self, kind: str, shape: DraftShape | None) -> bool:
        """Whether a step of this kind and shape was measured (at any batch size)."""
        return (kind, shape) in self._b

    def any_measured(self, kind: str) -> bool:
        """Whether any step of this kind was measured."""
        return any(k[0] == kind for k in self._b)

    def factor(
        self, kind: str, shape: DraftShape | None, bs: float, optimistic: bool = False
    ) -> float:
        """The correction for a `kind` step of `shape` at batch size bs (see the module
        docstring): its own key's; for a speculative shape never measured, interpolated in
        log2(verify width) between the measured shapes and the measured plain step as width 1
        (flat outside them), or, `optimistic`, the smallest of the measured shapes' factors
        x (1 - `probe_discount`); with no speculative step measured, the plain step's factor
        (`optimistic`: x (1 - `probe_discount`)); any other kind never measured, or nothing
        measured: 1.0."""
        f = self._at((kind, shape), bs)
        if f is not None:
            return f
        if kind != "spec" or shape is None:
            return 1.0
        pts: dict[float, list[float]] = {}
        for k in self._b:
            s = k[1]
            if k[0] == "spec" and s is not None:
                v = self._at(k, bs)
                if v is not None:
                    pts.setdefault(math.log2(s.draft_tokens), []).append(v)
        anchor = self._at(("plain", None), bs)
        if not pts:  # no speculative step measured yet: the plain step's factor, else none
            if anchor is None:
                return 1.0
            return (1.0 - self.probe_discount) * anchor if optimistic else anchor
        if optimistic:
            return (1.0 - self.probe_discount) * min(min(v) for v in pts.values())
        if anchor is not None:
            pts.setdefault(0.0, []).append(anchor)
        xs = sorted(pts)
        ys = [sum(pts[x]) / len(pts[x]) for x in xs]
        x = math.log2(shape.draft_tokens)
        if x <= xs[0]:
            return ys[0]
        if x >= xs[-1]:
            return ys[-1]
        i = bisect.bisect_right(xs, x)
        x0, x1 = xs[i - 1], xs[i]
        return ys[i - 1] + (ys[i] - ys[i - 1]) * (x - x0) / (x1 - x0)

    def describe(self) -> dict[str, object]:
        return {
            "samples": self.samples,
            "factors": {
                f"{k}:{s.label() if s is not None else '*'}": {
                    str(b): round(v, 4) for b, v in sorted(by.items())
                }
                for (k, s), by in self._f.items()
            },
        }
