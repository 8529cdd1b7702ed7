"""When would a policy have switched? A served run's policy inputs, rebuilt from the scheduler's
per-iteration trace, through a policy of today's code, in the modes the run recorded.

A specfsm server run with ``--iter-trace`` leaves one record per scheduler iteration (launch
time, forward mode, batch size, prompt tokens, queued, running; benchmarks/gpu/sitecustomize.py)
and its transition log (every mode change with its wall time, the control-file policy swap
before each run). From them this tool rebuilds what the adapter gave the policy each iteration:

- a prefill (E / M): ``decode_bs`` = running + the prefill's requests, ``prefill_tokens``;
- a decode (D): ``decode_bs``, and the last decode's step as ``step_ms`` (the gap from its
  launch to the next: with overlap on, the iteration's wall time as served) with its kind;
  while SPECULATING, accept lengths of the mean the log last recorded (its transition and
  observation lines carry them; the policy's ``accept_len`` before any);
- both, while PLAIN: the draft debt (`DraftDebt`): the prompt tokens prefilled while PLAIN,
  less the share of the requests gone at each sweep of the adapter's store.

Each run's policy (the control-file swap before it) is built afresh from its spec and fed the
iterations from that swap on, in the mode the run was in at each one (open loop: a verdict
does not change the mode; after its first verdict in a stretch the replay keeps feeding it and
keeps only that first one). For every load switch the run recorded, the report gives the
replayed policy's first verdict in the same stretch toward the same side, for each variant of
the spec (``--variant KEY=JSON``), with the prompt tokens prefilled in the mode between the two.

The goodput policy is priced as the server priced it when the tgz holds the start-up profile
(``specfsm/profile-0.csv``): its rows as the prior, seeded as measured in the calibration, as
the adapter does. What the replay leaves out: the batch's mean context (0: the table's
context) and the steps as the adapter measures them (the launch gaps here). So the threshold
policy replays exactly what it saw (its inputs are all in the trace), the goodput policy
approximately, and without the profile not at all faithfully; the variant that reproduces the
recorded times says how closely. Two keys of a variant are not the policy's: ``change_skip``
(default true) reports the steps as the adapter has since 2026-12-05, without the first
interval after a change of step kind; false, as runs served before then saw them. ``debt``
(default true) tells the policy the rebuilt draft debt, as the adapter has since 2026-12-07;
false tells it none, as runs served before then did.

    R=benchmarks/gpu/results/2026-12-04_serving
    python benchmarks/serving/onset_replay.py --runs $R/runs.jsonl \\
        --tgz $R/2026-12-04_machine8/traces_logs_machine8.tgz \\
        --variant "threshold:prefill_step_tokens=0,prefill_debounce=false;\\
    goodput:prefill_debounce=false,cal_clip=0,change_skip=false,debt=false" --variant none

(the first variant is the code the runs were served with, the second this code's defaults).
"""

from __future__ import annotations

import argparse
import bisect
import dataclasses
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from specfsm_sglang import flight
from specfsm_sglang.profile_schedule import seed_calibration

sys.path.insert(0, str(Path(__file__).resolve().parent))
from served_log import Bundle, load_bundles, profile_rows

from specfsm.fsm.decision import Policy
from specfsm.fsm.observation import Observation
from specfsm.fsm.table import Event, Mode
from specfsm.fsm.verdict import Verdict
from specfsm.model.acceptance import DraftShape
from specfsm.policy.registry import make_policy

#: the load events, by the mode they leave
LEAVES = {Mode.SPECULATING: Event.LOAD_HIGH, Mode.PLAIN: Event.LOAD_LOW}


