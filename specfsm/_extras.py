"""Optional dependencies and refused inputs: the one-line errors every command prints.

A leaf module (imports only the stdlib) so that the FSM core (`specfsm.fsm.diagram`), the
simulator, the log tools and the CLI can all name a missing extra the same way.
"""

from __future__ import annotations

import importlib


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
