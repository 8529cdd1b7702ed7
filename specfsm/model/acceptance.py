"""Acceptance model: accept length (tokens per verify, incl. the bonus) from a draft shape.

A draft shape is EAGLE's (topk, num_steps, num_draft_tokens). A chain is topk=1 with
num_draft_tokens = num_steps + 1. With a per-token acceptance rate ``alpha`` (the probability
that the target accepts the draft's next token, given the prefix was accepted):

* Chain of K drafts: accepted drafts n has P(n >= j) = alpha^j for j <= K, so the mean accept
  length is 1 + alpha + ... + alpha^K = (1 - alpha^(K+1)) / (1 - alpha).
* Tree (stated approximation, "geometric rank with correlation discount"): the target's next
  token sits at rank r of the draft's candidate list with probability alpha * (1 - alpha)^(r-1);
  a node that tries b children therefore covers 1 - (1 - alpha)^b. Siblings are correlated in
  practice (they come from the same draft distribution), so b is discounted to
  b_eff = 1 + rho * (b - 1) with rho = 0.5 by default. Each accepted node tries
  b_d = min(topk, nodes left in the budget at depth d) children; depth d's acceptance is
  p_d = 1 - (1 - alpha)^(b_eff,d); the accept length is 1 + sum_j prod_{d<=j} p_d.
  For topk=1 this reduces exactly to the chain formula.

Pure Python; no numpy.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs


@attrs.frozen(slots=True, cache_hash=True)
class DraftShape:
    """EAGLE draft shape: topk candidates per step, num_steps draft steps, num_draft_tokens."""

    topk: int = 1
    steps: int = 3
    draft_tokens: int = 4

    def __attrs_post_init__(self) -> None:
        if self.topk < 1 or self.steps < 1 or self.draft_tokens < 2:
            raise ValueError(f"DraftShape: need topk>=1, steps>=1, draft_tokens>=2: {self}")
        if self.topk == 1 and self.draft_tokens != self.steps + 1:
            raise ValueError(f"DraftShape: a chain (topk=1) has draft_tokens = steps+1: {self}")
        if self.draft_tokens - 1 > _tree_nodes(self.topk, self.steps):
            raise ValueError(f"DraftShape: more draft tokens than tree nodes: {self}")

    @classmethod
    def chain(cls, steps: int) -> DraftShape:
        """A topk=1 chain of `steps` drafts (K = steps + 1 tokens verified)."""
        return cls(1, steps, steps + 1)

    @property
    def is_chain(self) -> bool:
        return self.topk == 1

    def label(self) -> str:
        if self.is_chain:
            return f"chain{self.steps}"
        return f"tree(topk={self.topk},steps={self.steps},tokens={self.draft_tokens})"


def _tree_nodes(topk: int, steps: int) -> int:
    return sum(topk**d for d in range(1, steps + 1))


def depth_widths(shape: DraftShape) -> list[int]:
    """Children an accepted node tries at each depth 1..steps (the stated tree approximation)."""
    budget = shape.draft_tokens - 1  # nodes besides the root (the last committed token)
    widths: list[int] = []
    for _ in range(shape.steps):
        b = min(shape.topk, budget)
        if b <= 0:
            break
        widths.append(b)
        budget -= b
    return widths


def depth_accept_probs(alpha: float, shape: DraftShape, rho: float = 0.5) -> list[float]:
    """p_d: probability that depth d is accepted given depth d-1 was (see module docstring)."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    out: list[float] = []
    for b in depth_widths(shape):
        b_eff = 1.0 + rho * (b - 1)
        out.append(1.0 - (1.0 - alpha) ** b_eff)
    return out


def accept_length(alpha: float, shape: DraftShape, rho: float = 0.5) -> float:
    """Mean tokens committed per verify (incl. the bonus) for `shape` at per-token rate `alpha`."""
    total, run = 1.0, 1.0
    for p in depth_accept_probs(alpha, shape, rho):
        run *= p
        total += run
    return total


def chain_accept_length(alpha: float, k: int) -> float:
    """(1 - alpha^(k+1)) / (1 - alpha): mean accept length of a chain of k drafts."""
    if k <= 0:
        return 1.0
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def alpha_from_accept_length(accept_len: float, shape: DraftShape, rho: float = 0.5) -> float:
    """Invert `accept_length` by bisection (monotone in alpha)."""
    top = accept_length(1.0, shape, rho)
    if accept_len <= 1.0:
        return 0.0
    if accept_len >= top:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if accept_length(mid, shape, rho) < accept_len:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