class DraftDebt:
    """The draft debt the adapter tells its policy (`Observation.draft_debt`: the prompt
    tokens of requests prefilled while zero-tax PLAIN, their draft prefill deferred), rebuilt
    from the trace as the adapter keeps its store (`specfsm_sglang.lag.PromptStore`): each
    prefill run while PLAIN adds its prompt tokens; the requests gone take their share away
    when the store is swept, after each prefill and, before an observation, when the adapter's
    rule says so (`specfsm_sglang.flight.ShrinkGate`) (the trace does not say which requests
    left, so the store is taken to lose them at random); outside PLAIN
    there is none (a RESYNCING catch-up extends the draft over them). The debt a log's
    observation lines carry is not used: an adapter before this sweep told the store as of the
    last prefill, several times this figure in a lull, and replaying this code means telling
    what its adapter would."""

    def __init__(self) -> None:
        self.debt = 0.0
        self.held = 0  # the requests the store's figure stands for (at the last sweep)
        self.gate = flight.ShrinkGate()  # the adapter's rule for a sweep before an observation

    def _sweep(self, running: int) -> None:
        if running < self.held:
            self.debt *= running / self.held if self.held else 0.0
        self.held = running

    def told(self, t: float, kind: str, bs: int, running: int, mode: Mode) -> int:
        """The debt told at the iteration launched at `t` (a prefill: before its forward)."""
        if mode is not Mode.PLAIN:
            self.debt = 0.0
        seen = self.gate.due(running if kind in ("E", "M") else bs, self.debt > 0)
        if seen is not None:
            self._sweep(seen)
        return round(self.debt)

    def prefilled(self, tokens: int, bs: int, running: int, mode: Mode) -> None:
        """A prefill of `bs` requests and `tokens` prompt tokens ran beside `running` ones:
        deferred while PLAIN, then the store swept of the requests gone before it."""
        self._sweep(running)
        self.held = running + bs
        if mode is Mode.PLAIN:
            self.debt += tokens


def observations(
    b: Bundle,
    t_from: float,
    t_to: float,
    accept_len: float,
    shape: DraftShape | None = None,
    change_skip: bool = True,
    debt: bool = True,
) -> Iterator[Any]:
    """(launch time, recorded mode, Observation, prompt tokens) of every iteration launched in
    [t_from, t_to). A decode's ``step_ms`` is the time since the previous decode's launch as
    the adapter reports it (`specfsm_sglang.flight.Flight`, overlap on): none after a prefill,
    nor at the decode after that, nor (`change_skip`, the adapter since 2026-12-05) the first
    after a change of step kind; a speculative step's shape is `shape` (the launch shape: no
    RESHAPE is replayed); `debt`: the rebuilt draft debt (`DraftDebt`), else none."""
    i0 = bisect.bisect_left(b.row_ts, t_from)
    i1 = bisect.bisect_left(b.row_ts, t_to)
    fl = flight.Flight(1, overlap=True, start_skip=0)  # the replay starts mid-process
    store = DraftDebt()
    for k in range(i0, i1):
        t, kind, bs, ext, queued, running, _free = b.rows[k]
        mode = b.mode_at(t)
        owed = store.told(t, kind, bs, running, mode) if debt else 0
        if kind in ("E", "M"):
            fl.forget_step()
            obs = Observation(
                iteration=k,
                decode_bs=running + bs,
                running=running,
                queued=queued,
                mean_ctx=b.ctx_at(t),
                prefill_tokens=max(1, ext),
                draft_debt=owed,
            )
            yield t, mode, obs, ext
            store.prefilled(ext, bs, running, mode)
            continue
        if kind != "D":
            continue
        acc: tuple[int, ...] = ()
        if mode is Mode.SPECULATING and bs > 0:
            mean = b.accept_at(t, accept_len)
            lo = int(mean)
            hi = round((mean - lo) * bs)  # bs verifies of this mean, in whole tokens
            acc = (lo + 1,) * hi + (lo,) * (bs - hi)
        step_ms, step_bs, step_kind = 0.0, 0, ""
        prev_t = fl.step_start()
        if prev_t:
            step_ms, step_bs, step_kind = 1e3 * (t - prev_t), fl.prev_bs, fl.prev_kind
        spec_step = step_kind == "spec"
        obs = Observation(
            iteration=k,
            decode_bs=bs,
            running=running,
            queued=queued,
            accept_lens=acc,
            mean_ctx=b.ctx_at(t),
            accept_shape=shape if acc else None,
            step_ms=step_ms,
            step_bs=step_bs,
            step_shape=shape if spec_step else None,
            step_kind=step_kind,
            shape=shape,
            draft_debt=owed,
        )
        yield t, mode, obs, 0
        # the mode this forward ran in: after the decision taken before it
        after = b.mode_at(b.row_ts[k + 1] - 1e-6) if k + 1 < len(b.rows) else mode
        ran = flight.step_kind(after, zero_tax=True)
        if change_skip and ran != fl.prev_kind:
            fl.step_changed()
        fl.prev_t, fl.prev_bs, fl.prev_kind = t, bs, ran


