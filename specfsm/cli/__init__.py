"""The `specfsm` command (`main`) and what its subcommands share (`args`).

Subcommands live one per module here (diagram, walkthrough, tune, sim) or next to their subject
(`specfsm.logtools.cli`: logs, bundle); other distributions add theirs through the entry-point
group ``specfsm.cli`` (see `specfsm.cli.main`).
"""

from __future__ import annotations

from specfsm.cli.args import (
    ArgParser,
    MissingExtra,
    UsageError,
    accept_len,
    add_command,
    draft_shape,
    nonnegative_int,
    positive_float,
    positive_float_list,
    positive_int,
    positive_int_list,
    probability,
    require_extra,
)
from specfsm.cli.main import ENTRY_POINT_GROUP, main

__all__ = [
    "ENTRY_POINT_GROUP",
    "ArgParser",
    "MissingExtra",
    "UsageError",
    "accept_len",
    "add_command",
    "draft_shape",
    "main",
    "nonnegative_int",
    "positive_float",
    "positive_float_list",
    "positive_int",
    "positive_int_list",
    "probability",
    "require_extra",
]
