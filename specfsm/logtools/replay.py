"""`specfsm logs replay`: the recorded policy inputs through another policy, in a real SpecFSM.

Inputs: the run's observation lines and the policy inputs on its transition lines (one sample per
iteration, an observation line preferred), in iteration order. Each sample is one `step` of a
fresh `specfsm.fsm.machine.SpecFSM` with the other policy; the completion events are emitted as the
adapter does: DRAINED in the same iteration (one later with overlap scheduling), RESYNCED once
`resync_forwards` iterations ran in RESYNCING. A log sampled every N iterations feeds the policy
every N iterations (its debounce then counts samples): replay a log written with
`observe_every: 1` for exact decisions.

Pricing (`specfsm.model.costs.CostModel`): each sample stands for one iteration in the mode it
ran in, recorded or replayed: SPECULATING at spec_ms(bs, shape) committing bs x accept length
tokens, the other modes one PLAIN step (bs tokens) of the chosen implementation
(`plain="zero_tax"`, the adapter's default, or `"warm"`).

Shapes: a SPECULATING sample is priced at the draft shape the machine was in. The
recorded shape starts at the launch shape (the `launch` argument, else the config line's
`shape_states.launch`, else the first RESHAPE's shape_from, else `cost.shape`) and follows each
RESHAPE transition's shape_to; the replayed machine is given the same launch shape and the
shapes the log names (`shape_states`, every shape_to), and follows its own policy's RESHAPEs;
"always speculate" runs the recorded shapes. A sample's accept lengths belong to the shape of
the K-wide round that produced them (`accept_lens_iteration` when logged, else the shape before
the sample's own transitions: the observation is taken before them). The accept length of a
sample priced at shape s is s's own: the sample's (when measured at s), else the last one
measured at s, else `accept_len`, else the mean of s's measurements, else (a shape never
measured while SPECULATING) the mean over every shape, said so in `accept_len_source`. A log
without shapes is one shape throughout: priced as before (`cost.shape`, the sample's accept
length, else the last one, else `accept_len` or the log's mean).
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
from specfsm.logtools.shapes import ShapeTrack, shape_track
from specfsm.model.acceptance import DraftShape
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
    #: the launch shape and, per sample, the shape of its forward (recorded / replayed)
    launch_shape: str = ""
    recorded_shapes: list[str] = attrs.Factory(list)
    replayed_shapes: list[str] = attrs.Factory(list)
    #: the log names shapes (shape_states or a RESHAPE)
    shapes_named: bool = False

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


def observation(
    rec: Record, accept_shape: DraftShape | None = None, shape: DraftShape | None = None
) -> Observation:
    d = rec.data
    lens = tuple(d.get("accept_lens") or ())
    return Observation(
        iteration=rec.iteration,
        decode_bs=int(d.get("bs", 0)),
        running=int(d.get("running", 0) or 0),
        accept_lens=lens,
        queued=int(d.get("queued", 0) or 0),
        rank=rec.rank,
        mean_ctx=int(d.get("mean_ctx", 0) or 0),
        accept_shape=accept_shape if lens else None,
        shape=shape,
        prefill_tokens=int(d.get("prefill_tokens", 0) or 0),
        draft_debt=int(d.get("draft_debt", 0) or 0),
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
    run: Run,
    policy: Policy,
    overlap: bool | None = None,
    resync_forwards: int | None = None,
    track: ShapeTrack | None = None,
) -> tuple[list[Decision], list[str], list[Record], list[DraftShape | None]]:
    """Replayed transitions, the replayed mode of each sample's forward, the samples, and the
    replayed machine's shape at each sample's forward (None: the launch shape, unnamed).

    With a `track` that names shapes the machine starts at its launch shape, may RESHAPE among
    its allowed shapes, and each observation carries the machine's shape and the recorded shape
    its accept lengths came from."""
    cfg = run.config or {}
    if overlap is None:
        overlap = bool(cfg.get("overlap", False))
    if resync_forwards is None:
        resync_forwards = int(cfg.get("resync_forwards", 1) or 1)
    named = track is not None and track.named
    fsm = SpecFSM(
        policy,
        initial=run.initial_mode,
        log=TransitionLog(logger=_Quiet()),
        shapes=track.allowed if track is not None and named else (),
        shape=track.launch if track is not None and named else None,
    )
    out: list[Decision] = []

    def listen(r: TransitionRecord) -> None:
        out.append(_decision(r.iteration, r.src.value, r.dst.value, r.event.name, r.reason))

    fsm.listeners.append(listen)
    entered = 0
    modes: list[str] = []
    shapes: list[DraftShape | None] = []
    recs = [r for r, _ in samples(run)]
    for rec in recs:
        if track is not None and named:
            obs = observation(rec, _accept_shape(rec, track), fsm.shape)
        else:
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
        shapes.append(fsm.shape)
    return out, modes, recs, shapes


def _accept_shape(rec: Record, track: ShapeTrack) -> DraftShape:
    """The recorded shape of the K-wide round whose accept lengths `rec` carries."""
    round_it = rec.data.get("accept_lens_iteration")
    if isinstance(round_it, int) and not isinstance(round_it, bool):
        return track.at(round_it)
    return track.at(rec.iteration, before=True)


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
    shapes: Sequence[DraftShape | None] | None = None,
) -> float:
    """Predicted output tokens/s of the sampled iterations run in `modes`, SPECULATING at
    `shapes` (per sample; None or absent: `cost.shape`)."""
    tokens = ms = 0.0
    per = shapes if shapes is not None else [None] * len(recs)
    for rec, mode, acc, shape in zip(recs, modes, accepts, per, strict=True):
        bs = float(rec.data.get("bs", 0))
        if bs <= 0:
            continue
        if mode == "SPECULATING":
            tokens += bs * acc
            ms += cost.spec_ms(bs, shape)
        else:
            tokens += bs
            ms += cost.off_ms(bs, plain)
    return 1000.0 * tokens / ms if ms else math.nan


def _accepts(
    measured: Sequence[tuple[DraftShape, float] | None],
    shapes: Sequence[DraftShape],
    fallback: dict[DraftShape, float],
) -> list[float]:
    """Per sample, the accept length of the shape it is priced at: the sample's own measured at
    that shape, else the last one measured at it, else the shape's fallback."""
    last: dict[DraftShape, float] = {}
    out: list[float] = []
    for m, shape in zip(measured, shapes, strict=True):
        if m is not None:
            last[m[0]] = m[1]
        out.append(last.get(shape, fallback[shape]))
    return out