def replay(
    b: Bundle, spec: dict[str, Any], periods: list[tuple[float, float]]
) -> list[tuple[float, Mode, str]]:
    """The replayed policy, fed the iterations of `periods`: its first verdict in each
    stretch of one recorded mode (time, the mode it leaves, its reason)."""
    # not policy keys: whether the steps are reported as the adapter has since 2026-12-05, and
    # whether the draft debt is told as it has since 2026-12-07
    spec = dict(spec)
    change_skip = bool(spec.pop("change_skip", True))
    debt = bool(spec.pop("debt", True))
    if b.profile and spec.get("name") == "goodput" and "profile" not in spec:
        spec = {**spec, "profile": b.profile}
    policy: Policy = make_policy(spec)
    if b.profile and spec.get("name") == "goodput":
        seed_calibration(policy, profile_rows(b.profile))
    accept_len = float(spec.get("accept_len", 2.0))
    shape = getattr(policy, "launch_shape", None)
    out: list[tuple[float, Mode, str]] = []
    stretch: tuple[Mode, float] | None = None
    fired = False
    feed = (
        o for a, z in periods for o in observations(b, a, z, accept_len, shape, change_skip, debt)
    )
    for t, mode, obs, _tok in feed:
        i = bisect.bisect_right(b.trans_ts, t)
        key = (mode, b.trans_ts[i - 1] if i else 0.0)
        if key != stretch:
            stretch, fired = key, False
        v = policy.decide(mode, obs)
        # a bare Event carries no reason: the replay keeps only verdicts with theirs
        if isinstance(v, Verdict) and not fired and v.event is LEAVES.get(mode):
            fired = True
            out.append((t, mode, v.reason))
    return out


@dataclasses.dataclass
class Tally:
    """One policy and variant over the runs: the recorded switches, the ones it replayed (with
    how much earlier and the prompts prefilled in the old mode in between), those on which
    the first variant replays the recorded time within `FAITHFUL_S` (`exact_*`), and the
    switches it made where the run made none."""

    switches: int = 0
    replayed: int = 0
    earlier_s: float = 0.0
    tokens: int = 0
    exact: int = 0
    exact_earlier_s: float = 0.0
    exact_tokens: int = 0
    extra: int = 0

    def line(self, name: str, var: str) -> str:
        def mean(x: float, n: int, digits: int = 2) -> str:
            return f"{x / n:.{digits}f}" if n else "-"

        return (
            f"summary[{name}][{var}]: {self.replayed} of {self.switches} recorded switches "
            f"replayed, {mean(self.earlier_s, self.replayed)} s earlier and "
            f"{mean(self.tokens, self.replayed, 0)} prompt tokens prefilled in the old mode in "
            f"between on average; on the {self.exact} the first variant replays within "
            f"{FAITHFUL_S} s, {mean(self.exact_earlier_s, self.exact)} s earlier and "
            f"{mean(self.exact_tokens, self.exact, 0)} prompt tokens; {self.extra} switches the "
            "runs did not make"
        )


#: a replayed switch this close to the recorded one reproduces it (s; about two iterations)
FAITHFUL_S = 0.02


def report(args: argparse.Namespace) -> list[str]:
    """Per run, each recorded load switch beside each variant's replayed one, and the switches
    a variant made where the run made none; then one summary line per policy and variant."""
    runs = [json.loads(s) for s in args.runs.read_text().splitlines() if s.strip()]
    variants = [_variant(v) for v in args.variant] or [{}]
    lines: list[str] = []
    tally: dict[tuple[str, str], Tally] = {}
    for tgz in args.tgz:
        for b in load_bundles(Path(tgz)):
            for r in runs:
                t0 = r.get("t0")
                if t0 is None or not b.row_ts[0] <= t0 <= b.row_ts[-1]:
                    continue
                if r.get("trace") not in args.trace:
                    continue
                found = b.policy_at(t0 + args.window_s)
                if found is not None:
                    lines += _run(b, r, found, variants, args.window_s, tally)
    lines += [t.line(name, var) for (name, var), t in sorted(tally.items())]
    return lines


