"""`specfsm logs summary|timeline|replay` and `specfsm bundle` (argparse; errors are one line,
`specfsm.cli.UsageError`, exit 2). Exit status 1: the logs hold malformed lines (unless
--lenient) or ranks that disagreed."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from specfsm.cli.args import (
    ArgParser,
    UsageError,
    add_command,
    draft_shape,
    positive_int,
    require_extra,
)
from specfsm.logtools.reader import LogSet, read_logs
from specfsm.model.tables import ENGINE_TABLE

#: the table measured inside SGLang, as `specfsm tune` and the goodput policy default to
DEFAULT_TABLE = ENGINE_TABLE


def _read(paths: Sequence[str], lenient: bool = True, warn: bool = True) -> LogSet:
    if list(paths).count("-") > 1:
        raise UsageError("LOG: stdin ('-') given more than once")
    try:
        logs = read_logs(paths)
    except OSError as exc:
        raise UsageError(f"{exc.filename}: cannot read: {exc.strerror}") from None
    if logs.foreign:
        raise UsageError(
            f"{logs.foreign[0]}: not a specfsm log (no line is a specfsm.* event; specfsm writes "
            "its log where the config key log or SPECFSM_LOG says)"
        )
    for p in logs.truncated if warn else ():
        print(f"note: {p}", file=sys.stderr)
    if logs.problems and not lenient:
        raise UsageError(
            f"{logs.problems[0]} ({len(logs.problems)} malformed line(s); --lenient skips them, "
            "'specfsm logs summary' lists them)"
        )
    if logs.problems and warn:
        print(
            f"warning: skipped {len(logs.problems)} malformed line(s), first: {logs.problems[0]}",
            file=sys.stderr,
        )
    return logs


def _lenient(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--lenient", action="store_true", help="skip malformed lines (counted) instead of failing"
    )


def _logs_arg(p: argparse.ArgumentParser, nargs: str = "+") -> None:
    p.add_argument("logs", nargs=nargs, metavar="LOG", help="JSON transition log(s); - = stdin")


def summary_main(argv: list[str]) -> int:
    from specfsm.logtools.summary import format_summary, summarize, summary_json

    p = ArgParser(prog="specfsm logs summary", description="what each rank did, per mode")
    _logs_arg(p)
    _lenient(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--max-rows", type=positive_int, default=12, help="rows per list (default 12)")
    a = p.parse_args(argv)
    s = summarize(_read(a.logs, warn=False))
    if a.json:
        print(json.dumps(summary_json(s), indent=1, default=str))
    else:
        print(format_summary(s, a.max_rows))
    if s.disagreements:
        print(
            f"specfsm logs summary: ranks disagreed at {len(s.disagreements)} iteration(s)",
            file=sys.stderr,
        )
        return 1
    if s.logs.problems and not a.lenient:
        print(
            f"specfsm logs summary: {len(s.logs.problems)} malformed line(s), first: "
            f"{s.logs.problems[0]} (--lenient to accept)",
            file=sys.stderr,
        )
        return 1
    return 0


def timeline_main(argv: list[str]) -> int:
    p = ArgParser(prog="specfsm logs timeline", description="mode bands against bs and accept")
    _logs_arg(p)
    _lenient(p)
    p.add_argument("-o", "--out", default="timeline.png", help="PNG path (default timeline.png)")
    p.add_argument("--x", choices=["iteration", "time"], default="iteration")
    p.add_argument(
        "--max-points",
        type=positive_int,
        default=2000,
        help="buckets per series before downsampling (default 2000)",
    )
    a = p.parse_args(argv)
    require_extra("", "sim", "matplotlib")
    from specfsm.logtools.timeline import plot

    logs = _read(a.logs, a.lenient)
    try:
        notes = plot(logs, a.out, a.x, a.max_points)
    except ValueError as exc:
        raise UsageError(f"{' '.join(a.logs)}: {exc}") from None
    except OSError as exc:
        raise UsageError(f"-o {a.out}: cannot write: {exc.strerror}") from None
    for n in notes:
        print(n)
    print(f"wrote {a.out}")
    return 0


def replay_main(argv: list[str]) -> int:
    from specfsm.cli.args import accept_len
    from specfsm.logtools.replay import format_replay, replay
    from specfsm.model.acceptance import DraftShape
    from specfsm.model.costs import PLAIN_VARIANTS
    from specfsm.policy.registry import PolicySpecError, make_policy, parse_spec
    from specfsm.sim.tune import check_ctx, cost_model

    p = ArgParser(
        prog="specfsm logs replay",
        description="recorded inputs, another policy; SPECULATING priced at the shape the "
        "machine was in (launch shape, then each RESHAPE's shape_to)",
    )
    _logs_arg(p)
    _lenient(p)
    p.add_argument(
        "--policy",
        required=True,
        help="threshold:high=32,low=8 or a JSON object (the adapter's syntax)",
    )
    p.add_argument(
        "--table",
        default=DEFAULT_TABLE,
        help=f"cost table: a CSV path or a packaged name; a+b merges two (e.g. "
        f"{DEFAULT_TABLE}+{DEFAULT_TABLE}_ctx4096); default {DEFAULT_TABLE}",
    )
    p.add_argument(
        "--shape",
        type=draft_shape,
        default=None,
        help="the launch draft shape, SPECULATING's until the first RESHAPE (default: the "
        "log's config line, else chain3); each RESHAPE's shape_to prices the samples after it",
    )
    p.add_argument("--ctx", type=positive_int, default=None)
    p.add_argument(
        "--accept-len",
        type=accept_len,
        default=None,
        help="accept length where the log has none measured while SPECULATING",
    )
    p.add_argument(
        "--plain",
        choices=PLAIN_VARIANTS,
        default="zero_tax",
        help="PLAIN's implementation to price (default: zero_tax, the adapter's default)",
    )
    p.add_argument("--rank", type=int, default=None, help="only this rank (default: every one)")
    p.add_argument("--max-rows", type=positive_int, default=20)
    a = p.parse_args(argv)
    try:
        spec = parse_spec(a.policy, "--policy")
        make_policy(spec, "--policy")
    except PolicySpecError as exc:
        raise UsageError(str(exc)) from None
    logs = _read(a.logs, a.lenient)
    done = 0
    for eng in logs.engines():
        for rank in sorted(eng.ranks):
            if a.rank is not None and rank != a.rank:
                continue
            for run in eng.ranks[rank]:
                cfg = run.config or {}
                shape = a.shape
                if shape is None:
                    try:
                        shape = DraftShape(
                            int(cfg["topk"]), int(cfg["steps"]), int(cfg["draft_tokens"])
                        )
                    except (KeyError, TypeError, ValueError):
                        shape = DraftShape.chain(3)
                cost = cost_model("--table", a.table, shape, a.ctx)
                check_ctx(cost, a.ctx)
                label = f"{eng.name} rank {rank} run {run.index}"
                try:
                    res = replay(run, make_policy(spec), cost, a.accept_len, a.plain, a.shape)
                except ValueError as exc:
                    raise UsageError(f"{label}: {exc}") from None
                if done:
                    print()
                print(format_replay(res, label, cost, a.max_rows))
                if run.controls:
                    print(
                        f"note: the recorded run changed its policy {len(run.controls)} time(s) "
                        "through the control file; the replay runs one policy throughout"
                    )
                done += 1
    if not done:
        raise UsageError(
            "no run to replay" + (f" for --rank {a.rank}" if a.rank is not None else "")
        )
    return 0


COMMANDS = {
    "summary": (summary_main, "per rank and overall: modes, transitions, faults, disagreements"),
    "timeline": (timeline_main, "PNG: mode bands against decode bs and accept length"),
    "replay": (replay_main, "recorded observations through another policy, priced"),
}


def logs_main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: specfsm logs <summary|timeline|replay> LOG... [options]\n")
        for name, (_, text) in COMMANDS.items():
            print(f"  {name:9s} {text}")
        return 0 if argv else 2
    if argv[0] not in COMMANDS:
        raise UsageError(f"unknown subcommand {argv[0]!r} (summary, timeline, replay)")
    try:
        return COMMANDS[argv[0]][0](argv[1:])
    except BrokenPipeError:  # the reader went away (| head): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def bundle_main(argv: list[str] | None = None) -> int:
    from specfsm.logtools.bundle import collect, write

    p = ArgParser(prog="specfsm bundle", description="one file for a bug report")
    p.add_argument("logs", nargs="*", metavar="LOG", help="JSON transition log(s); - = stdin")
    p.add_argument(
        "-o",
        "--out",
        default="specfsm-bundle.md",
        help="output: .md (default specfsm-bundle.md) or .json",
    )
    p.add_argument("--last", type=int, default=50, help="last N transitions/observations (50)")
    a = p.parse_args(argv)
    if a.last < 0:
        raise UsageError(f"argument --last: {a.last} is not an integer >= 0")
    logs = _read(a.logs) if a.logs else None
    try:
        write(a.out, collect(a.logs, logs, a.last))
    except OSError as exc:
        raise UsageError(f"-o {a.out}: cannot write: {exc.strerror}") from None
    print(f"wrote {a.out}")
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `logs` and `bundle` subcommands."""
    add_command(subparsers, "logs", "transition logs: summary, timeline, replay", logs_main)
    add_command(subparsers, "bundle", "config, versions, log tail: bug report", bundle_main)
