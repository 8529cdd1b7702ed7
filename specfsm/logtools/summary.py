"""`specfsm logs summary`: what each rank did, per mode and per transition, and what went wrong.

Iterations: the adapter numbers decode forwards from 1; a transition logged at iteration i
happens before forward i, so forward i runs in its destination mode (several transitions at one
iteration leave 0-iteration dwells, e.g. DRAINING without overlap). A run's last iteration is
the last one logged (observation lines make that exact; without them, the tail after the last
line is unknown). Time: `ts` of the lines, from the run's first line to its last.
Switches: decisions (LOAD_HIGH, LOAD_LOW, FAULT), not completions (DRAINED, RESYNCED).
Reshapes: shape changes inside SPECULATING (RESHAPE), counted apart from the switches, with the
shapes they changed to (`shape_to`); they do not end a dwell (the mode stays).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import attrs

from specfsm.fsm.table import SHAPE_EVENTS, Mode
from specfsm.logtools.ranks import Disagreement, disagreements
from specfsm.logtools.reader import Engine, LogSet, Record, Run

SWITCH_TRIGGERS = frozenset({"LOAD_HIGH", "LOAD_LOW", "FAULT"})
#: Shape changes inside a mode (RESHAPE): no mode switch, no new dwell.
SHAPE_TRIGGERS = frozenset(e.name for e in SHAPE_EVENTS)
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
MODES = [m.value for m in Mode]


def decision_rule(data: dict[str, Any]) -> str | None:
    """The rule that decided a transition (its line's ``decision.rule``), None when absent."""
    decision = data.get("decision")
    rule = decision.get("rule") if isinstance(decision, dict) else None
    return str(rule) if isinstance(rule, (str, int)) and not isinstance(rule, bool) else None


def reason_pattern(reason: str) -> str:
    """The reason with its numbers replaced by N: one group per rule, not per value."""
    return _NUMBER.sub("N", reason)


@attrs.frozen
class Dwell:
    """One stay in a mode."""

    mode: str
    start_it: int
    end_it: int  # exclusive
    start_ts: float | None
    end_ts: float | None
    closed: bool  # False: the run's last mode (its end is where the log stops)

    @property
    def iterations(self) -> int:
        return self.end_it - self.start_it

    @property
    def seconds(self) -> float | None:
        if self.start_ts is None or self.end_ts is None:
            return None
        return max(0.0, self.end_ts - self.start_ts)


def jumps(run: Run) -> list[Record]:
    """Transitions whose source is not the mode the log left the rank in: a change that was not
    logged (a mode action that failed leaves only specfsm.action_failed and the FAULT)."""
    out = []
    mode = run.initial_mode.value
    for t in run.transitions:
        if t.data["src"] != mode:
            out.append(t)
        mode = t.data["dst"]
    return out


def dwells(run: Run) -> list[Dwell]:
    """The run's stays in each mode, in order (an unlogged change starts the next source's stay
    at the transition that reveals it)."""
    out: list[Dwell] = []
    mode = run.initial_mode.value
    start_it, start_ts = 1, run.first_ts
    for t in run.transitions:
        if t.data["trigger"] in SHAPE_TRIGGERS and t.data["src"] == mode:
            continue  # a shape change: the mode and its dwell go on
        if t.data["src"] != mode:
            out.append(Dwell(mode, start_it, t.iteration, start_ts, t.ts, True))
            mode, start_it, start_ts = t.data["src"], t.iteration, t.ts
        out.append(Dwell(mode, start_it, t.iteration, start_ts, t.ts, True))
        mode, start_it, start_ts = t.data["dst"], t.iteration, t.ts
    out.append(
        Dwell(mode, start_it, max(start_it, run.last_iteration + 1), start_ts, run.last_ts, False)
    )
    return out


@attrs.define
class Stats:
    """Aggregated over one or more runs."""

    runs: int = 0
    iterations: int = 0
    seconds: float = 0.0
    mode_iterations: Counter[str] = attrs.Factory(Counter)
    mode_seconds: dict[str, float] = attrs.Factory(lambda: dict.fromkeys(MODES, 0.0))
    transitions: Counter[tuple[str, str, str, str]] = attrs.Factory(Counter)
    switches: int = 0
    #: RESHAPE transitions, and how many went to each shape (its label; "?" when not logged)
    reshapes: int = 0
    reshape_to: Counter[str] = attrs.Factory(Counter)
    #: transitions per deciding rule (the transition line's ``decision.rule``, when logged)
    verdicts: Counter[str] = attrs.Factory(Counter)
    longest: Dwell | None = None
    shortest: Dwell | None = None
    action_failed: list[Record] = attrs.Factory(list)
    policy_failed: list[Record] = attrs.Factory(list)
    policy_replaced: list[Record] = attrs.Factory(list)
    #: zero-tax RESYNCING's catch-ups (specfsm.catchup lines)
    catchups: list[Record] = attrs.Factory(list)
    contract_violations: list[Record] = attrs.Factory(list)
    #: (transition, explained by a failed action at its iteration)
    jumps: list[tuple[Record, bool]] = attrs.Factory(list)
    controls: int = 0
    observations: int = 0
    #: per mode: (shortest, longest) completed dwell in iterations
    mode_dwell: dict[str, tuple[int, int]] = attrs.Factory(dict)

    def catchup_totals(self) -> dict[str, Any]:
        """The catch-ups summed: count, lag tokens, requests, ms (total, longest), overflow."""
        d = [r.data for r in self.catchups]
        return {
            "count": len(d),
            "tokens": sum(int(x.get("tokens", 0)) for x in d),
            "requests": sum(int(x.get("rows", 0)) for x in d),
            "ms_total": round(sum(float(x.get("ms", 0.0)) for x in d), 3),
            "ms_max": round(max((float(x.get("ms", 0.0)) for x in d), default=0.0), 3),
            "overflow_requests": sum(int(x.get("overflow_rows", 0)) for x in d),
        }

    def add(self, run: Run) -> None:
        self.runs += 1
        self.iterations += run.last_iteration
        if run.first_ts is not None and run.last_ts is not None:
            self.seconds += run.last_ts - run.first_ts
        for d in dwells(run):
            self.mode_iterations[d.mode] += d.iterations
            self.mode_seconds[d.mode] += d.seconds or 0.0
            if d.closed:
                lo, hi = self.mode_dwell.get(d.mode, (d.iterations, d.iterations))
                self.mode_dwell[d.mode] = (min(lo, d.iterations), max(hi, d.iterations))
                if self.longest is None or d.iterations > self.longest.iterations:
                    self.longest = d
                if self.shortest is None or d.iterations < self.shortest.iterations:
                    self.shortest = d
        for t in run.transitions:
            key = (t.data["src"], t.data["dst"], t.data["trigger"])
            self.transitions[(*key, reason_pattern(str(t.data.get("reason", ""))))] += 1
            self.switches += t.data["trigger"] in SWITCH_TRIGGERS
            rule = decision_rule(t.data)
            if rule is not None:
                self.verdicts[rule] += 1
            if t.data["trigger"] in SHAPE_TRIGGERS:
                self.reshapes += 1
                self.reshape_to[str(t.data.get("shape_to") or "?")] += 1
        failed_at = {r.iteration for r in run.action_failed}
        self.jumps += [(t, t.iteration in failed_at) for t in jumps(run)]
        self.action_failed += run.action_failed
        self.policy_failed += run.policy_failed
        self.policy_replaced += run.policy_replaced
        self.catchups += run.catchups
        self.contract_violations += run.contract_violations
        self.controls += len(run.controls)
        self.observations += len(run.observations)

    @property
    def switches_per_100(self) -> float:
        return 100.0 * self.switches / self.iterations if self.iterations else 0.0

    @property
    def reshapes_per_100(self) -> float:
        return 100.0 * self.reshapes / self.iterations if self.iterations else 0.0

    def as_dict(self) -> dict[str, Any]:
        def dw(d: Dwell | None) -> dict[str, Any] | None:
            if d is None:
                return None
            return {
                "mode": d.mode,
                "iteration": d.start_it,
                "iterations": d.iterations,
                "seconds": d.seconds,
            }

        return {
            "runs": self.runs,
            "iterations": self.iterations,
            "seconds": round(self.seconds, 3),
            "mode_iterations": {m: self.mode_iterations.get(m, 0) for m in MODES},
            "mode_seconds": {m: round(v, 3) for m, v in self.mode_seconds.items()},
            "transitions": [
                {"src": s, "dst": d, "trigger": e, "reason": r, "count": n}
                for (s, d, e, r), n in sorted(self.transitions.items(), key=lambda x: -x[1])
            ],
            "mode_dwell_iterations": {m: list(v) for m, v in self.mode_dwell.items()},
            "switches": self.switches,
            "switches_per_100_iterations": round(self.switches_per_100, 3),
            "reshapes": self.reshapes,
            "reshapes_per_100_iterations": round(self.reshapes_per_100, 3),
            "reshape_to": dict(sorted(self.reshape_to.items())),
            "verdicts_by_rule": dict(sorted(self.verdicts.items(), key=lambda x: (-x[1], x[0]))),
            "longest_dwell": dw(self.longest),
            "shortest_dwell": dw(self.shortest),
            "action_failed": [_brief(r, "action", "error") for r in self.action_failed],
            "policy_faults": [
                _brief(r, "policy", "error", "faults", "limit") for r in self.policy_failed
            ],
            "policy_replaced": [_brief(r, "old", "new") for r in self.policy_replaced],
            "catchups": self.catchup_totals(),
            "contract_violations": [_brief(r) for r in self.contract_violations],
            "unlogged_mode_changes": [
                {**_brief(t, "src", "dst"), "at_failed_action": ok} for t, ok in self.jumps
            ],
            "controls": self.controls,
            "observations": self.observations,
        }


def _brief(rec: Record, *keys: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "where": f"{rec.source}:{rec.line}",
        "rank": rec.rank,
        "iteration": rec.iteration,
    }
    for k in keys:
        out[k] = rec.data.get(k)
    if not keys:
        out.update({k: v for k, v in rec.data.items() if k not in ("event", "ts")})
    return out


@attrs.define
class Summary:
    logs: LogSet
    engines: list[Engine]
    per_rank: list[tuple[str, int, Stats]]
    overall: Stats
    disagreements: list[Disagreement]

    @property
    def ok(self) -> bool:
        """No malformed line and no disagreement."""
        return not self.logs.problems and not self.disagreements


def summarize(logs: LogSet) -> Summary:
    engines = logs.engines()
    per_rank: list[tuple[str, int, Stats]] = []
    overall = Stats()
    dis: list[Disagreement] = []
    for eng in engines:
        for rank in sorted(eng.ranks):
            st = Stats()
            for run in eng.ranks[rank]:
                st.add(run)
                overall.add(run)
            per_rank.append((eng.name, rank, st))
        dis += disagreements(eng)
    return Summary(logs, engines, per_rank, overall, dis)


# ------------------------------------------------------------------------------ text
def _pct(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:5.1f}%" if whole else "    -"


def _dwell_text(d: Dwell | None) -> str:
    if d is None:
        return "-"
    s = d.seconds
    secs = f", {s:.3f} s" if s is not None else ""
    return f"{d.mode} from iteration {d.start_it}: {d.iterations} iterations{secs}"


def format_stats(title: str, st: Stats, max_rows: int = 12) -> list[str]:
    lines = [f"== {title}: {st.runs} run(s), {st.iterations} iterations, {st.seconds:.1f} s"]
    lines.append("  mode          iterations            time        dwell min..max (iterations)")
    for m in MODES:
        it, sec = st.mode_iterations.get(m, 0), st.mode_seconds.get(m, 0.0)
        lo, hi = st.mode_dwell.get(m, (None, None))
        dwell = f"{lo}..{hi}" if lo is not None else "-"
        lines.append(
            f"  {m:12s} {it:9d} {_pct(it, st.iterations)} {sec:9.2f} s {_pct(sec, st.seconds)}"
            f"  {dwell}"
        )
    lines.append(
        f"  switches (LOAD_HIGH/LOAD_LOW/FAULT): {st.switches}, "
        f"{st.switches_per_100:.2f} per 100 iterations"
    )
    if st.reshapes:
        to = ", ".join(f"{k} {n}" for k, n in sorted(st.reshape_to.items()))
        lines.append(
            f"  reshapes (RESHAPE, inside SPECULATING): {st.reshapes}, "
            f"{st.reshapes_per_100:.2f} per 100 iterations; to: {to}"
        )
    lines.append(f"  longest dwell:  {_dwell_text(st.longest)}")
    lines.append(f"  shortest dwell: {_dwell_text(st.shortest)}")
    rows = sorted(st.transitions.items(), key=lambda x: (-x[1], x[0]))
    lines.append(f"  transitions: {sum(st.transitions.values())} ({len(rows)} kinds)")
    for (src, dst, trig, why), n in rows[:max_rows]:
        lines.append(f"    {n:6d}  {src}->{dst} {trig}: {why}")
    if len(rows) > max_rows:
        rest = sum(n for _, n in rows[max_rows:])
        lines.append(
            f"    {rest:6d}  ... {len(rows) - max_rows} more kinds (--max-rows to list them)"
        )
    if st.verdicts:
        by = sorted(st.verdicts.items(), key=lambda x: (-x[1], x[0]))
        lines.append(
            f"  verdicts by rule ({sum(st.verdicts.values())} transitions with a decision): "
            + ", ".join(f"{rule} {n}" for rule, n in by)
        )
    lines.append(f"  failed actions: {len(st.action_failed)}")
    for r in st.action_failed[:max_rows]:
        lines.append(
            f"    {r.source}:{r.line} iteration {r.iteration} {r.data.get('action')}: "
            f"{r.data.get('error')}"
        )
    lines.append(f"  policy faults: {len(st.policy_failed)}, replaced: {len(st.policy_replaced)}")
    if st.catchups:
        c = st.catchup_totals()
        lines.append(
            f"  catch-ups (zero-tax RESYNCING): {c['count']}, {c['tokens']} lag tokens of "
            f"{c['requests']} requests, {c['ms_total']:.1f} ms (longest {c['ms_max']:.1f}), "
            f"requests past the lag buffer {c['overflow_requests']}"
        )
    for r in st.policy_failed[:max_rows]:
        lines.append(
            f"    {r.source}:{r.line} iteration {r.iteration} {r.data.get('policy')} "
            f"({r.data.get('faults')}/{r.data.get('limit')}): {r.data.get('error')}"
        )
    n_ok = sum(ok for _, ok in st.jumps)
    lines.append(
        f"  mode changes not in the log: {len(st.jumps)} ({n_ok} at a failed action, "
        f"{len(st.jumps) - n_ok} unexplained)"
    )
    for t, ok in st.jumps[:max_rows]:
        if not ok:
            lines.append(
                f"    {t.source}:{t.line} iteration {t.iteration}: {t.data['src']}->"
                f"{t.data['dst']} but the log left the rank elsewhere"
            )
    lines.append(f"  contract violations logged: {len(st.contract_violations)}")
    for r in st.contract_violations[:max_rows]:
        lines.append(f"    {r.source}:{r.line} iteration {r.iteration}")
    return lines


def format_summary(s: Summary, max_rows: int = 12) -> str:
    logs = s.logs
    counts = ", ".join(f"{k.rsplit('.', 1)[-1]} {v}" for k, v in sorted(logs.events.items()))
    lines = [
        f"read {logs.lines} lines from {len(logs.sources)} input(s): {len(logs.records)} records "
        f"({counts})",
        f"skipped: {logs.skipped} (malformed {len(logs.problems)}, truncated last line "
        f"{len(logs.truncated)}, blank {logs.blank}); unknown events ignored: "
        f"{sum(logs.unknown_events.values())}",
    ]
    for p in logs.truncated:
        lines.append(f"  {p}")
    for p in logs.problems[:max_rows]:
        lines.append(f"  malformed: {p}")
    if len(logs.problems) > max_rows:
        lines.append(f"  ... {len(logs.problems) - max_rows} more malformed lines")
    multi = len(s.per_rank) > 1
    for eng, rank, st in s.per_rank:
        lines.append("")
        lines += format_stats(f"{eng} rank {rank}", st, max_rows)
    if multi:
        lines.append("")
        lines += format_stats("overall", s.overall, max_rows)
    lines.append("")
    if s.disagreements:
        lines.append(f"RANKS DISAGREED at {len(s.disagreements)} iteration(s) (they must not):")
        for d in s.disagreements[:max_rows]:
            lines.append(f"  {d}")
    else:
        n_multi = sum(1 for e in s.engines if len(e.ranks) > 1)
        lines.append(
            "rank agreement: "
            + ("every rank did the same at every iteration" if n_multi else "one rank per engine")
        )
    return "\n".join(lines)


def summary_json(s: Summary) -> dict[str, Any]:
    return {
        "inputs": s.logs.sources,
        "lines": s.logs.lines,
        "records": len(s.logs.records),
        "events": dict(s.logs.events),
        "unknown_events": dict(s.logs.unknown_events),
        "malformed": [str(p) for p in s.logs.problems],
        "truncated": [str(p) for p in s.logs.truncated],
        "blank": s.logs.blank,
        "ranks": [{"engine": e, "rank": r, **st.as_dict()} for e, r, st in s.per_rank],
        "overall": s.overall.as_dict(),
        "disagreements": [
            {
                "engine": d.engine,
                "run": d.run,
                "iteration": d.iteration,
                "by_rank": {str(k): v for k, v in d.by_rank.items()},
            }
            for d in s.disagreements
        ],
    }
