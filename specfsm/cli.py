"""The `specfsm` command.

Every command validates its input before any expensive work; a refused input (or a missing
optional dependency) is one line on stderr, ``specfsm <command>: <what was wrong>``, and exit
status 2, never a traceback. Commands raise `UsageError` for that; `main` prints it.
"""

from __future__ import annotations

import argparse
import importlib
import math
import sys
from collections.abc import Callable
from typing import NoReturn, cast

# Subcommands whose bodies live elsewhere: (module, function), imported only when used, so the
# core CLI never imports torch or sglang.
_DELEGATED: dict[str, tuple[str, str, str]] = {
    "demo": (
        "specfsm_sglang.demo",
        "main",
        "real SGLang on CPU: tiny target + EAGLE-3 draft under a load ramp",
    ),
    "tune": ("specfsm.policy_cli", "tune_main", "crossover and ThresholdPolicy from a cost table"),
    "sim": ("specfsm.policy_cli", "sim_main", "serving simulator: policies side by side"),
    "logs": ("specfsm.logtools.cli", "logs_main", "transition logs: summary, timeline, replay"),
    "bundle": ("specfsm.logtools.cli", "bundle_main", "config, versions, log tail: bug report"),
}


# ------------------------------------------------------------------------------ input errors
class UsageError(Exception):
    """A refused input or a missing optional dependency: one line for the user, exit status 2."""


class MissingExtra(UsageError):
    """A command needs Python packages that an optional extra of specfsm installs."""

    def __init__(self, what: str, modules: list[str], extra: str) -> None:
        self.modules, self.extra = modules, extra
        super().__init__(
            f"{what + ' ' if what else ''}needs {' and '.join(modules)}, not installed here: "
            f'pip install "specfsm[{extra}]" (or pip install {" ".join(modules)})'
        )


def require_extra(what: str, extra: str, *modules: str) -> None:
    """Raise `MissingExtra` naming every module of `modules` that does not import (`what`: the
    option that needs them, or "" for the whole command)."""
    missing = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise MissingExtra(what, missing, extra)


class ArgParser(argparse.ArgumentParser):
    """argparse that raises `UsageError` (one line) instead of printing usage and exiting 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


# argparse `type=` converters: each names the value and what was expected.
def _number(text: str, kind: Callable[[str], float], what: str) -> float:
    try:
        value = kind(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1."""
    value = int(_number(text, int, "an integer >= 1"))
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= 1")
    return value


def nonnegative_int(text: str) -> int:
    """An integer >= 0."""
    value = int(_number(text, int, "an integer >= 0"))
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= 0")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0."""
    value = _number(text, float, "a number > 0")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number > 0")
    return value


def probability(text: str) -> float:
    """A number in [0, 1] (a per-token acceptance rate)."""
    what = "a number in [0, 1] (a per-token acceptance rate)"
    value = _number(text, float, what)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
    return value


def accept_len(text: str) -> float:
    """A mean accept length: >= 1 (the bonus token is always committed)."""
    what = "an accept length >= 1 (tokens per verify incl. the bonus token)"
    value = _number(text, float, what)
    if value < 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
    return value


def _item_in(item: str, text: str) -> str:
    return repr(item) if item == text.strip() else f"{item!r} (in {text!r})"


def positive_int_list(text: str) -> list[int]:
    """Comma-separated integers >= 1 (empty: none)."""
    out = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        try:
            value = int(item)
        except ValueError:
            value = 0
        if value < 1:
            raise argparse.ArgumentTypeError(
                f"{_item_in(item, text)} is not an integer >= 1 (expected e.g. 1,2,4)"
            )
        out.append(value)
    return out


def positive_float_list(text: str) -> list[float]:
    """Comma-separated numbers > 0 (empty: none)."""
    out = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        try:
            value = float(item)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value > 0):
            raise argparse.ArgumentTypeError(
                f"{_item_in(item, text)} is not a number > 0 (expected e.g. 0.5,2,8)"
            )
        out.append(value)
    return out


# ------------------------------------------------------------------------------ commands
def _diagram(argv: list[str]) -> int:
    from specfsm.diagram import FORMATS, render

    p = ArgParser(prog="specfsm diagram", description="state diagram from the table")
    p.add_argument("--format", choices=FORMATS, default="mermaid")
    p.add_argument(
        "--update-doc",
        metavar="PATH",
        help="rewrite the generated block of a doc (e.g. docs/state-machine.md) instead",
    )
    args = p.parse_args(argv)
    if args.update_doc:
        from pathlib import Path

        from specfsm.diagram import update_doc

        path = Path(args.update_doc)
        try:
            text = update_doc(path.read_text())
        except OSError as exc:
            raise UsageError(f"--update-doc {path}: cannot read: {exc.strerror}") from None
        except ValueError as exc:
            raise UsageError(f"--update-doc {path}: {exc}") from None
        path.write_text(text)
        print(f"updated {path}")
        return 0
    sys.stdout.write(render(args.format))
    return 0


def _walkthrough(argv: list[str]) -> int:
    from specfsm import walkthrough

    ArgParser(
        prog="specfsm walkthrough", description="simulated load ramp through the real FSM"
    ).parse_args(argv)
    walkthrough.run()
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    local: dict[str, tuple[Callable[[list[str]], int], str]] = {
        "diagram": (_diagram, "print the state diagram (mermaid or dot) generated from the table"),
        "walkthrough": (_walkthrough, "simulated load ramp through the FSM, with its JSON log"),
    }
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: specfsm <command> [args]\n\ncommands:")
        for name, (_, text) in local.items():
            print(f"  {name:12s} {text}")
        for name, (_, _, text) in _DELEGATED.items():
            print(f"  {name:12s} {text}")
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd in local:
        fn = local[cmd][0]
    elif cmd in _DELEGATED:
        module, func, _ = _DELEGATED[cmd]
        try:
            fn = cast(Callable[[list[str]], int], getattr(importlib.import_module(module), func))
        except ImportError as exc:
            print(f"specfsm {cmd}: not available here ({exc})", file=sys.stderr)
            return 2
    else:
        print(f"specfsm: unknown command {cmd!r} (try specfsm --help)", file=sys.stderr)
        return 2
    try:
        return int(fn(rest) or 0)
    except UsageError as exc:
        print(f"specfsm {cmd}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
