"""What every `specfsm` subcommand shares: how it is added to the command (`add_command`), the
parser that fails in one line, and the argparse `type=` converters that name the value and what
was expected. Subcommand modules import from here, never from `specfsm.cli.main` (which imports
them to build the command)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import NoReturn

from specfsm._extras import MissingExtra, UsageError, require_extra
from specfsm.model.acceptance import DraftShape, parse_shape

__all__ = [
    "ArgParser",
    "MissingExtra",
    "Register",
    "Run",
    "UsageError",
    "accept_len",
    "add_command",
    "draft_shape",
    "nonnegative_int",
    "positive_float",
    "positive_float_list",
    "positive_int",
    "positive_int_list",
    "probability",
    "require_extra",
]


Run = Callable[[list[str]], int]
Register = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]


def add_command(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    help: str,
    run: Run,
) -> None:
    """Add subcommand `name`: `run(argv)` parses and runs it (its own ArgParser, its own --help)."""
    sub = subparsers.add_parser(name, help=help, add_help=False)
    sub.set_defaults(run=run)


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


def draft_shape(text: str) -> DraftShape:
    """A draft shape in the one shape syntax (`specfsm.model.acceptance.parse_shape`)."""
    try:
        return parse_shape(text)
    except ValueError as exc:
        reason = str(exc).split(": ", 1)[-1]
        if reason.startswith("DraftShape"):  # the numbers parse but make no EAGLE shape
            raise argparse.ArgumentTypeError(f"{text!r}: {reason}") from None
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a draft shape: chain3, tree, chainN or topk,steps,tokens"
        ) from None