def replay(
    run: Run,
    policy: Policy,
    cost: CostModel,
    accept_len: float | None = None,
    plain: str = PLAIN_WARM,
    launch: DraftShape | None = None,
) -> ReplayResult:
    """Replay `policy` on the run's samples and price both mode sequences, each SPECULATING
    sample at its shape (the module docstring: `launch` overrides the log's launch shape)."""
    track = shape_track(run, cost.shape, launch)
    replayed, modes, recs, rep_raw = run_policy(run, policy, track=track)
    at = recorded_mode_at(run)
    recorded_modes = [at(r.iteration) for r in recs]
    recorded_shapes = [track.at(r.iteration) for r in recs]
    replayed_shapes = [s if s is not None else track.launch for s in rep_raw]
    measured: list[tuple[DraftShape, float] | None] = []
    own: dict[DraftShape, list[float]] = {}
    for r in recs:
        a = _accept(r)
        if a is None:
            measured.append(None)
            continue
        s = _accept_shape(r, track)
        measured.append((s, a))
        own.setdefault(s, []).append(a)
    every = [a for v in own.values() for a in v]
    if accept_len is None and not every:
        raise ValueError(
            "the log has no accept length measured while SPECULATING: give --accept-len"
        )
    mean = sum(every) / len(every) if every else math.nan
    used = set(recorded_shapes) | set(replayed_shapes) | set(own)
    fallback: dict[DraftShape, float] = {}
    unmeasured: list[str] = []
    for s in used:
        if accept_len is not None:
            fallback[s] = accept_len
        elif own.get(s):
            fallback[s] = sum(own[s]) / len(own[s])
        else:
            fallback[s] = mean
            unmeasured.append(s.label())
    if accept_len is not None:
        where = f"--accept-len {accept_len:g} where the log has none"
    else:
        where = f"the log's SPECULATING samples (mean {mean:.2f})"
    if track.named and own:
        per = ", ".join(
            f"{s.label()} {sum(v) / len(v):.2f} ({len(v)})" for s, v in sorted_shapes(own)
        )
        where += f"; per shape, mean (samples): {per}"
    if unmeasured:
        src = f"--accept-len {accept_len:g}" if accept_len is not None else f"{mean:.2f}"
        where += f"; never measured, priced at {src}: {', '.join(sorted(unmeasured))}"
    rec_acc = _accepts(measured, recorded_shapes, fallback)
    rep_acc = _accepts(measured, replayed_shapes, fallback)
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
        recorded_tps=price(cost, recs, recorded_modes, rec_acc, plain, recorded_shapes),
        replayed_tps=price(cost, recs, modes, rep_acc, plain, replayed_shapes),
        always_spec_tps=price(
            cost, recs, ["SPECULATING"] * len(recs), rec_acc, plain, recorded_shapes
        ),
        never_tps=price(cost, recs, ["PLAIN"] * len(recs), rec_acc, plain),
        accept_len_source=where,
        policy=policy.describe(),
        launch_shape=track.launch.label(),
        recorded_shapes=[s.label() for s in recorded_shapes],
        replayed_shapes=[s.label() for s in replayed_shapes],
        shapes_named=track.named,
    )


def sorted_shapes(d: dict[DraftShape, Any]) -> list[tuple[DraftShape, Any]]:
    """Items of a per-shape dict in a stable order (top-k, steps, tokens)."""
    return sorted(d.items(), key=lambda kv: (kv[0].topk, kv[0].steps, kv[0].draft_tokens))


def _spec_counts(modes: Sequence[str], shapes: Sequence[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for m, s in zip(modes, shapes, strict=True):
        if m == "SPECULATING":
            out[s] = out.get(s, 0) + 1
    return out


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
    shape = res.launch_shape or cost.shape.label()
    if res.shapes_named:
        rec = _spec_counts(res.recorded_modes, res.recorded_shapes)
        rep = _spec_counts(res.replayed_modes, res.replayed_shapes)
        per = ", ".join(f"{s} {rec.get(s, 0)}/{rep.get(s, 0)}" for s in sorted({*rec, *rep}))
        n_rec = sum(d.trigger == Event.RESHAPE.name for d in res.recorded)
        n_rep = sum(d.trigger == Event.RESHAPE.name for d in res.replayed)
        lines.append(
            f"shapes: launch {shape}; RESHAPEs recorded {n_rec}, replayed {n_rep}; "
            f"SPECULATING samples per shape (recorded/replayed): {per or '-'}"
        )
        shape = f"launch {shape}, each SPECULATING sample at its shape"
    lines.append(
        f"cost model ({cost.table.source}, {shape}, ctx {cost.ctx}; accept length "
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
