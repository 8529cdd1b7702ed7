"""The files the configuration names: the transition log and the profile's CSV (``log``,
``profile.save``). A path template may hold ``{rank}`` (replaced by the TP rank) and no other
braces; its directory is created at start-up (`prepare_log`) or only checked (`check_path`,
for `specfsm config check`, which creates nothing).
"""

from __future__ import annotations

import os
from pathlib import Path

from specfsm_sglang.refusal import ConfigError


def log_path(template: str, rank: int) -> str:
    """The log path of `rank` ("{rank}" replaced); ConfigError on any other braces."""
    try:
        return template.format(rank=rank)
    except (KeyError, IndexError, ValueError) as exc:
        raise ConfigError(
            "log", f"bad path template {template!r}: only {{rank}} is replaced ({exc!r})"
        ) from exc


def prepare_log(template: str, rank: int = 0) -> str:
    """Create the log's directory if missing and check the file can be appended to."""
    if template == "-":
        return template
    path = Path(log_path(template, rank))
    parent = path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError("log", f"cannot create directory {parent}: {exc.strerror}") from exc
    if path.is_dir():
        raise ConfigError("log", f"{path} is a directory, expected a file path")
    if path.exists():
        if not os.access(path, os.W_OK):
            raise ConfigError("log", f"{path} is not writable")
    elif not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError("log", f"directory {parent} is not writable")
    return str(path)


def check_path(key: str, template: str) -> None:
    """`prepare_log`'s checks without creating anything."""
    if template == "-":
        return
    path = Path(log_path(template, 0))
    if path.is_dir():
        raise ConfigError(key, f"{path} is a directory, expected a file path")
    if path.exists():
        if not os.access(path, os.W_OK):
            raise ConfigError(key, f"{path} is not writable")
        return
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(key, f"directory {parent} is not writable (needed for {path})")
