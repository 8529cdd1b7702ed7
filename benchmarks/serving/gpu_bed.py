"""The GPU bed's machine-dependent settings: the card's name and each server's memory fraction.

- `device_name`: ``nvidia-smi``'s name of GPU 0, written into the runs' header, because every
  figure of the bed is of one card (the simulator's tables are of a named card too), and
  `devices`: the cards a runs file's headers name;
- `mem_fraction`: ``--mem-fraction-static`` per server, from ``MEM_FRACTION`` (default 0.8) and
  ``MEM_FRACTION_SHAPES`` (the shapes example alone). On an 80 GiB card the shapes example's
  extra states do not fit beside a 0.8 pool (docs/serving.md), while the other servers keep
  their largest pool: the strongest alternative an operator has on that card.
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
    """`server`'s ``--mem-fraction-static`` (module docstring); a fraction outside (0, 1) is
    refused before any server starts."""
    frac = float(os.environ.get("MEM_FRACTION", "0.8"))
    if server == "specfsm_shapes":
        frac = float(os.environ.get("MEM_FRACTION_SHAPES", frac))
    if not 0.0 < frac < 1.0:
        raise ValueError(f"{server}: --mem-fraction-static {frac} is not in (0, 1)")
    return frac
