"""The GPU bed's machine-dependent settings: the card's name and each server's memory fraction.

- `device_name`: ``nvidia-smi``'s name of GPU 0, written into the runs' header, because every
  figure of the bed is of one card (the simulator's tables are of a named card too), and
  `devices`: the cards a runs file's headers name;
- `mem_fraction`: ``--mem-fraction-static`` per server, from ``MEM_FRACTION`` (default 0.8),
  overridden for one server by ``MEM_FRACTION_<SERVER>`` (``MEM_FRACTION_ADAPTIVE``; the
  shapes example's ``MEM_FRACTION_SHAPES``). On an 80 GiB card the shapes example's extra
  states and SGLang's adaptive server's runtime states do not fit beside a 0.8 pool
  (docs/serving.md), while the other servers keep their largest pool: the strongest
  alternative an operator has on that card.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Mapping
from typing import Any


def device_name() -> str:
    """GPU 0's name, or "unknown" when nvidia-smi does not answer."""
    try:
        got = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    names = got.stdout.strip().splitlines()
    return names[0].strip() if got.returncode == 0 and names else "unknown"


def devices(records: Iterable[Mapping[str, Any]]) -> list[str]:
    """The cards named by the headers among `records` (a runs file's lines), sorted."""
    return sorted({str(r["device"]) for r in records if "started" in r and r.get("device")})


def mem_fraction(server: str) -> float:
    """`server`'s ``--mem-fraction-static``: its own ``MEM_FRACTION_<SERVER>`` where set, else
    ``MEM_FRACTION`` (module docstring); a fraction outside (0, 1) is refused before any server
    starts."""
    own = os.environ.get(f"MEM_FRACTION_{server.upper()}")
    if own is None and server == "specfsm_shapes":
        own = os.environ.get("MEM_FRACTION_SHAPES")
    raw = own if own is not None else os.environ.get("MEM_FRACTION", "0.8")
    try:
        frac = float(raw)
    except ValueError:
        raise ValueError(f"{server}: --mem-fraction-static {raw!r} is not a number") from None
    if not 0.0 < frac < 1.0:
        raise ValueError(f"{server}: --mem-fraction-static {frac} is not in (0, 1)")
    return frac
