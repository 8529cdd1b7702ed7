"""specfsm's SGLang configuration as the operator gives it: environment variables.

  SPECFSM_CONFIG=/path/config.json     the configuration file (JSON object, keys below)
  SPECFSM_CONFIG_JSON='{"policy": ...}' the same inline (wins over the file, key by key)
  SPECFSM_POLICY=threshold:high=32,low=8 a policy shorthand (wins over both)
  SPECFSM_LOG=/path/transitions.jsonl  the JSON transition log ("-" = stderr)

specfsm is active in SGLang only when one of the first three is set. `resolve` merges them into
the checked `Config`; its keys are documented in `specfsm_sglang.schema` and, for the operator,
in docs/config.md. This module is also the entry point of the ``specfsm.config`` group:
`bundle_config` for `specfsm bundle`, `check_file` for `specfsm config check FILE`.

The configuration's parts, one job each: `schema` (the keys), `values` (each value's checks),
`paths` (the log and profile files), `server_checks` (the configuration against the server's
arguments and shapes), `refusal` (the one refusal line), `control` (the control file's content).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from specfsm.policy import registry
from specfsm_sglang.paths import prepare_log
from specfsm_sglang.refusal import ConfigError
from specfsm_sglang.schema import Config
from specfsm_sglang.values import check_object, make_policy

#: What callers of `resolve` use with it: the configuration it returns, the error it raises,
#: the policy builder its ``policy`` key goes through.
__all__ = [
    "ENV_FILE",
    "ENV_JSON",
    "ENV_LOG",
    "ENV_POLICY",
    "Config",
    "ConfigError",
    "bundle_config",
    "check_file",
    "make_policy",
    "parse_shorthand",
    "read_file",
    "requested",
    "resolve",
]

ENV_FILE = "SPECFSM_CONFIG"
ENV_JSON = "SPECFSM_CONFIG_JSON"
ENV_POLICY = "SPECFSM_POLICY"
ENV_LOG = "SPECFSM_LOG"


def requested(environ: Mapping[str, str] | None = None) -> bool:
    """True when the operator asked for specfsm (any of the config variables is set)."""
    env = os.environ if environ is None else environ
    return any(env.get(k) for k in (ENV_FILE, ENV_JSON, ENV_POLICY))


def parse_shorthand(text: str) -> dict[str, Any]:
    """`threshold:high=32,low=8` -> {"name": "threshold", "high": 32, "low": 8} (the registry's
    shorthand, `specfsm.policy.registry`)."""
    try:
        return registry.parse_shorthand(text, ENV_POLICY)
    except registry.PolicySpecError as exc:
        raise ConfigError(exc.key, exc.reason) from exc


def read_file(path: str) -> Any:
    """The JSON of the configuration file `path`; ConfigError naming SPECFSM_CONFIG."""
    try:
        return json.loads(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(ENV_FILE, f"cannot read configuration {path}: {exc.strerror}") from exc
    except ValueError as exc:
        raise ConfigError(ENV_FILE, f"cannot read configuration {path}: not JSON: {exc}") from exc


def resolve(environ: Mapping[str, str] | None = None, prepare: bool = True) -> Config:
    """The checked configuration (defaults < file < inline JSON < shorthand / SPECFSM_LOG).

    `prepare`: also create the log's directory and check that it is writable.
    """
    env = os.environ if environ is None else environ
    data: dict[str, Any] = {}
    if env.get(ENV_FILE):
        data.update(check_object(ENV_FILE, read_file(env[ENV_FILE]), "the configuration"))
    if env.get(ENV_JSON):
        try:
            inline = json.loads(env[ENV_JSON])
        except ValueError as exc:
            raise ConfigError(ENV_JSON, f"cannot read configuration: not JSON: {exc}") from exc
        data.update(check_object(ENV_JSON, inline, "the configuration"))
    shorthand = env.get(ENV_POLICY)
    if shorthand:
        data["policy"] = parse_shorthand(shorthand)
    if env.get(ENV_LOG):
        data["log"] = env[ENV_LOG]
    try:
        cfg = Config.from_mapping(data)
    except ConfigError as exc:
        if shorthand and exc.key.startswith("policy"):
            raise ConfigError(exc.key, f"{exc.reason} (from {ENV_POLICY}={shorthand!r})") from exc
        raise
    except TypeError as exc:  # attrs: a missing/unknown argument (not reached: keys checked)
        raise ConfigError("config", str(exc)) from exc
    if prepare and cfg.log is not None:
        prepare_log(cfg.log)
    return cfg


def check_file(path: str, flags: Sequence[str] = ()) -> list[str]:
    """`specfsm config check`'s problems with the file `path` (and the server `flags`), one line
    each (`specfsm_sglang.config_check`; reached through this module's entry point)."""
    from specfsm_sglang.config_check import problems

    try:
        data = check_object(ENV_FILE, read_file(path), "the configuration")
    except ConfigError as exc:
        return [str(exc)]
    return [str(exc) for exc in problems(data, flags)]


def bundle_config(environ: Mapping[str, str]) -> dict[str, Any]:
    """The resolved configuration as a dict, for `specfsm bundle` (entry point group
    ``specfsm.config``); ConfigError when it is refused."""
    return resolve(environ, prepare=False).as_dict()
