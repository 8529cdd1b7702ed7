"""The ranks of one engine compared iteration by iteration (`specfsm logs summary`): every
rank decides from the same global inputs, so they must do the same at every iteration."""

from __future__ import annotations

import attrs

from specfsm.logtools.reader import Engine, Run


@attrs.frozen
class Disagreement:
    """One iteration at which the ranks of one engine did different things."""

    engine: str
    run: int
    iteration: int
    by_rank: dict[int, str]

    def __str__(self) -> str:
        ranks = "; ".join(f"rank {r}: {v}" for r, v in sorted(self.by_rank.items()))
        return f"{self.engine} run {self.run} iteration {self.iteration}: {ranks}"


def _what(run: Run) -> dict[int, str]:
    """iteration -> what the rank did there (its transitions, else its observed mode)."""
    out: dict[int, list[str]] = {}
    for t in run.transitions:
        out.setdefault(t.iteration, []).append(
            f"{t.data['src']}->{t.data['dst']} ({t.data['trigger']})"
        )
    done = {it: ", ".join(v) for it, v in out.items()}
    for o in run.observations:
        done.setdefault(o.iteration, f"in {o.data['mode']}")
    return done


def disagreements(engine: Engine) -> list[Disagreement]:
    """Iterations (within every rank's logged range) where ranks' transitions or modes differ."""
    ranks = sorted(engine.ranks)
    if len(ranks) < 2:
        return []
    out: list[Disagreement] = []
    n_runs = max(len(engine.ranks[r]) for r in ranks)
    for i in range(n_runs):
        runs = {r: engine.ranks[r][i] for r in ranks if i < len(engine.ranks[r])}
        if len(runs) < 2:
            continue
        horizon = min(run.last_iteration for run in runs.values())
        whats = {r: _what(run) for r, run in runs.items()}
        # an observed mode only compares with an observed mode or a transition
        its = sorted({it for w in whats.values() for it in w if it <= horizon})
        for it in its:
            seen = {r: w.get(it) for r, w in whats.items()}
            present = {r: v for r, v in seen.items() if v is not None}
            moved = any("->" in v for v in present.values())
            if moved:
                vals = {
                    r: (v if v is not None and "->" in v else "no transition")
                    for r, v in seen.items()
                }
            else:
                vals = present
            if len(set(vals.values())) > 1:
                out.append(Disagreement(engine.name, i, it, vals))
    return out
