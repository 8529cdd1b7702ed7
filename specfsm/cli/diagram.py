"""`specfsm diagram`: the state diagram (mermaid or dot) generated from the table."""

from __future__ import annotations

import argparse
import sys

from specfsm.cli.args import ArgParser, UsageError, add_command


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    add_command(
        subparsers,
        "diagram",
        "print the state diagram (mermaid or dot) generated from the table",
        main,
    )


def main(argv: list[str]) -> int:
    from specfsm.fsm.diagram import FORMATS, render

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

        from specfsm.fsm.diagram import update_doc

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
