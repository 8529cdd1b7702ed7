"""specfsm's SGLang configuration: one typed schema for the config and the control file.

  SPECFSM_CONFIG=/path/config.json     the configuration file (JSON object, keys below)
  SPECFSM_CONFIG_JSON='{"policy": ...}' the same inline (wins over the file, key by key)
  SPECFSM_POLICY=threshold:high=32,low=8 a policy shorthand (wins over both)
  SPECFSM_LOG=/path/transitions.jsonl  the JSON transition log ("-" = stderr)

specfsm is active in SGLang only when one of the first three is set. Keys (`Config`):
  policy            production policies:
                    {"name": "threshold", "high": 32, "low": 8, "debounce": 4, "min_dwell": 16,
                     "signal": "decode_bs"}
                    {"name": "goodput", "table": "h200_sglang0517_llama8b", "shape": "chain3",
                     "accept_len": 2.5, ...}  (see specfsm.goodput.policy_from_config; the shape
                     must be the server's --speculative-* shape, checked at start)
                    {"name": "fixed", "speculate": false}
                    {"name": "scripted", "schedule": [[100, "PLAIN"], [300, "SPECULATING"]]}
                    your own (the `specfsm.policies.Policy` protocol):
                    {"name": "mypkg.mod:MyPolicy", ...kwargs} or an entry point name in the
                    group "specfsm.policies"
                    test policies (tests and the GPU acceptance suite, not for production):
                    {"name": "every", "k": 5}           (flip every k decode forwards)
                    {"name": "random", "seed": 0, "p": 0.5, "hold": 1}
  initial_mode      "SPECULATING" (default) or "PLAIN"
  log               path of the JSON transition log ("{rank}" is replaced by the TP rank; its
                    directory is created); "-" = stderr; null = structlog default
  observe_every     write specfsm.observation every N decode forwards (0 = off)
  observe_seconds   ... or every T seconds (0 = off)
  contracts_every   check the spec-state contracts on one decode forward in N (default 1)
  control_file      JSON file watched for runtime changes: {"pin": "PLAIN"} / {"policy": {...}}
  control_every     check control_file every N decode forwards (default 64)
  resync_forwards   decode forwards RESYNCING lasts before RESYNCED (default 1)
  max_policy_faults faults of one policy after which it is replaced by the fixed PLAIN policy
                    (default 3)

Every value is checked before SGLang starts a worker. A refusal is a `ConfigError` whose text is
one line, ``<key>: <reason>`` (e.g. ``observe_seconds: expected a number >= 0, got 'soon'``);
at start-up it is printed as ``specfsm: refusing to start: <key>: <reason>``.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from specfsm import FixedPolicy, Mode, Policy, ScriptedPolicy, ThresholdPolicy
from specfsm.machine import DEFAULT_MAX_POLICY_FAULTS
from specfsm.policies import check_policy, load_policy_factory

ENV_FILE = "SPECFSM_CONFIG"
ENV_JSON = "SPECFSM_CONFIG_JSON"
ENV_POLICY = "SPECFSM_POLICY"
ENV_LOG = "SPECFSM_LOG"

#: The control file is read only when it is a regular file of at most this many bytes.
MAX_CONTROL_BYTES = 64 * 1024

DEFAULT_POLICY: dict[str, Any] = {
    "name": "threshold",
    "high": 32,
    "low": 8,
    "debounce": 4,
    "min_dwell": 16,
}
PRODUCTION_POLICIES = ("threshold", "goodput", "fixed", "scripted")
TEST_POLICIES = ("every", "random")


class ConfigError(ValueError):
    """A refused specfsm configuration (or control-file content): ``<key>: <reason>``."""

    def __init__(self, key: str, reason: str) -> None:
        self.key = key
        self.reason = reason
        super().__init__(f"{key}: {reason}")


class StartRefused(ConfigError):
    """Raised in the engine's parent before any worker starts; its text is the one line."""

    def __str__(self) -> str:
        return refusal_line(self)


def refusal_line(exc: ConfigError) -> str:
    return f"specfsm: refusing to start: {exc.key}: {exc.reason}"


# ------------------------------------------------------------------------------- value checks
def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v  # not NaN


def check_int(key: str, value: object, minimum: int | None = None, note: str = "") -> int:
    """`value` as an int (a JSON integer; not a bool, not a string) >= minimum."""
    if not _is_int(value) or (minimum is not None and value < minimum):  # type: ignore[operator]
        bound = f" >= {minimum}" if minimum is not None else ""
        raise ConfigError(key, f"expected an integer{bound}{note}, got {value!r}")
    return int(value)  # type: ignore[call-overload]


