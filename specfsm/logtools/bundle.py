"""`specfsm bundle`: one file to attach to a bug report.

Markdown (default) or JSON (`-o` ending in .json): the resolved configuration (SPECFSM_CONFIG /
SPECFSM_CONFIG_JSON / SPECFSM_POLICY / SPECFSM_LOG, resolved by the SGLang adapter when it
imports, else the raw variables), versions (never failing: a missing package reads
"not installed"), the last N transitions and observations (and every failure line) of the given
logs with the reader's problems, and the state diagram (Mermaid, from the table).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Mapping, Sequence
from importlib import metadata
from typing import Any

from specfsm.fsm.log import ACTION_FAILED, OBSERVATION, POLICY_FAILED, POLICY_REPLACED, TRANSITION
from specfsm.logtools.reader import CONTRACT_EVENTS, LogSet

ENV_KEYS = ("SPECFSM_CONFIG", "SPECFSM_CONFIG_JSON", "SPECFSM_POLICY", "SPECFSM_LOG")
PACKAGES = ("specfsm", "sglang", "torch", "transitions", "structlog", "attrs")


def versions() -> dict[str, str]:
    """Installed versions; a missing one is "not installed", never an error."""
    out: dict[str, str] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    out["platform"] = platform.platform()
    return out


def device() -> str:
    """The accelerator torch sees, or why there is none to report."""
    try:
        import torch
    except Exception as exc:  # not installed, or broken
        return f"torch not importable ({type(exc).__name__})"
    try:
        if torch.cuda.is_available():
            n = torch.cuda.device_count()
            names = ", ".join(torch.cuda.get_device_name(i) for i in range(n))
            return f"{n} CUDA device(s): {names} (CUDA {torch.version.cuda})"
        return "no CUDA device (torch.cuda.is_available() is False)"
    except Exception as exc:
        return f"torch.cuda failed: {type(exc).__name__}: {exc}"


#: Entry-point group of configuration resolvers: each entry point is a callable
#: ``(environ: Mapping[str, str]) -> dict`` returning the resolved configuration (the SGLang
#: plugin registers ``sglang``). specfsm never imports a resolver by name.
CONFIG_ENTRY_POINT_GROUP = "specfsm.config"


def resolved_config(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """{"env": the raw variables, "resolved": a resolver's resolution or None, "note": ...}."""
    env = os.environ if environ is None else environ
    raw = {k: env[k] for k in ENV_KEYS if env.get(k)}
    out: dict[str, Any] = {"env": raw, "resolved": None}
    if not raw:
        out["note"] = "no SPECFSM_* variable set: specfsm is off in SGLang"
        return out
    eps = sorted(metadata.entry_points(group=CONFIG_ENTRY_POINT_GROUP), key=lambda e: e.name)
    if not eps:
        out["note"] = f"no configuration resolver installed ({CONFIG_ENTRY_POINT_GROUP}): raw only"
        return out
    ep = eps[0]
    try:
        resolve: Any = ep.load()
    except Exception as exc:  # the resolver's package (e.g. the SGLang plugin) is broken here
        out["note"] = (
            f"the resolver {ep.value} does not import here ({type(exc).__name__}): raw only"
        )
        return out
    try:
        out["resolved"] = resolve(dict(env))
        out["note"] = f"resolved by {ep.value}"
    except Exception as exc:  # a refused configuration is what the bundle reports
        out["note"] = f"the configuration is refused: {exc}"
    return out


def _tail(logs: LogSet, events: Sequence[str], n: int) -> list[dict[str, Any]]:
    want = set(events)
    recs = [r for r in logs.records if r.event in want]
    return [{"where": f"{r.source}:{r.line}", **r.data} for r in recs[-n:]] if n else []


def collect(paths: Sequence[str], logs: LogSet | None, last: int) -> dict[str, Any]:
    from specfsm.fsm.diagram import render

    data: dict[str, Any] = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "argv": sys.argv,
        "versions": versions(),
        "device": device(),
        "config": resolved_config(),
        "logs": list(paths),
    }
    if logs is not None:
        data["log_problems"] = [str(p) for p in logs.problems + logs.truncated]
        data["log_counts"] = dict(logs.events)
        data["configs"] = _tail(logs, ["specfsm.config"], last)
        data["transitions"] = _tail(logs, [TRANSITION], last)
        data["observations"] = _tail(logs, [OBSERVATION], last)
        data["failures"] = _tail(
            logs, [ACTION_FAILED, POLICY_FAILED, POLICY_REPLACED, *CONTRACT_EVENTS], 10 * last
        )
    data["diagram_mermaid"] = render("mermaid")
    return data


def _jsonl(rows: Sequence[Mapping[str, Any]]) -> str:
    return "\n".join(json.dumps(r, default=str) for r in rows) or "(none)"


def markdown(data: Mapping[str, Any]) -> str:
    v = data["versions"]
    parts = [
        "# specfsm bug-report bundle",
        "",
        f"created {data['created']}",
        "",
        "## Versions",
        "",
        *[f"- {k}: {val}" for k, val in v.items()],
        f"- device: {data['device']}",
        "",
        "## Configuration",
        "",
        f"{data['config'].get('note', '')}",
        "",
        "```json",
        json.dumps({k: data["config"][k] for k in ("env", "resolved")}, indent=2, default=str),
        "```",
    ]
    if "transitions" in data:
        parts += [
            "",
            "## Logs",
            "",
            *[f"- {p}" for p in data["logs"]],
            "",
            f"line counts: {json.dumps(data['log_counts'])}",
            "",
            f"problems ({len(data['log_problems'])}):",
            "",
            *([f"- {p}" for p in data["log_problems"]] or ["- none"]),
        ]
        for key, title in (
            ("configs", "config lines"),
            ("failures", "failures (action_failed, policy_failed, policy_replaced, contracts)"),
            ("transitions", "transitions"),
            ("observations", "observations"),
        ):
            rows = data[key]
            parts += ["", f"### Last {len(rows)} {title}", "", "```json", _jsonl(rows), "```"]
    parts += ["", "## State diagram", "", "```mermaid", data["diagram_mermaid"].rstrip(), "```"]
    return "\n".join(parts) + "\n"


def write(path: str, data: Mapping[str, Any]) -> None:
    text = json.dumps(data, indent=1, default=str) if path.endswith(".json") else markdown(data)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
