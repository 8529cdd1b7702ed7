"""`specfsm logs replay`: the recorded policy inputs through another policy, in a real SpecFSM.

Inputs: the run's observation lines and the policy inputs on its transition lines (one sample per
iteration, an observation line preferred), in iteration order. Each sample is one `step` of a
fresh `specfsm.fsm.machine.SpecFSM` with the other policy; the completion events are emitted as the
adapter does: DRAINED in the same iteration (one later with overlap scheduling), RESYNCED once
`resync_forwards` iterations ran in RESYNCING. A log sampled every N iterations feeds the policy
every N iterations (its debounce then counts samples): replay a log written with
`observe_every: 1` for exact decisions.

Pricing (`specfsm.model.costs.CostModel`): each sample stands for one iteration in the mode it
ran in, recorded or replayed: SPECULATING at spec_ms(bs) committing bs x accept length tokens,
the other modes one PLAIN step (bs tokens) of the chosen implementation (`plain="zero_tax"`,
the adapter's default, or `"warm"`). The accept
length is the sample's own while SPECULATING (outside it the adapter's accept_lens are the last
K-wide round's), else the last one seen while speculating, else `accept_len`.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from typing import Any

import attrs

from specfsm.fsm.decision import Policy
from specfsm.fsm.log import TransitionLog
from specfsm.fsm.machine import SpecFSM, TransitionRecord
from specfsm.fsm.observation import Observation
from specfsm.fsm.table import Event, Mode
from specfsm.logtools.reader import Record, Run
from specfsm.model.costs import PLAIN_WARM, CostModel


class _Quiet:
    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


@attrs.frozen
class Decision:
    iteration: int
    src: str
    dst: str
    trigger: str
    reason: str

    def text(self) -> str:
        return f"{self.src}->{self.dst} {self.trigger} ({self.reason})"


@attrs.define
class ReplayResult:
    samples: int
    from_observations: int
    recorded: list[Decision]
    replayed: list[Decision]
    recorded_modes: list[str]
    replayed_modes: list[str]
    iterations: list[int]
    differing_samples: int
    recorded_tps: float
    replayed_tps: float
    always_spec_tps: float
    never_tps: float
    accept_len_source: str
    policy: dict[str, object]

    def decision_diffs(self) -> list[tuple[int, list[Decision], list[Decision]]]:
        """Iterations where the recorded and replayed transitions differ, in order."""
        rec: dict[int, list[Decision]] = {}
        rep: dict[int, list[Decision]] = {}
        for d in self.recorded:
            rec.setdefault(d.iteration, []).append(d)
        for d in self.replayed:
            rep.setdefault(d.iteration, []).append(d)
        out = []
        for it in sorted(set(rec) | set(rep)):
            a = [(d.src, d.dst, d.trigger) for d in rec.get(it, [])]
            b = [(d.src, d.dst, d.trigger) for d in rep.get(it, [])]
            if a != b:
                out.append((it, rec.get(it, []), rep.get(it, [])))
        return out


def samples(run: Run) -> list[tuple[Record, bool]]:
    """(record, is_observation) per iteration: an observation line, else a transition line."""
    by_it: dict[int, tuple[Record, bool]] = {}
    for t in run.transitions:
        if "bs" in t.data:
            by_it.setdefault(t.iteration, (t, False))
    for o in run.observations:
        by_it[o.iteration] = (o, True)
    return [by_it[k] for k in sorted(by_it)]


def observation(rec: Record) -> Observation:
    d = rec.data
    return Observation(
        iteration=rec.iteration,
        decode_bs=int(d.get("bs", 0)),
        running=int(d.get("running", 0) or 0),
        accept_lens=tuple(d.get("accept_lens") or ()),
        queued=int(d.get("queued", 0) or 0),
        rank=rec.rank,
        mean_ctx=int(d.get("mean_ctx", 0) or 0),
    )


def recorded_mode_at(run: Run) -> Any:
    """iteration -> the mode the recorded forward of that iteration ran in."""
    its = [t.iteration for t in run.transitions]
    dsts = [str(t.data["dst"]) for t in run.transitions]
    first = run.initial_mode.value

    def at(it: int) -> str:
        i = bisect.bisect_right(its, it)
        return dsts[i - 1] if i else first

    return at


def _decision(it: int, src: Any, dst: Any, ev: Any, reason: str) -> Decision:
    return Decision(it, str(src), str(dst), str(ev), reason)


def run_policy(
    run: Run, policy: Policy, overlap: bool | None = None, resync_forwards: int | None = None
) -> tuple[list[Decision], list[str], list[Record]]:
    """Replayed transitions, the replayed mode of each sample's forward, and the samples."""
    cfg = run.config or {}
    if overlap is None:
        overlap = bool(cfg.get("overlap", False))
    if resync_forwards is None:
        resync_forwards = int(cfg.get("resync_forwards", 1) or 1)
    fsm = SpecFSM(policy, initial=run.initial_mode, log=TransitionLog(logger=_Quiet()))
    out: list[Decision] = []

    def listen(r: TransitionRecord) -> None:
        out.append(_decision(r.iteration, r.src.value, r.dst.value, r.event.name, r.reason))

    fsm.listeners.append(listen)
    entered = 0
    modes: list[str] = []
    recs = [r for r, _ in samples(run)]
    for rec in recs:
        obs = observation(rec)
        before = len(out)
        fsm.step(obs)
        mode = fsm.mode
        if len(out) > before:
            entered = obs.iteration
        if mode is Mode.DRAINING and (not overlap or obs.iteration > entered):
            fsm.process_event(Event.DRAINED, obs, "replay: no K-wide batch in flight")
        elif mode is Mode.RESYNCING and obs.iteration >= entered + resync_forwards:
            fsm.process_event(Event.RESYNCED, obs, "replay: draft caught up")
        modes.append(fsm.mode.value)
    return out, modes, recs


