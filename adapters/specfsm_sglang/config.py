"""specfsm's SGLang configuration: one typed schema for the config and the control file.

  SPECFSM_CONFIG=/path/config.json     the configuration file (JSON object, keys below)
  SPECFSM_CONFIG_JSON='{"policy": ...}' the same inline (wins over the file, key by key)
  SPECFSM_POLICY=threshold:high=32,low=8 a policy shorthand (wins over both)
  SPECFSM_LOG=/path/transitions.jsonl  the JSON transition log ("-" = stderr)

specfsm is active in SGLang only when one of the first three is set. Keys (`Config`; the
operator's reference is docs/config.md, checked by `specfsm config check FILE`):
  policy            a policy, built by specfsm's one registry (specfsm.policy.registry documents
                    the names, parameters and the shorthand, which this key takes too):
                    {"name": "threshold", "high": 32, "low": 8, "debounce": 4, "min_dwell": 16,
                     "signal": "decode_bs"}
                    {"name": "goodput", "table": "h200_sglang0517_llama8b", "shape": "chain3",
                     "accept_len": 2.5, ...}  (the shape must be the server's --speculative-*
                     shape, checked at start)
                    {"name": "fixed", "speculate": false}
                    {"name": "scripted", "schedule": [[100, "PLAIN"], [300, "SPECULATING"]]}
                    your own (the `specfsm.Policy` protocol):
                    {"name": "mypkg.mod:MyPolicy", ...kwargs} or an entry point name in the
                    group "specfsm.policies"
                    the test policies every and random only with SPECFSM_TEST_POLICIES=1
  initial_mode      "SPECULATING" (default) or "PLAIN"
  log               path of the JSON transition log ("{rank}" is replaced by the TP rank; its
                    directory is created); "-" = stderr; null = structlog default
  observe_every     write specfsm.observation every N decode forwards (0 = off)
  observe_seconds   ... or every T seconds (0 = off)
  contracts_every   check the spec-state contracts on one decode forward in N (default 1)
  control_file      JSON file watched for runtime changes: {"pin": "PLAIN"} / {"policy": {...}}
  control_every     check control_file every N decode forwards (default 64)
  resync_forwards   warm PLAIN only: decode forwards RESYNCING lasts before RESYNCED (default 1)
  plain             "zero_tax" (default): PLAIN is one target decode forward per step, no draft
                    work; RESYNCING catches the draft up from the lag buffer in one batched
                    draft-extend. "warm": upstream's steps=0 (1-token verify + 1-token
                    draft-extend every step; measured 1.7-1.9x a decode step on the H200)
  lag_tokens        zero_tax: lag positions kept per request (default 128; a longer lag is caught
                    up over its newest lag_tokens, older draft KV stale: counted, logged)
  catchup_tokens    zero_tax: lag tokens one RESYNCING iteration catches up (default 8192; never
                    below 2 x batch size + lag_tokens, so that RESYNCING ends)
  max_policy_faults faults of one policy after which it is replaced by the fixed PLAIN policy
                    (default 3)
  shapes            draft shapes SPECULATING may switch between (RESHAPE), besides the server's
                    launch shape, e.g. ["chain1", "chain2", "chain5", "chain7"]: each gets a
                    runtime state (draft/verify/draft-extend backends and CUDA graphs) built at
                    start-up, its memory logged; start-up is refused with the reason when one
                    does not fit. No shape may have a wider top-k than the server's: launch
                    with the widest (a tree server may list chains and narrower trees, not
                    with DP attention; a chain server only chains). Default []: only the
                    launch shape. A goodput policy's "shapes" must be among them (or, when this
                    key is absent, become them)

  profile           the start-up profile (specfsm_sglang.profile): before serving, the engine
                    measures each shape's and PLAIN's step per batch size with synthetic
                    requests and prices the goodput policy with the result. null / false (off,
                    default), true, or {"bs": [1, 8, 32] (default: the decode CUDA-graph batch
                    sizes; 1, 2, 4 without graphs), "forwards": 8 (measured per point),
                    "prompt_tokens": 256, "save": "/path/profile-{rank}.csv" (default: a temporary
                    file), "max_seconds": 300}. Needs the goodput policy; not with DP attention

Every value is checked before SGLang starts a worker. A refusal is a `ConfigError` whose text is
one line, ``<key>: <reason>`` (e.g. ``observe_seconds: expected a number >= 0, got 'soon'``);
at start-up it is printed as ``specfsm: refusing to start: <key>: <reason>``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from specfsm import Policy
from specfsm.fsm.kinds import PLAIN_VARIANTS
from specfsm.fsm.machine import DEFAULT_MAX_POLICY_FAULTS
from specfsm.model.acceptance import DraftShape, parse_shape
from specfsm.policy import registry

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


#: PLAIN's implementations (Config.plain): the core's `PlainVariant`s
PLAIN_KINDS = PLAIN_VARIANTS


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
    too_small = isinstance(value, int) and minimum is not None and value < minimum
    if isinstance(value, bool) or not isinstance(value, int) or too_small:
        bound = f" >= {minimum}" if minimum is not None else ""
        raise ConfigError(key, f"expected an integer{bound}{note}, got {value!r}")
    return value


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
def make_policy(spec: object, key: str = "policy") -> Policy:
    """Build a policy with specfsm's one registry (`specfsm.policy.registry`, its syntax and
    names documented there); ConfigError ``<key>.<param>: <reason>``."""
    try:
        return registry.make_policy(spec, key)
    except registry.PolicySpecError as exc:
        raise ConfigError(exc.key, exc.reason) from exc


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


def check_shapes(key: str, value: object) -> list[DraftShape]:
    """A list of draft-shape labels ("chain5", "4,2,16", [1, 5, 6]) -> DraftShapes."""
    if not isinstance(value, (list, tuple)):
        raise ConfigError(
            key, f'expected a list of shapes such as ["chain1", "chain5"], got {value!r}'
        )
    out: list[DraftShape] = []
    for i, item in enumerate(value):
        try:
            out.append(parse_shape(item))
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{key}[{i}]", str(exc)) from exc
    return out


def policy_shapes(spec: object) -> list[DraftShape]:
    """The shapes a goodput policy chooses among ([] when it names none)."""
    if not isinstance(spec, Mapping) or spec.get("name") != "goodput":
        return []
    return check_shapes("policy.shapes", spec.get("shapes", []))


def engine_shapes(cfg: Config, launch: DraftShape) -> list[DraftShape]:
    """Every shape the engine builds a runtime state for, the launch shape first: the
    config's `shapes`, or the goodput policy's when the config names none."""
    listed = check_shapes("shapes", cfg.shapes) or policy_shapes(cfg.policy)
    out = [launch]
    for s in listed:
        if s not in out:
            out.append(s)
    return out


def kv_per_step(s: DraftShape) -> int:
    """KV slots one request may take in one decode step with shape `s`: SGLang 0.5.23's
    ``max(topk * num_steps, num_draft_tokens)`` (``allocation_sizing.get_alloc_len_per_decode``,
    page size 1)."""
    return max(s.topk * s.steps, s.draft_tokens)


def check_engine_shapes(
    cfg: Config, shape: tuple[int, int, int | None], dp_attention: bool = False
) -> None:
    """Refuse shapes the engine cannot switch to: a wider top-k than the server's (the relay,
    FutureMap buffers and KV reservation are the server's width; a narrower shape drafts from
    the relay's first columns, `specfsm_sglang.relay`), a narrower one with DP attention
    (untested), or a policy shape the engine builds no state for."""
    topk, steps, tokens = shape
    if steps <= 0:
        return
    launch = DraftShape(topk, steps, tokens if tokens is not None else steps + 1)
    built = engine_shapes(cfg, launch)
    for s in built[1:]:
        if kv_per_step(s) > kv_per_step(launch):
            raise ConfigError(
                "shapes",
                f"{s.label()} reserves {kv_per_step(s)} KV slots per request per decode step, "
                f"more than the launch shape's {kv_per_step(launch)} "
                f"({shape_label(topk, steps, tokens)}): SGLang sizes each request's "
                "req_to_token row headroom for the launch shape, so near the end of the "
                "context window a wider shape would write past the row; launch with the widest "
                "shape (--speculative-num-steps / --speculative-num-draft-tokens) and list the "
                "narrower ones",
            )
        if s.topk > topk:
            raise ConfigError(
                "shapes",
                f"{s.label()} has top-k {s.topk} but the server drafts with top-k {topk} "
                f"({shape_label(topk, steps, tokens)}): the draft input relayed between "
                "forwards (and overlap's FutureMap buffers) and the scheduler's KV reservation "
                "per decode step are sized for the server's top-k, so no shape may be wider: "
                "launch with the widest top-k (e.g. the tree) and list the narrower shapes",
            )
        if s.topk < topk and dp_attention:
            raise ConfigError(
                "shapes",
                f"{s.label()} has top-k {s.topk} below the server's {topk} with DP attention: "
                "untested (an idle DP rank's draft input and the DP prefill coordination take "
                "the attached top-k, not the relay's); use shapes of the server's top-k there",
            )
    if cfg.profile_spec is not None:
        check_profile(cfg, dp_attention)
    for s in policy_shapes(cfg.policy):
        if s not in built:
            raise ConfigError(
                "policy.shapes",
                f"{s.label()} is not among the engine's shapes "
                f'{[b.label() for b in built]}: add it to the config\'s "shapes"',
            )


# ------------------------------------------------------------------------------- profile
def check_profile(cfg: Config, dp_attention: bool = False) -> None:
    """Refuse a start-up profile nothing would use, or one this engine cannot run: it prices
    the goodput policy's choices (its ``profile``), and it is not built for DP attention."""
    pol = cfg.policy
    name = pol.get("name") if isinstance(pol, Mapping) else None
    if name != "goodput":
        raise ConfigError(
            "profile",
            f"the start-up profile prices the goodput policy's choices; the policy is "
            f'{name!r}: use {{"name": "goodput", ...}} or drop "profile"',
        )
    if "profile" in pol:
        raise ConfigError(
            "profile",
            "the policy names a profile table too (policy.profile): give one of them",
        )
    if dp_attention:
        raise ConfigError("profile", "not supported with DP attention (untested)")
    spec = cfg.profile_spec
    if spec is not None and spec.save:
        try:
            prepare_log(spec.save)  # the same checks as the log: directory, writable, braces
        except ConfigError as exc:
            raise ConfigError("profile.save", exc.reason) from None


