"""What a server that failed to start says: the cause its log gives, and the summary's label.

A server whose process ends before ``/health`` answers raises `ExitedAtStart` carrying the
cause found in its log (the last exception it names), so a caller can act on the cause (the
driver's ``--oom-retry`` starts a server out of GPU memory again lower) without parsing the
error's text; a record of a failed start keeps the log tail, and `failed_label` names it in
the summary from that tail, so results filed before the cause was carried read alike.

Standard library only.
"""

from __future__ import annotations

import re
from typing import Any

#: a Python exception's last line in a server's log: ``torch.OutOfMemoryError: CUDA out of ...``
_RAISED = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?([A-Za-z_]\w*(?:Error|Exception)): (.+)$")

_SENTENCE_END = re.compile(r"(?<=[.])\s+")

#: the most characters of a cause kept in a record's one-line reason
CAUSE_CHARS = 160


def exit_cause(log_text: str) -> str:
    """Why a server that exited at start did: the last exception its log names, as ``Name:``
    and the message's first two sentences (at most `CAUSE_CHARS`), or "" where it names none."""
    for line in reversed(log_text.splitlines()):
        got = _RAISED.match(line.strip())
        if got:
            name, msg = got.groups()
            first = " ".join(_SENTENCE_END.split(msg)[:2])
            return f"{name}: {first}"[:CAUSE_CHARS]
    return ""


def failed_label(rec: dict[str, Any]) -> str:
    """A server record that failed, as the summary names it: the server, the driver it came
    from, and the cause its log gave at the memory fraction it was started with."""
    label = rec["server"] + (f" in {rec['source']}" if rec.get("source") else "")
    cause = exit_cause(str(rec.get("start_failed", "")))
    if cause and rec.get("mem_fraction_static"):
        cause += f" (--mem-fraction-static {rec['mem_fraction_static']})"
    return f"{label}: {cause}" if cause else label


class ExitedAtStart(RuntimeError):
    """The server's process ended before ``/health`` answered; `cause` is `exit_cause` of its
    log ("" where the log names no exception)."""

    def __init__(self, message: str, cause: str) -> None:
        super().__init__(message)
        self.cause = cause