def check_number(key: str, value: object, lo: float = 0.0, hi: float | None = None) -> float:
    if not _is_number(value) or value < lo or (hi is not None and value > hi):  # type: ignore[operator]
        rng = f"in [{lo:g}, {hi:g}]" if hi is not None else f">= {lo:g}"
        raise ConfigError(key, f"expected a number {rng}, got {value!r}")
    return float(value)  # type: ignore[arg-type]


def check_choice(key: str, value: object, choices: tuple[object, ...]) -> Any:
    if value not in choices or isinstance(value, bool) != any(isinstance(c, bool) for c in choices):
        allowed = " or ".join(json.dumps(c) for c in choices)
        raise ConfigError(key, f"expected {allowed}, got {value!r}")
    return value


def check_object(key: str, value: object, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        kind = "null" if value is None else type(value).__name__
        raise ConfigError(key, f"expected a JSON object ({what}), got a {kind}: {value!r:.60}")
    return value


def check_keys(key: str, value: Mapping[str, Any], known: tuple[str, ...]) -> None:
    unknown = sorted(set(value) - set(known))
    if unknown:
        raise ConfigError(
            f"{key}.{unknown[0]}" if key else unknown[0],
            f"unknown configuration keys {unknown} (known: {', '.join(known)})",
        )


# ------------------------------------------------------------------------------- policies
def _schedule(key: str, value: object) -> list[tuple[int, Mode]]:
    if not isinstance(value, list):
        raise ConfigError(key, f"expected a list of [iteration, mode] pairs, got {value!r:.60}")
    out = []
    for i, item in enumerate(value):
        if not (isinstance(item, list) and len(item) == 2):
            raise ConfigError(f"{key}[{i}]", f"expected [iteration, mode], got {item!r}")
        it = check_int(f"{key}[{i}][0]", item[0], 0)
        mode = check_choice(f"{key}[{i}][1]", item[1], ("SPECULATING", "PLAIN"))
        out.append((it, Mode[mode]))
    return out


#: Built-in policies: parameter -> check, and the required parameters.
_Check = Callable[[str, object], Any]
_BUILTIN: dict[str, tuple[dict[str, _Check], tuple[str, ...]]] = {
    "threshold": (
        {
            "high": lambda k, v: check_int(k, v, 1),
            "low": lambda k, v: check_int(k, v, 0),
            "debounce": lambda k, v: check_int(k, v, 1),
            "min_dwell": lambda k, v: check_int(k, v, 0),
            "signal": lambda k, v: check_choice(k, v, ("decode_bs", "running")),
        },
        ("high", "low"),
    ),
    "fixed": ({"speculate": lambda k, v: check_choice(k, v, (True, False))}, ("speculate",)),
    "scripted": (
        {
            "schedule": _schedule,
            "initial": lambda k, v: check_choice(k, v, ("SPECULATING", "PLAIN")),
        },
        ("schedule",),
    ),
    "every": ({"k": lambda k, v: check_int(k, v, 1)}, ("k",)),
    "random": (
        {
            "seed": lambda k, v: check_int(k, v),
            "p": lambda k, v: check_number(k, v, 0.0, 1.0),
            "hold": lambda k, v: check_int(k, v, 1),
        },
        (),
    ),
}


def _known_policies() -> str:
    return (
        f"production policies: {', '.join(PRODUCTION_POLICIES)}; test policies: "
        f"{', '.join(TEST_POLICIES)}; or your own as 'package.module:Class' or an entry point "
        "in group 'specfsm.policies'"
    )


def make_policy(spec: object, key: str = "policy") -> Policy:
    """Build a policy from its JSON description; ConfigError ``<key>.<param>: <reason>``."""
    spec = check_object(key, spec, 'e.g. {"name": "threshold", "high": 32, "low": 8}')
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{key}.name", f"expected a policy name ({_known_policies()})")
    args = {k: v for k, v in spec.items() if k != "name"}
    if name in _BUILTIN:
        checks, required = _BUILTIN[name]
        check_keys(key, args, ("name", *checks))
        vals = {k: checks[k](f"{key}.{k}", v) for k, v in args.items()}
        for req in required:
            if req not in args:
                raise ConfigError(f"{key}.{req}", f"required by the {name!r} policy")
        return _build_builtin(name, vals, key)
    if name == "goodput":
        from specfsm.goodput import policy_from_config

        try:
            return policy_from_config(args)
        except (TypeError, ValueError) as exc:
            raise ConfigError(key, str(exc)) from exc
    if ":" not in name and not _entry_point_exists(name):
        raise ConfigError(f"{key}.name", f"unknown policy {name!r} ({_known_policies()})")
    try:
        factory = load_policy_factory(name)
    except (LookupError, TypeError) as exc:
        raise ConfigError(f"{key}.name", str(exc)) from exc
    try:
        built = factory(**args)
    except Exception as exc:
        raise ConfigError(
            key, f"{name}(**{args!r:.80}) failed: {type(exc).__name__}: {exc}"
        ) from exc
    try:
        return check_policy(built, name)
    except TypeError as exc:
        raise ConfigError(key, str(exc)) from exc


def _entry_point_exists(name: str) -> bool:
    from importlib.metadata import entry_points

    from specfsm.policies import ENTRY_POINT_GROUP

    return any(ep.name == name for ep in entry_points(group=ENTRY_POINT_GROUP))


def _build_builtin(name: str, vals: dict[str, Any], key: str) -> Policy:
    try:
        if name == "threshold":
            return ThresholdPolicy(**vals)
        if name == "fixed":
            return FixedPolicy(vals["speculate"])
        if name == "scripted":
            return ScriptedPolicy(
                vals["schedule"], initial=Mode[vals.get("initial", "SPECULATING")]
            )
        if name == "every":
            k = vals["k"]
            return ScriptedPolicy(lambda i: (i // k) % 2 == 1, initial=Mode.SPECULATING)
        seed, p, hold = vals.get("seed", 0), vals.get("p", 0.5), vals.get("hold", 1)
        # rank-invariant: a pure function of (seed, iteration)
        return ScriptedPolicy(lambda i: random.Random(seed * 1_000_003 + i // hold).random() < p)
    except ValueError as exc:
        raise ConfigError(key, str(exc)) from exc


def server_shape(server_args: Any) -> tuple[int, int, int | None]:
    """(topk, steps, draft_tokens) of the server's EAGLE drafting."""
    topk = int(getattr(server_args, "speculative_eagle_topk", None) or 1)
    steps = int(getattr(server_args, "speculative_num_steps", None) or 0)
    tokens = getattr(server_args, "speculative_num_draft_tokens", None)
    return topk, steps, (int(tokens) if tokens is not None else None)


def shape_label(topk: int, steps: int, tokens: int | None) -> str:
    if topk == 1:
        return f"chain{steps} (topk 1, {steps} steps, {tokens} draft tokens)"
    return f"tree (topk {topk}, {steps} steps, {tokens} draft tokens)"


def check_policy_shape(
    spec: object, shape: tuple[int, int, int | None], key: str = "policy"
) -> None:
    """A goodput policy is priced for one draft shape: refuse it on a server with another."""
    if not isinstance(spec, Mapping) or spec.get("name") != "goodput" or "shape" not in spec:
        return
    from specfsm.goodput import parse_shape

    try:
        want = parse_shape(spec["shape"])
    except ValueError as exc:
        raise ConfigError(f"{key}.shape", str(exc)) from exc
    topk, steps, tokens = shape
    if (want.topk, want.steps) != (topk, steps) or (
        tokens is not None and want.draft_tokens != tokens
    ):
        raise ConfigError(
            f"{key}.shape",
            f"the goodput policy is priced for "
            f"{shape_label(want.topk, want.steps, want.draft_tokens)} but the server drafts "
            f"{shape_label(topk, steps, tokens)} (--speculative-eagle-topk / --speculative-num-"
            "steps / --speculative-num-draft-tokens); use that shape's cost table",
        )


# ------------------------------------------------------------------------------- the config
def _v(check: Callable[[str, object], Any]) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    """An attrs validator running `check(key, value)`."""

    def validate(inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        check(attribute.name, value)

    return validate


def _opt_str(key: str, value: object) -> None:
    if value is not None and (not isinstance(value, str) or not value):
        raise ConfigError(key, f"expected a path (a non-empty string) or null, got {value!r}")


def _log_value(key: str, value: object) -> None:
    if value is not None and (not isinstance(value, str) or not value):
        raise ConfigError(
            key, f'expected a file path (string), "-" (stderr) or null, got {value!r}'
        )


@attrs.frozen(kw_only=True)
class Config:
    """The resolved configuration (every field checked on construction)."""

    policy: dict[str, Any] = attrs.field(factory=lambda: dict(DEFAULT_POLICY))
    initial_mode: str = attrs.field(
        default="SPECULATING",
        validator=_v(lambda k, v: check_choice(k, v, ("SPECULATING", "PLAIN"))),
    )
    log: str | None = attrs.field(default=None, validator=_v(_log_value))
    observe_every: int = attrs.field(default=0, validator=_v(lambda k, v: check_int(k, v, 0)))
    observe_seconds: float = attrs.field(
        default=0.0, validator=_v(lambda k, v: check_number(k, v, 0.0))
    )
    contracts_every: int = attrs.field(default=1, validator=_v(lambda k, v: check_int(k, v, 1)))
    control_file: str | None = attrs.field(default=None, validator=_v(_opt_str))
    control_every: int = attrs.field(default=64, validator=_v(lambda k, v: check_int(k, v, 1)))
    resync_forwards: int = attrs.field(default=1, validator=_v(lambda k, v: check_int(k, v, 1)))
    max_policy_faults: int = attrs.field(
        default=DEFAULT_MAX_POLICY_FAULTS, validator=_v(lambda k, v: check_int(k, v, 1))
    )

    @policy.validator
    def _check_policy(self, attribute: attrs.Attribute[Any], value: Any) -> None:
        make_policy(value)

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return tuple(a.name for a in attrs.fields(cls))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Config:
        check_keys("", data, cls.keys())
        return cls(**data)

    def as_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


def requested(environ: Mapping[str, str] | None = None) -> bool:
    """True when the operator asked for specfsm (any of the config variables is set)."""
    env = os.environ if environ is None else environ
    return any(env.get(k) for k in (ENV_FILE, ENV_JSON, ENV_POLICY))


def _shorthand_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text  # a bare word stays a string; the schema then says what it expected


def parse_shorthand(text: str) -> dict[str, Any]:
    """`threshold:high=32,low=8` -> {"name": "threshold", "high": 32, "low": 8}."""
    parts = text.split(":")
    i = 0
    while i < len(parts) and "=" not in parts[i]:
        i += 1  # a plugin's dotted path keeps its own ':' ("mypkg.mod:Cls:k=1")
    name, rest = ":".join(parts[:i]).strip(), ":".join(parts[i:])
    if not name:
        raise ConfigError(ENV_POLICY, f"expected name:key=value,... , got {text!r}")
    head, colon, tail = name.partition(":")
    if colon and (head in _BUILTIN or head == "goodput"):
        raise ConfigError(ENV_POLICY, f"expected key=value, got {tail!r} in {text!r}")
    out: dict[str, Any] = {"name": name}
    for item in filter(None, (x.strip() for x in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ConfigError(ENV_POLICY, f"expected key=value, got {item!r} in {text!r}")
        out[key.strip()] = _shorthand_value(value.strip())
    return out


def _read_file(path: str) -> Any:
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
        data.update(check_object(ENV_FILE, _read_file(env[ENV_FILE]), "the configuration"))
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


def log_path(template: str, rank: int) -> str:
    """The log path of `rank` ("{rank}" replaced); ConfigError on any other braces."""
    try:
        return template.format(rank=rank)
    except (KeyError, IndexError, ValueError) as exc:
        raise ConfigError(
            "log", f"bad path template {template!r}: only {{rank}} is replaced ({exc!r})"
        ) from exc


def prepare_log(template: str, rank: int = 0) -> str:
    """Create the log's directory if missing and check the file can be appended to."""
    if template == "-":
        return template
    path = Path(log_path(template, rank))
    parent = path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError("log", f"cannot create directory {parent}: {exc.strerror}") from exc
    if path.is_dir():
        raise ConfigError("log", f"{path} is a directory, expected a file path")
    if path.exists():
        if not os.access(path, os.W_OK):
            raise ConfigError("log", f"{path} is not writable")
    elif not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError("log", f"directory {parent} is not writable")
    return str(path)


# ------------------------------------------------------------------------------- control file
CONTROL_KEYS = ("pin", "policy")


@attrs.frozen
class ControlChange:
    """A checked control-file request: pin a mode, unpin, or swap the policy."""

    kind: str  # "pin", "unpin" or "policy"
    pin: str | None = None
    policy: dict[str, Any] | None = None


def parse_control(content: object) -> ControlChange:
    """Check control-file content with the config's rules; ConfigError ``control.<key>: ...``."""
    obj = check_object(
        "control", content, '{"pin": "PLAIN" | "SPECULATING" | null} or {"policy": {...}}'
    )
    check_keys("control", obj, CONTROL_KEYS)
    if "pin" in obj and "policy" in obj:
        raise ConfigError("control", "give either pin or policy, not both")
    if "pin" in obj:
        pin = obj["pin"]
        if pin is None:
            return ControlChange("unpin")
        return ControlChange("pin", pin=check_choice("control.pin", pin, ("SPECULATING", "PLAIN")))
    if "policy" in obj:
        make_policy(obj["policy"], key="control.policy")
        return ControlChange("policy", policy=obj["policy"])
    raise ConfigError("control", 'empty: give {"pin": ...} or {"policy": {...}}')
