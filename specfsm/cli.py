"""The `specfsm` command."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from typing import cast

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
}


def _diagram(argv: list[str]) -> int:
    from specfsm.diagram import FORMATS, render

    p = argparse.ArgumentParser(prog="specfsm diagram", description="state diagram from the table")
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
        path.write_text(update_doc(path.read_text()))
        print(f"updated {path}")
        return 0
    sys.stdout.write(render(args.format))
    return 0


def _walkthrough(argv: list[str]) -> int:
    from specfsm import walkthrough

    argparse.ArgumentParser(
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
        return local[cmd][0](rest)
    if cmd in _DELEGATED:
        module, func, _ = _DELEGATED[cmd]
        try:
            fn = cast(Callable[[list[str]], int], getattr(importlib.import_module(module), func))
        except ImportError as exc:
            print(f"specfsm {cmd}: not available here ({exc})", file=sys.stderr)
            return 2
        return int(fn(rest) or 0)
    print(f"specfsm: unknown command {cmd!r} (try specfsm --help)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
