"""Read specfsm JSON logs: several files and stdin, every bad line counted and named.

A log is one JSON object per line (specfsm/log.py). Tolerated: unknown fields, unknown event
names (counted), blank lines (counted), and a truncated *last* line of a file (a writer killed
mid-line; counted and named). Everything else malformed (not JSON, not an object, a known event
without its fields, a mode or event name the table does not have) is a `Problem` naming file and
line; the line is skipped and counted, never silently.

Grouping: each file is a set of *streams*, one per `rank` field. Files whose ranks do not repeat
form one *engine* (one file per rank, or one file with every rank); when a rank appears in more
than one file, each file is an engine of its own (the logs of separate servers). Within a rank a
`specfsm.config` line without a `control` key starts a new *run* (an engine start; iterations
restart), control lines (`control: applied/refused`) stay in the current run.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import IO, Any

import attrs

from specfsm.fsm.log import (
    ACTION_FAILED,
    CATCHUP,
    CONFIG,
    OBSERVATION,
    POLICY_FAILED,
    POLICY_REPLACED,
    TRANSITION,
)
from specfsm.fsm.table import Event, Mode

KNOWN_EVENTS = (
    CONFIG,
    TRANSITION,
    OBSERVATION,
    ACTION_FAILED,
    POLICY_FAILED,
    POLICY_REPLACED,
    CATCHUP,
)
_MODES = frozenset(m.value for m in Mode)
_EVENTS = frozenset(e.name for e in Event)
#: Event names that would carry a contract violation (the adapter raises SpecStateError today
#: and writes no line; counted if a future adapter logs one).
CONTRACT_EVENTS = ("specfsm.contract_violation", "specfsm.contract_failed")


@attrs.frozen
class Problem:
    """One malformed line: where, and what was wrong."""

    source: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line}: {self.message}"


@attrs.frozen
class Record:
    """One parsed line of a log."""

    source: str
    line: int
    event: str
    rank: int
    iteration: int
    data: dict[str, Any]

    @property
    def ts(self) -> float | None:
        ts = self.data.get("ts")
        return float(ts) if isinstance(ts, (int, float)) and not isinstance(ts, bool) else None


@attrs.define
class Run:
    """One engine start of one rank: its config line(s) and what followed."""

    rank: int
    index: int
    source: str
    config: dict[str, Any] | None = None
    controls: list[Record] = attrs.Factory(list)
    transitions: list[Record] = attrs.Factory(list)
    observations: list[Record] = attrs.Factory(list)
    action_failed: list[Record] = attrs.Factory(list)
    policy_failed: list[Record] = attrs.Factory(list)
    policy_replaced: list[Record] = attrs.Factory(list)
    catchups: list[Record] = attrs.Factory(list)
    contract_violations: list[Record] = attrs.Factory(list)
    first_ts: float | None = None
    last_ts: float | None = None
    last_iteration: int = 0

    def note(self, rec: Record) -> None:
        ts = rec.ts
        if ts is not None:
            self.first_ts = ts if self.first_ts is None else min(self.first_ts, ts)
            self.last_ts = ts if self.last_ts is None else max(self.last_ts, ts)
        self.last_iteration = max(self.last_iteration, rec.iteration)

    @property
    def initial_mode(self) -> Mode:
        """The mode the run started in: the config line's (`initial_mode`, the adapter's, or
        `mode`, SpecFSM.describe's), else the first sample's (an observation's mode or a
        transition's source, whichever is first), else SPECULATING."""
        cfg = self.config or {}
        for key in ("initial_mode", "mode"):
            if cfg.get(key) in _MODES:
                return Mode(cfg[key])
        first = min(
            (r for r in (self.transitions[:1] + self.observations[:1])),
            key=lambda r: (r.iteration, r.event != OBSERVATION),
            default=None,
        )
        if first is not None:
            return Mode(first.data["mode"] if first.event == OBSERVATION else first.data["src"])
        return Mode.SPECULATING


@attrs.define
class Engine:
    """Runs of the ranks of one engine (one server), by rank."""

    name: str
    ranks: dict[int, list[Run]] = attrs.Factory(dict)


@attrs.define
class LogSet:
    """Everything read from the inputs."""

    sources: list[str] = attrs.Factory(list)
    lines: int = 0
    records: list[Record] = attrs.Factory(list)
    problems: list[Problem] = attrs.Factory(list)
    truncated: list[Problem] = attrs.Factory(list)
    blank: int = 0
    events: Counter[str] = attrs.Factory(Counter)
    unknown_events: Counter[str] = attrs.Factory(Counter)
    #: inputs with lines but not one specfsm event line (another program's log)
    foreign: list[str] = attrs.Factory(list)

    @property
    def skipped(self) -> int:
        return len(self.problems) + len(self.truncated) + self.blank

    def engines(self) -> list[Engine]:
        return group(self.records)


def _open(path: str) -> tuple[str, IO[str]]:
    if path == "-":
        return "<stdin>", sys.stdin
    return path, open(path, encoding="utf-8", errors="replace")


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check(event: str, obj: dict[str, Any]) -> str | None:
    """None when a known event line has what the tools read, else what is wrong."""
    if not _int(obj.get("rank")):
        return f"{event}: 'rank' must be an integer, got {obj.get('rank')!r}"
    if not _int(obj.get("iteration")):
        return f"{event}: 'iteration' must be an integer, got {obj.get('iteration')!r}"
    ts = obj.get("ts")
    if ts is not None and (not isinstance(ts, (int, float)) or isinstance(ts, bool)):
        return f"{event}: 'ts' must be a number (seconds since the epoch), got {ts!r}"
    if event == TRANSITION:
        for key in ("src", "dst"):
            if obj.get(key) not in _MODES:
                return f"{event}: {key!r} is not a mode ({', '.join(sorted(_MODES))}): " + repr(
                    obj.get(key)
                )
        if obj.get("trigger") not in _EVENTS:
            return f"{event}: 'trigger' is not an event ({', '.join(sorted(_EVENTS))}): " + repr(
                obj.get("trigger")
            )
        if not isinstance(obj.get("reason", ""), str):
            return f"{event}: 'reason' must be a string"
        for key in ("shape_from", "shape_to"):
            if not isinstance(obj.get(key, ""), (str, type(None))):
                return f"{event}: {key!r} must be a shape label or null, got {obj[key]!r:.60}"
    elif event == OBSERVATION and obj.get("mode") not in _MODES:
        return f"{event}: 'mode' is not a mode: {obj.get('mode')!r}"
    if event in (TRANSITION, OBSERVATION):
        if "bs" in obj and not _int(obj["bs"]):
            return f"{event}: 'bs' must be an integer, got {obj['bs']!r}"
        lens = obj.get("accept_lens", [])
        if not isinstance(lens, list) or not all(_int(x) for x in lens):
            return f"{event}: 'accept_lens' must be a list of integers, got {lens!r:.60}"
    return None


def read_stream(name: str, stream: Iterable[str], out: LogSet) -> None:
    """Parse the lines of one input into `out` (records, problems, counts)."""
    pending: tuple[int, str] | None = None  # a bad line: a problem unless it is the last one
    ours = nonblank = 0  # specfsm event lines, non-blank lines
    for no, raw in enumerate(stream, 1):
        out.lines += 1
        if pending is not None:
            out.problems.append(Problem(name, pending[0], pending[1]))
            pending = None
        text = raw.strip()
        if not text:
            out.blank += 1
            continue
        nonblank += 1
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            what = "truncated" if not raw.endswith("\n") else "not JSON"
            pending = (no, f"{what}: {exc.msg} at column {exc.colno}: {text[:60]!r}")
            continue
        if not isinstance(obj, dict):
            out.problems.append(Problem(name, no, f"not a JSON object: {text[:60]!r}"))
            continue
        event = obj.get("event")
        if not isinstance(event, str):
            out.problems.append(Problem(name, no, "no 'event' name (a string)"))
            continue
        out.events[event] += 1
        ours += event.startswith("specfsm.")
        if event not in KNOWN_EVENTS and event not in CONTRACT_EVENTS:
            out.unknown_events[event] += 1
            continue
        why = _check(event, obj)
        if why is not None:
            out.problems.append(Problem(name, no, why))
            continue
        out.records.append(Record(name, no, event, obj["rank"], obj["iteration"], obj))
    if nonblank and not ours:
        out.foreign.append(name)
    if pending is not None:
        # the last line: a writer stopped mid-line (tolerated, counted) when it has no newline;
        # a complete bad last line is malformed like any other
        if pending[1].startswith("truncated"):
            out.truncated.append(Problem(name, pending[0], "truncated last line (tolerated)"))
        else:
            out.problems.append(Problem(name, pending[0], pending[1]))


def read_logs(paths: Sequence[str]) -> LogSet:
    """Read every input ("-" = stdin). OSError propagates (the CLI names the file)."""
    out = LogSet()
    for path in paths:
        name, stream = _open(path)
        out.sources.append(name)
        try:
            read_stream(name, stream, out)
        finally:
            if stream is not sys.stdin:
                stream.close()
    return out


def _runs_of(records: Iterable[Record]) -> dict[int, list[Run]]:
    ranks: dict[int, list[Run]] = {}
    for rec in records:
        runs = ranks.setdefault(rec.rank, [])
        is_start = rec.event == CONFIG and "control" not in rec.data
        if not runs or (is_start and (runs[-1].config is not None or runs[-1].transitions)):
            runs.append(Run(rec.rank, len(runs), rec.source))
        run = runs[-1]
        run.note(rec)
        if rec.event == CONFIG:
            if "control" in rec.data:
                run.controls.append(rec)
            else:
                run.config = rec.data
        elif rec.event == TRANSITION:
            run.transitions.append(rec)
        elif rec.event == OBSERVATION:
            run.observations.append(rec)
        elif rec.event == ACTION_FAILED:
            run.action_failed.append(rec)
        elif rec.event == POLICY_FAILED:
            run.policy_failed.append(rec)
        elif rec.event == POLICY_REPLACED:
            run.policy_replaced.append(rec)
        elif rec.event == CATCHUP:
            run.catchups.append(rec)
        else:
            run.contract_violations.append(rec)
    return ranks


def group(records: Sequence[Record]) -> list[Engine]:
    """Engines from records (see the module docstring): all inputs are one engine unless a rank
    appears in more than one input, then each input is an engine."""
    by_source: dict[str, list[Record]] = {}
    for rec in records:
        by_source.setdefault(rec.source, []).append(rec)
    seen: dict[int, str] = {}
    shared = False
    for source, recs in by_source.items():
        for rank in {r.rank for r in recs}:
            if rank in seen and seen[rank] != source:
                shared = True
            seen[rank] = source
    if shared or len(by_source) <= 1:
        return [Engine(src, _runs_of(recs)) for src, recs in by_source.items()]
    return [Engine(" + ".join(by_source), _runs_of(records))]
