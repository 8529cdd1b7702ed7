"""How specfsm refuses: the one error type of a refused configuration and its one-line text.

Every check (a key's value, the server's arguments, the shapes, the control file's content)
raises `ConfigError` ``<key>: <reason>``; at start-up it is printed to stderr as
``specfsm: refusing to start: <key>: <reason>`` and raised as `StartRefused` (`refuse`).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import NoReturn


class ConfigError(ValueError):
    """A refused specfsm configuration (or control-file content): ``<key>: <reason>``."""

    def __init__(self, key: str, reason: str) -> None:
        self.key = key
        self.reason = reason
        super().__init__(f"{key}: {reason}")


class StartRefused(ConfigError):
    """Raised in the engine's parent before any worker starts; its text is the one line."""

    def __str__(self) -> str:
        return refusal_line(self)


def out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` is the device running out of memory: torch's own error, or SGLang's graph
    capture re-raising it as a plain Exception ("Capture cuda graph failed: CUDA out of
    memory"). Read by name and text, so that this module imports no torch."""
    return type(exc).__name__ == "OutOfMemoryError" or "out of memory" in str(exc).lower()


@contextlib.contextmanager
def refuse_out_of_memory(key: str, reason: str) -> Iterator[None]:
    """Run the block; the device running out of memory in it refuses as ``<key>: <reason>
    (<the error's text>)``, any other error passes through."""
    try:
        yield
    except Exception as exc:
        if not out_of_memory(exc):
            raise
        raise ConfigError(key, f"{reason} ({str(exc)[:300]})") from None


def refusal_line(exc: ConfigError) -> str:
    return f"specfsm: refusing to start: {exc.key}: {exc.reason}"


def refuse(exc: ConfigError) -> NoReturn:
    """Print the one refusal line (stderr) and raise it as `StartRefused`."""
    sys.stderr.write(refusal_line(exc) + "\n")
    sys.stderr.flush()
    raise StartRefused(exc.key, exc.reason) from None