def _run(
    b: Bundle,
    r: dict[str, Any],
    found: tuple[dict[str, Any], list[tuple[float, float]]],
    variants: list[dict[str, dict[str, Any]]],
    window_s: float,
    tally: dict[tuple[str, str], Tally],
) -> list[str]:
    spec, periods = found
    name = str(spec.get("name"))
    t0 = float(r["t0"])
    t_end = t0 + window_s
    got: dict[str, list[tuple[float, Mode, str]]] = {}
    for variant in variants:
        over = {**variant.get("", {}), **variant.get(name, {})}
        got.setdefault(_label(over), replay(b, {**spec, **over}, periods))
    for var in got:
        tally.setdefault((name, var), Tally())
    out = [f"== {r['server']} {r['trace']} rep {r['rep']} ({name}), {r['tok_s']:.0f} tok/s"]
    matched: dict[str, set[float]] = {var: set() for var in got}
    for i, x in enumerate(b.trans):
        if x.get("trigger") not in ("LOAD_HIGH", "LOAD_LOW") or not t0 <= x["ts"] < t_end:
            continue
        left = Mode(x["src"])
        entered = b.trans_ts[i - 1] if i else 0.0
        # the adapter decides inside the iteration whose launch the trace recorded last: that
        # iteration's forward already ran in the new mode
        j = bisect.bisect_right(b.row_ts, x["ts"]) - 1
        decided = b.row_ts[j] if j >= 0 else x["ts"]
        cells = []
        exact = False
        for k, (var, verdicts) in enumerate(got.items()):
            t_n = tally[(name, var)]
            t_n.switches += 1
            hit = [v[0] for v in verdicts if v[1] is left and entered <= v[0] <= decided]
            if not hit:
                cells.append(f"{var} none")
                continue
            t = hit[0]
            matched[var].add(t)
            # the prompts of the iterations between the two decisions' own
            tok = sum(o[3] for o in observations(b, t + 1e-6, decided, 2.0) if o[1] is left)
            t_n.replayed += 1
            t_n.earlier_s += decided - t
            t_n.tokens += tok
            exact = exact or (k == 0 and decided - t <= FAITHFUL_S)
            if exact:
                t_n.exact += 1
                t_n.exact_earlier_s += decided - t
                t_n.exact_tokens += tok
            cells.append(f"{var} {t - t0:.2f} ({t - decided:+.2f} s, {tok} prompt tokens)")
        out.append(
            f"  {x['src']}->{x['dst']} at {x['ts'] - t0:.2f} s (bs {x.get('bs')}) | "
            + " | ".join(cells)
        )
    extras = []
    for var, verdicts in got.items():
        more = [v[0] - t0 for v in verdicts if t0 <= v[0] < t_end and v[0] not in matched[var]]
        tally[(name, var)].extra += len(more)
        if more:
            extras.append(f"{var} at " + ", ".join(f"{t:.2f}" for t in more))
    if extras:
        out.append("  switches the run did not make: " + " | ".join(extras))
    return out


def _variant(text: str) -> dict[str, dict[str, Any]]:
    """``[POLICY:]KEY=JSON[,KEY=JSON][;POLICY:...]`` -> the keys over the logged spec, by the
    policy name they are for ("": every policy); ``none``: no keys."""
    out: dict[str, dict[str, Any]] = {}
    if text.strip() in ("", "none"):
        return out  # the logged spec as this code reads it
    for part in (x.strip() for x in text.split(";")):
        head = part.split("=", 1)[0]
        name, body = part.split(":", 1) if ":" in head else ("", part)
        out[name] = {k: json.loads(v) for k, v in (kv.split("=", 1) for kv in body.split(","))}
    return out


def _label(over: dict[str, Any]) -> str:
    return ",".join(f"{k}={json.dumps(v)}" for k, v in over.items()) or "this code"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=Path, required=True, help="runs.jsonl of the results folder")
    ap.add_argument("--tgz", action="append", required=True, help="a traces_logs_*.tgz")
    ap.add_argument(
        "--trace", action="append", default=[], help="a trace to replay (default: every trace)"
    )
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        help="[POLICY:]KEY=JSON[,KEY=JSON][;POLICY:...] over the logged spec (POLICY: that "
        "policy's only); none: the logged spec as this code reads it (the default)",
    )
    ap.add_argument("--window-s", type=float, default=28.0, help="seconds after a run's t0")
    args = ap.parse_args(argv)
    if not args.trace:
        args.trace = ["light", "heavy", "bursty", "day"]
    for line in report(args):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
