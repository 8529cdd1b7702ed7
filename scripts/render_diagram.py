#!/usr/bin/env python3
"""Render the state diagram's Mermaid source to docs/img/state-machine.svg (and .png) with Mermaid
itself in a headless Chromium, as a reader of docs/state-machine.md would see it.

A maintainer's tool, not run by the tests (they check the committed SVG against the table through
the source hash it records). Needs Chromium (Debian: ``apt-get install chromium``) and Mermaid's
browser bundle (``npm install mermaid@11`` in some folder; pass its ``mermaid.min.js``)::

    python3 scripts/render_diagram.py --mermaid-js /tmp/mmd/node_modules/mermaid/dist/mermaid.min.js
"""

from __future__ import annotations

import argparse
import html
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specfsm.fsm.diagram import mermaid_hash, render  # noqa: E402

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mermaid-js", type=Path, required=True)
    ap.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "state-machine.svg")
    args = ap.parse_args()
    source = render("mermaid")
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "diagram.html"
        shutil.copy(args.mermaid_js, Path(tmp) / "mermaid.min.js")
        page.write_text(
            "<!doctype html><html><body style='background:white'>"
            f"<pre class='mermaid'>{html.escape(source)}</pre>"
            "<script src='mermaid.min.js'></script>"
            "<script>mermaid.initialize({startOnLoad: true, theme: 'default'});</script>"
            "</body></html>"
        )
        profile = ["--user-data-dir=" + str(Path(tmp) / "profile")]
        dom = subprocess.run(
            [args.chromium, *FLAGS, *profile, "--virtual-time-budget=15000", "--dump-dom",
             page.as_uri()],
            capture_output=True, text=True, timeout=120, check=True,
        ).stdout  # fmt: skip
        match = re.search(r"<svg[\s\S]*?</svg>", dom)
        if match is None:
            print("no <svg> in the rendered page (did Mermaid fail?)", file=sys.stderr)
            return 1
        svg = match.group(0)
        svg = svg.replace(">", f"><!-- specfsm mermaid source hash {mermaid_hash()} -->", 1)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text('<?xml version="1.0" encoding="UTF-8"?>\n' + svg + "\n")
        png = args.out.with_suffix(".png")
        subprocess.run(
            [args.chromium, *FLAGS, *profile, "--virtual-time-budget=15000",
             "--window-size=640,720", f"--screenshot={png}", page.as_uri()],
            capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
    print(f"wrote {args.out} and {png} (source hash {mermaid_hash()})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
