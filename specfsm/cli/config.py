"""`specfsm config check FILE [-- SERVER FLAGS]`: check a specfsm configuration file with the
launch hook's checks, without SGLang (nothing imports it). One line per problem on stdout,
exit status 1 when there is any, 0 and "ok" otherwise. The server's flags after ``--`` (as
given to ``sglang serve``) add the server-argument and shape checks; other flags are ignored.

The checks belong to the SGLang adapter: they are reached through the module of the
``specfsm.config`` entry point (its ``check_file(path, flags) -> list[str]``), since the core
never imports the adapter by name."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import cast

from specfsm.cli.args import ArgParser, UsageError, add_command

CONFIG_ENTRY_POINT_GROUP = "specfsm.config"
CheckFile = Callable[[str, list[str]], list[str]]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    add_command(subparsers, "config", "check a configuration file as the launch hook does", main)


def _checker() -> CheckFile:
    for ep in sorted(entry_points(group=CONFIG_ENTRY_POINT_GROUP), key=lambda e: e.name):
        try:
            fn = getattr(importlib.import_module(ep.module), "check_file", None)
        except Exception as exc:  # the adapter's own dependencies missing here
            raise UsageError(f"the SGLang adapter does not load here: {exc}") from None
        if callable(fn):
            return cast(CheckFile, fn)
    raise UsageError("no configuration checker installed (the specfsm_sglang adapter)")


def main(argv: list[str] | None = None) -> int:
    argv = list(argv or [])
    flags: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, flags = argv[:i], argv[i + 1 :]
    ap = ArgParser(prog="specfsm config", description=__doc__)
    sub = ap.add_subparsers(dest="action", required=True, parser_class=ArgParser)
    chk = sub.add_parser("check", help="check FILE (a SPECFSM_CONFIG file)")
    chk.add_argument("file", help="the configuration file (JSON object)")
    a = ap.parse_args(argv)
    lines = _checker()(a.file, flags)
    for line in lines:
        print(f"{a.file}: {line}")
    if not lines:
        print(f"{a.file}: ok" + ("" if flags else " (server flags not given: not checked)"))
    return 1 if lines else 0
