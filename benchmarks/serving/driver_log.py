"""A driver log read back: the run and server records its lines hold, for a call whose
``runs.jsonl`` did not come back (``serving_bench.py --from-log``).

Standard library only.
"""

from __future__ import annotations

import re
from typing import Any

_RUN = re.compile(
    r"\] (?P<label>\S+) (?P<trace>\S+) rep(?P<rep>\d+): (?P<tok>[\d.]+) tok/s, "
    r"(?P<fin>\d+)/(?P<req>\d+) finished, lost (?P<lost>\d+), (?P<phases>.*)$"
)
_UP = re.compile(r"\] (?P<server>\S+): up in (?P<s>[\d.]+) s, KV pool (?P<kv>\d+|None) tokens")


def runs_from_log(text: str) -> list[dict[str, Any]]:
    """The run and server records a driver log holds (its one line per run), for a run whose
    ``runs.jsonl`` did not come back: throughput, phases, finished and lost requests only
    (no latencies, no per-request records, so no greedy comparison)."""
    out: list[dict[str, Any]] = []
    for line in text.splitlines():
        m = _RUN.search(line)
        if m:
            phases = [
                {"phase": k, "tok_s": float(v)}
                for k, _, v in (x.partition("=") for x in m["phases"].split())
            ]
            out.append(
                {
                    "server": m["label"],
                    "trace": m["trace"],
                    "rep": int(m["rep"]),
                    "tok_s": float(m["tok"]),
                    "finished": int(m["fin"]),
                    "requests": int(m["req"]),
                    "lost": int(m["lost"]),
                    "phases": phases,
                    "from_log": True,
                }
            )
            continue
        u = _UP.search(line)
        if u:
            kv = None if u["kv"] == "None" else int(u["kv"])
            out.append({"server": u["server"], "start_s": float(u["s"]), "kv_tokens": kv})
    return out