def _accept(rec: Record) -> float | None:
    lens = rec.data.get("accept_lens") or []
    mode = rec.data.get("mode") or rec.data.get("src")
    if mode != "SPECULATING" or not lens:
        return None
    return float(sum(lens)) / len(lens)


def price(
    cost: CostModel,
    recs: Sequence[Record],
    modes: Sequence[str],
    accepts: Sequence[float],
    plain: str = PLAIN_WARM,
) -> float:
    """Predicted output tokens/s of the sampled iterations run in `modes`."""
    tokens = ms = 0.0
    for rec, mode, acc in zip(recs, modes, accepts, strict=True):
        bs = float(rec.data.get("bs", 0))
        if bs <= 0:
            continue
        if mode == "SPECULATING":
            tokens += bs * acc
            ms += cost.spec_ms(bs)
        else:
            tokens += bs
            ms += cost.off_ms(bs, plain)
    return 1000.0 * tokens / ms if ms else math.nan


def replay(
    run: Run,
    policy: Policy,
    cost: CostModel,
    accept_len: float | None = None,
    plain: str = PLAIN_WARM,
) -> ReplayResult:
    """Replay `policy` on the run's samples and price both mode sequences."""
    replayed, modes, recs = run_policy(run, policy)
    at = recorded_mode_at(run)
    recorded_modes = [at(r.iteration) for r in recs]
    own = [a for a in (_accept(r) for r in recs) if a is not None]
    if accept_len is not None:
        fallback, where = accept_len, f"--accept-len {accept_len:g} where the log has none"
    elif own:
        fallback = sum(own) / len(own)
        where = f"the log's SPECULATING samples (mean {fallback:.2f})"
    else:
        raise ValueError(
            "the log has no accept length measured while SPECULATING: give --accept-len"
        )
    accepts: list[float] = []
    last = fallback
    for r in recs:
        a = _accept(r)
        if a is not None:
            last = a
        accepts.append(last)
    recorded = [
        _decision(
            t.iteration,
            t.data["src"],
            t.data["dst"],
            t.data["trigger"],
            str(t.data.get("reason", "")),
        )
        for t in run.transitions
    ]
    n_obs = sum(1 for _, is_obs in samples(run) if is_obs)
    return ReplayResult(
        samples=len(recs),
        from_observations=n_obs,
        recorded=recorded,
        replayed=replayed,
        recorded_modes=recorded_modes,
        replayed_modes=modes,
        iterations=[r.iteration for r in recs],
        differing_samples=sum(a != b for a, b in zip(recorded_modes, modes, strict=True)),
        recorded_tps=price(cost, recs, recorded_modes, accepts, plain),
        replayed_tps=price(cost, recs, modes, accepts, plain),
        always_spec_tps=price(cost, recs, ["SPECULATING"] * len(recs), accepts, plain),
        never_tps=price(cost, recs, ["PLAIN"] * len(recs), accepts, plain),
        accept_len_source=where,
        policy=policy.describe(),
    )


def format_replay(res: ReplayResult, label: str, cost: CostModel, max_rows: int = 20) -> str:
    lines = [
        f"== replay of {label}: {res.samples} samples ({res.from_observations} observation "
        f"lines, {res.samples - res.from_observations} transition lines)",
        f"policy: {res.policy}",
        f"transitions: recorded {len(res.recorded)}, replayed {len(res.replayed)}; samples in a "
        f"different mode: {res.differing_samples} of {res.samples}",
    ]
    diffs = res.decision_diffs()
    lines.append(f"iterations where the decisions differ: {len(diffs)}")
    for it, a, b in diffs[:max_rows]:
        ra = "; ".join(d.text() for d in a) or "-"
        rb = "; ".join(d.text() for d in b) or "-"
        lines.append(f"  iteration {it}:\n    recorded: {ra}\n    replayed: {rb}")
    if len(diffs) > max_rows:
        lines.append(f"  ... {len(diffs) - max_rows} more (--max-rows)")
    lines.append(
        f"cost model ({cost.table.source}, {cost.shape.label()}, ctx {cost.ctx}; accept length "
        f"from {res.accept_len_source}), predicted output tokens/s over the sampled iterations:"
    )
    for name, v in (
        ("recorded modes", res.recorded_tps),
        ("replayed policy", res.replayed_tps),
        ("always speculate", res.always_spec_tps),
        ("never speculate", res.never_tps),
    ):
        rel = f"  ({v / res.recorded_tps:.3f}x recorded)" if res.recorded_tps else ""
        lines.append(f"  {name:17s} {v:10.1f}{rel}")
    return "\n".join(lines)
