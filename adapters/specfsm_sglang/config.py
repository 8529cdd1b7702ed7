"""specfsm's SGLang configuration: a JSON file and/or environment variables.

  SPECFSM_CONFIG=/path/config.json     the configuration file (JSON object, keys below)
  SPECFSM_CONFIG_JSON='{"policy": ...}' the same inline (wins over the file, key by key)
  SPECFSM_POLICY=threshold:high=32,low=8 a policy shorthand (wins over both)
  SPECFSM_LOG=/path/transitions.jsonl  the JSON transition log ("-" = stderr)

specfsm is active in SGLang only when one of the first three is set. Keys:
  policy            {"name": "threshold", "high": 32, "low": 8, "debounce": 4, "min_dwell": 16}
                    {"name": "fixed", "speculate": false}
                    {"name": "scripted", "schedule": [[100, "PLAIN"], [300, "SPECULATING"]]}
                    {"name": "every", "k": 5}           (flip every k decode forwards)
                    {"name": "random", "seed": 0, "p": 0.5, "hold": 1}
                    {"name": "goodput", "table": "h200_sglang0517_llama8b", "shape": "chain3",
                     "accept_len": 2.5, ...}  (see specfsm.goodput.policy_from_config)
  initial_mode      "SPECULATING" (default) or "PLAIN"
  log               path of the JSON transition log; "-" = stderr; null = structlog default
  observe_every     write specfsm.observation every N decode forwards (0 = off)
  observe_seconds   ... or every T seconds (0 = off)
  contracts_every   check the spec-state contracts on one decode forward in N (default 1)
  control_file      JSON file watched for runtime changes: {"pin": "PLAIN"} / {"policy": {...}}
  control_every     check control_file every N decode forwards (default 64)
  resync_forwards   decode forwards RESYNCING lasts before RESYNCED (default 1)
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specfsm import FixedPolicy, Mode, Policy, ScriptedPolicy, ThresholdPolicy

ENV_FILE = "SPECFSM_CONFIG"
ENV_JSON = "SPECFSM_CONFIG_JSON"
ENV_POLICY = "SPECFSM_POLICY"
ENV_LOG = "SPECFSM_LOG"

DEFAULTS: dict[str, Any] = {
    "policy": {"name": "threshold", "high": 32, "low": 8, "debounce": 4, "min_dwell": 16},
    "initial_mode": "SPECULATING",
    "log": None,
    "observe_every": 0,
    "observe_seconds": 0.0,
    "contracts_every": 1,
    "control_file": None,
    "control_every": 64,
    "resync_forwards": 1,
}


class ConfigError(ValueError):
    """A refused specfsm configuration; the server must not start."""


def requested(environ: Mapping[str, str] | None = None) -> bool:
    """True when the operator asked for specfsm (any of the config variables is set)."""
    env = os.environ if environ is None else environ
    return any(env.get(k) for k in (ENV_FILE, ENV_JSON, ENV_POLICY))


def _parse_shorthand(text: str) -> dict[str, Any]:
    """`threshold:high=32,low=8` -> {"name": "threshold", "high": 32, "low": 8}."""
    name, _, rest = text.partition(":")
    out: dict[str, Any] = {"name": name.strip()}
    for item in filter(None, (x.strip() for x in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq:
            raise ConfigError(f"{ENV_POLICY}: expected key=value, got {item!r}")
        out[key.strip()] = json.loads(value) if value.strip() not in ("",) else value
    return out


def resolve(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The resolved configuration (defaults < file < inline JSON < shorthand / SPECFSM_LOG)."""
    env = os.environ if environ is None else environ
    cfg = dict(DEFAULTS)
    try:
        if env.get(ENV_FILE):
            cfg.update(_object(json.loads(Path(env[ENV_FILE]).read_text()), ENV_FILE))
        if env.get(ENV_JSON):
            cfg.update(_object(json.loads(env[ENV_JSON]), ENV_JSON))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"specfsm: cannot read configuration: {exc}") from exc
    if env.get(ENV_POLICY):
        cfg["policy"] = _parse_shorthand(env[ENV_POLICY])
    if env.get(ENV_LOG):
        cfg["log"] = env[ENV_LOG]
    unknown = set(cfg) - set(DEFAULTS)
    if unknown:
        raise ConfigError(f"specfsm: unknown configuration keys {sorted(unknown)}")
    if cfg["initial_mode"] not in ("SPECULATING", "PLAIN"):
        raise ConfigError(
            f"specfsm: initial_mode must be SPECULATING or PLAIN: {cfg['initial_mode']!r}"
        )
    for key in ("observe_every", "contracts_every", "control_every", "resync_forwards"):
        if not isinstance(cfg[key], int) or cfg[key] < (1 if key != "observe_every" else 0):
            raise ConfigError(f"specfsm: {key} must be an integer >= 1 (observe_every >= 0)")
    make_policy(cfg["policy"])  # validate now: a bad policy refuses the server at startup
    return cfg


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"specfsm: {where} must hold a JSON object")
    return value


def make_policy(spec: Mapping[str, Any]) -> Policy:
    """Build a policy from its JSON description; ConfigError on anything wrong."""
    if not isinstance(spec, Mapping) or "name" not in spec:
        raise ConfigError(f"specfsm: policy must be an object with a name: {spec!r}")
    args = {k: v for k, v in spec.items() if k != "name"}
    name = spec["name"]
    try:
        if name == "threshold":
            return ThresholdPolicy(**args)
        if name == "fixed":
            return FixedPolicy(**args)
        if name == "scripted":
            schedule = [(int(it), Mode[str(m)]) for it, m in args.pop("schedule")]
            initial = Mode[str(args.pop("initial", "SPECULATING"))]
            _no_more(args, name)
            return ScriptedPolicy(schedule, initial=initial)
        if name == "every":
            k = int(args.pop("k"))
            _no_more(args, name)
            if k < 1:
                raise ValueError("k must be >= 1")
            return ScriptedPolicy(lambda i: (i // k) % 2 == 1, initial=Mode.SPECULATING)
        if name == "random":
            seed, p, hold = (
                int(args.pop("seed", 0)),
                float(args.pop("p", 0.5)),
                int(args.pop("hold", 1)),
            )
            _no_more(args, name)
            if not 0.0 <= p <= 1.0 or hold < 1:
                raise ValueError("need 0 <= p <= 1 and hold >= 1")
            # rank-invariant: a pure function of (seed, iteration)
            return ScriptedPolicy(
                lambda i: random.Random(seed * 1_000_003 + i // hold).random() < p
            )
        if name == "goodput":
            from specfsm.goodput import policy_from_config

            return policy_from_config(args)
    except ConfigError:
        raise
    except (TypeError, ValueError, KeyError, ImportError) as exc:
        raise ConfigError(f"specfsm: bad {name!r} policy {dict(spec)!r}: {exc}") from exc
    raise ConfigError(
        f"specfsm: unknown policy {name!r} (threshold, fixed, scripted, every, random, goodput)"
    )


def _no_more(args: Mapping[str, Any], name: str) -> None:
    if args:
        raise ConfigError(f"specfsm: unknown {name!r} policy parameters {sorted(args)}")
