"""specfsm's SGLang configuration schema: `Config`, every key typed and checked on construction.

The keys (the operator's reference is docs/config.md, checked by `specfsm config check FILE`;
`specfsm_sglang.config` reads them from the environment):
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
  defer_prefill_tokens  zero_tax: prompt tokens prefilled while PLAIN without the draft's
                    prefill, kept (token + target hidden state each) for RESYNCING's catch-up,
                    all requests together (default "pool": the target's KV pool in tokens, so
                    a prompt in the pool always fits; lowered at start to half the free
                    memory; 0: the draft prefills every prompt at once, in every mode)
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
  shape_graph_max_bs  the largest decode batch size an extra shape's CUDA graphs are captured
                    for (default null: every decode graph batch size). Above it that shape runs
                    its forwards eagerly (correct, slower; the start-up profile measures and
                    prices it so). Each extra state's graph memory grows with batch size x
                    draft tokens (its logits rows above all); the launch shape and PLAIN keep
                    every size

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

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from specfsm import Policy
from specfsm.fsm.kinds import PLAIN_VARIANTS
from specfsm.fsm.machine import DEFAULT_MAX_POLICY_FAULTS
from specfsm.policy import registry
from specfsm_sglang.refusal import ConfigError
from specfsm_sglang.values import (
    ProfileSpec,
    check_choice,
    check_int,
    check_keys,
    check_number,
    check_shapes,
    make_policy,
    parse_profile,
)

DEFAULT_POLICY: dict[str, Any] = {
    "name": "threshold",
    "high": 32,
    "low": 8,
    "debounce": 4,
    "min_dwell": 16,
}


#: PLAIN's implementations (Config.plain): the core's `PlainVariant`s
PLAIN_KINDS = PLAIN_VARIANTS


def _check_defer(key: str, value: object) -> int | str:
    if value == "pool":
        return "pool"
    return check_int(key, value, 0, note=' or "pool"')


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
    #: prompt positions of prefills run while PLAIN without the draft's prefill, kept for
    #: RESYNCING's catch-up (all requests together); 0: the draft prefills every prompt at once
    defer_prefill_tokens: int | str = attrs.field(
        default="pool", validator=_v(lambda k, v: _check_defer(k, v))
    )
    #: draft shapes besides the launch shape that SPECULATING may RESHAPE to (labels as
    #: `parse_shape` reads them); each gets a runtime state built at start-up
    shapes: list[str] = attrs.field(factory=list, validator=_v(lambda k, v: check_shapes(k, v)))
    #: the largest decode batch an extra shape's CUDA graphs are captured for (None: all)
    shape_graph_max_bs: int | None = attrs.field(
        default=None, validator=_v(lambda k, v: v is None or check_int(k, v, 1))
    )
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