PROFILE_KEYS = ("bs", "forwards", "prompt_tokens", "save", "max_seconds")


@attrs.frozen(kw_only=True)
class ProfileSpec:
    """The checked ``profile`` configuration."""

    #: batch sizes to measure (None: the decode CUDA-graph batch sizes, `NO_GRAPH_BS` on CPU)
    bs: tuple[int, ...] | None = None
    #: measured decode forwards per (target, batch size)
    forwards: int = 8
    #: prompt tokens of each profile request
    prompt_tokens: int = 256
    #: CSV path of the rows (None: a temporary file)
    save: str | None = None
    #: the whole profile's time budget: batch sizes left when it is spent are skipped
    max_seconds: float = 300.0


def parse_profile(key: str, value: object) -> ProfileSpec | None:
    """``profile``: null / false (off), true (defaults) or an object of `PROFILE_KEYS`."""
    if value is None or value is False:
        return None
    if value is True:
        return ProfileSpec()
    obj = check_object(
        key, value, 'true, or {"bs": [1, 8, 32], "forwards": 8, "prompt_tokens": 256, ...}'
    )
    check_keys(key, obj, PROFILE_KEYS)
    bs: tuple[int, ...] | None = None
    if obj.get("bs") is not None:
        raw = obj["bs"]
        if not isinstance(raw, list) or not raw:
            raise ConfigError(f"{key}.bs", f"expected a non-empty list of batch sizes, got {raw!r}")
        bs = tuple(sorted({check_int(f"{key}.bs", b, 1) for b in raw}))
    save = obj.get("save")
    if save is not None and (not isinstance(save, str) or not save):
        raise ConfigError(f"{key}.save", f"expected a CSV path or null, got {save!r}")
    secs = obj.get("max_seconds", 300.0)
    if isinstance(secs, bool) or not isinstance(secs, (int, float)) or not secs > 0:
        raise ConfigError(f"{key}.max_seconds", f"expected a number > 0, got {secs!r}")
    return ProfileSpec(
        bs=bs,
        forwards=check_int(f"{key}.forwards", obj.get("forwards", 8), 1),
        prompt_tokens=check_int(f"{key}.prompt_tokens", obj.get("prompt_tokens", 256), 1),
        save=save,
        max_seconds=float(secs),
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
    #: "zero_tax": PLAIN runs one target decode forward per step and nothing else; the draft
    #: catches up in RESYNCING from the lag buffer. "warm": upstream's steps=0 (a 1-token
    #: verify + a 1-token draft-extend per step, the draft never lags).
    plain: str = attrs.field(
        default="zero_tax", validator=_v(lambda k, v: check_choice(k, v, PLAIN_KINDS))
    )
    #: positions of lag kept per request (ring); a request that lags by more is caught up
    #: over its newest lag_tokens positions ("cold": older draft KV stays stale), counted
    lag_tokens: int = attrs.field(default=128, validator=_v(lambda k, v: check_int(k, v, 1)))
    #: lag tokens one RESYNCING iteration catches up at most (more: RESYNCING spans several
    #: iterations, serving plainly meanwhile); must exceed the largest decode batch
    catchup_tokens: int = attrs.field(default=8192, validator=_v(lambda k, v: check_int(k, v, 2)))
    #: draft shapes besides the launch shape that SPECULATING may RESHAPE to (labels as
    #: `parse_shape` reads them); each gets a runtime state built at start-up
    shapes: list[str] = attrs.field(factory=list, validator=_v(lambda k, v: check_shapes(k, v)))
    #: the start-up profile (`specfsm_sglang.profile`): null/false off, true, or its object
    profile: Any = attrs.field(default=None, validator=_v(lambda k, v: parse_profile(k, v)))
    #: the policy built while validating `policy`, handed to the first `take_policy()`
    _built_policy: Policy | None = attrs.field(init=False, default=None, eq=False, repr=False)

    @policy.validator
    def _check_policy(self, attribute: attrs.Attribute[Any], value: Any) -> None:
        object.__setattr__(self, "_built_policy", make_policy(value))

    def take_policy(self) -> Policy:
        """The configured policy: the instance validation built, the first time (a config
        builds its policy once); a fresh one after that (policies keep state)."""
        built = self._built_policy
        if built is None:
            return make_policy(self.policy)
        object.__setattr__(self, "_built_policy", None)
        return built

    @property
    def profile_spec(self) -> ProfileSpec | None:
        """The checked start-up profile, or None when it is off."""
        return parse_profile("profile", self.profile)

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return tuple(a.name for a in attrs.fields(cls) if a.init)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Config:
        check_keys("", data, cls.keys())
        if isinstance(data.get("policy"), str):  # the shorthand, as SPECFSM_POLICY takes it
            try:
                spec = registry.parse_shorthand(data["policy"], "policy")
            except registry.PolicySpecError as exc:
                raise ConfigError(exc.key, exc.reason) from exc
            data = {**data, "policy": spec}
        return cls(**data)

    def as_dict(self) -> dict[str, Any]:
        return attrs.asdict(self, filter=lambda a, _: a.init)


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


def check_file(path: str, flags: Sequence[str] = ()) -> list[str]:
    """`specfsm config check`'s problems with the file `path` (and the server `flags`), one line
    each (`specfsm_sglang.config_check`; reached through this module's entry point)."""
    from specfsm_sglang.config_check import problems

    return [str(exc) for exc in problems(path, flags)]


def bundle_config(environ: Mapping[str, str]) -> dict[str, Any]:
    """The resolved configuration as a dict, for `specfsm bundle` (entry point group
    ``specfsm.config``); ConfigError when it is refused."""
    return resolve(environ, prepare=False).as_dict()


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
