"""The `specfsm` command: argparse subcommands, each contributed by a `register` function.

Every command validates its input before any expensive work; a refused input (or a missing
optional dependency) is one line on stderr, ``specfsm <command>: <what was wrong>``, and exit
status 2, never a traceback. Commands raise `UsageError` for that; `main` prints it.

Subcommands: the core's own (diagram, walkthrough, tune, sim, logs, bundle, config) and those other
distributions contribute through the entry-point group ``specfsm.cli``: each entry point
resolves to ``register(subparsers: argparse._SubParsersAction) -> None``, which adds one parser
per subcommand with ``set_defaults(run=fn)``; ``fn(argv: list[str]) -> int`` parses the
subcommand's own arguments. specfsm never imports a contributor by name (the SGLang test bed
contributes ``demo`` this way).
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import entry_points
from typing import Any, cast

from specfsm._extras import UsageError
from specfsm.cli.args import Register, Run, add_command

#: Entry-point group of subcommands contributed by other distributions.
ENTRY_POINT_GROUP = "specfsm.cli"


def _core_commands() -> list[Register]:
    from specfsm.cli import config, diagram, sim, tune, walkthrough
    from specfsm.logtools import cli as logs

    return [
        diagram.register,
        walkthrough.register,
        tune.register,
        sim.register,
        logs.register,
        config.register,
    ]


def _unavailable(name: str, exc: BaseException) -> Run:
    def run(argv: list[str]) -> int:
        print(f"specfsm {name}: not available here ({exc})", file=sys.stderr)
        return 2

    return run


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The top-level parser and its subcommands (core ones, then entry points by name)."""
    parser = argparse.ArgumentParser(prog="specfsm", add_help=False)
    subparsers = parser.add_subparsers(dest="command")
    for register in _core_commands():
        register(subparsers)
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        if ep.name in subparsers.choices:
            continue  # a core command cannot be replaced
        try:
            cast(Register, ep.load())(subparsers)
        except Exception as exc:  # e.g. the contributor's dependencies are missing here
            add_command(
                subparsers, ep.name, f"(not available here: {exc})", _unavailable(ep.name, exc)
            )
    return parser, dict(subparsers.choices)


def _help_lines(parser: argparse.ArgumentParser) -> list[str]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [f"  {c.dest:12s} {c.help}" for c in action._choices_actions]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, commands = build_parser()
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: specfsm <command> [args]\n\ncommands:")
        print("\n".join(_help_lines(parser)))
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd not in commands:
        print(f"specfsm: unknown command {cmd!r} (try specfsm --help)", file=sys.stderr)
        return 2
    run: Any = commands[cmd].get_default("run")
    try:
        return int(run(rest) or 0)
    except UsageError as exc:
        print(f"specfsm {cmd}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