#: Named shapes: the chain of 3 and the tree (topk 4, 2 steps, 16 tokens) that the packaged
#: tables measure.
NAMED_SHAPES: dict[str, DraftShape] = {"chain3": DraftShape.chain(3), "tree": DraftShape(4, 2, 16)}

#: The shape syntax, for error messages and docs (the one syntax every config and command uses).
SHAPE_SYNTAX = (
    "'chainN' (e.g. 'chain3'), 'tree' (topk 4, 2 steps, 16 draft tokens), "
    "'topk,steps,draft_tokens' or a [topk, steps, draft_tokens] list"
)


def parse_shape(shape: object) -> DraftShape:
    """A DraftShape from "chainN" | "tree" | "topk,steps,draft_tokens" | [topk, steps,
    draft_tokens] | {"topk": .., "steps": .., "draft_tokens": ..} (or a DraftShape).

    Case and spaces in a string do not matter. ValueError names the shape and the syntax.
    """
    try:
        if isinstance(shape, DraftShape):
            return shape
        if isinstance(shape, str):
            text = shape.strip().lower().replace(" ", "")
            if text in NAMED_SHAPES:
                return NAMED_SHAPES[text]
            if text.startswith("chain") and text[5:].isdigit():
                return DraftShape.chain(int(text[5:]))
            parts = text.split(",")
            if len(parts) == 3:
                return DraftShape(*(int(x) for x in parts))
        elif isinstance(shape, Mapping):
            extra = set(shape) - {"topk", "steps", "draft_tokens"}
            if extra:
                raise ValueError(f"unknown keys {sorted(extra)}")
            return DraftShape(int(shape["topk"]), int(shape["steps"]), int(shape["draft_tokens"]))
        elif isinstance(shape, (list, tuple)) and len(shape) == 3:
            return DraftShape(*(int(x) for x in shape))
    except (TypeError, KeyError, ValueError) as exc:
        raise ValueError(f"bad draft shape {shape!r}: {exc}") from exc
    raise ValueError(f"bad draft shape {shape!r}: use {SHAPE_SYNTAX}")


#: The shape grid the shape choice is judged on: chains of 1, 2, 3, 5 and 7 steps and the
#: trees (topk 4, 2 steps, 16 tokens; the seeds') and (topk 4, 3 steps, 8 tokens).
DEFAULT_SHAPE_GRID: tuple[DraftShape, ...] = (
    DraftShape.chain(1),
    DraftShape.chain(2),
    DraftShape.chain(3),
    DraftShape.chain(5),
    DraftShape.chain(7),
    DraftShape(4, 2, 16),
    DraftShape(4, 3, 8),
)


def shape_text(shape: DraftShape) -> str:
    """The short spelling `parse_shape` reads back: "chainN" or "topk,steps,draft_tokens"."""
    if shape.is_chain:
        return f"chain{shape.steps}"
    return f"{shape.topk},{shape.steps},{shape.draft_tokens}"


def parse_shape_list(shapes: object) -> tuple[DraftShape, ...]:
    """Shapes from a list of shapes (each as `parse_shape` reads it) or one string of them
    separated by commas, semicolons or spaces, where a tree is three numbers in a row:
    "chain1,chain2,chain3,chain5,chain7,4,2,16" or "chain3 4,2,16" (brackets and quotes are
    ignored: "[chain1,[4,2,16]]", as the registry's shorthand passes it). Duplicates are dropped,
    order kept. ValueError names the bad item."""
    if isinstance(shapes, str):
        text = shapes.translate(str.maketrans(";", ",", "[]\"'"))
        words = [w for w in text.replace(" ", ",").split(",") if w.strip()]
        items: list[object] = []
        i = 0
        while i < len(words):
            w = words[i].strip()
            if w.isdigit():
                if i + 3 > len(words):
                    raise ValueError(
                        f"bad shape list {shapes!r}: a tree is topk,steps,draft_tokens "
                        f"(three numbers), got {','.join(words[i:])!r}"
                    )
                items.append(",".join(x.strip() for x in words[i : i + 3]))
                i += 3
            else:
                items.append(w)
                i += 1
    elif isinstance(shapes, (list, tuple)):
        items = list(shapes)
    else:
        raise ValueError(f"bad shape list {shapes!r}: expected a list or a string of shapes")
    out = [parse_shape(x) for x in items]
    if not out:
        raise ValueError("empty shape list")
    return tuple(dict.fromkeys(out))
