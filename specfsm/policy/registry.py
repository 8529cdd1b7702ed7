"""The one policy registry: every policy is built here, from one syntax.

Syntax (the SGLang plugin's ``policy`` key, ``SPECFSM_POLICY``, the control file, and the
``--policy`` option of ``specfsm logs replay``):

* a JSON object: ``{"name": "threshold", "high": 32, "low": 8}``;
* the shorthand ``name:key=value,key=value``. Each value is JSON when it parses as JSON
  (``32``, ``2.5``, ``true``, ``"text"``, ``[4, 2, 16]``) and a bare word otherwise
  (``shape=chain3``, ``table=h200_sglang0517_llama8b``). A comma inside quotes or brackets does
  not split, so a tree shape is ``shape=[4,2,16]`` or ``shape="4,2,16"``. A plugin's dotted
  path keeps its own colon: ``mypkg.mod:MyPolicy:k=1``.

Names (`POLICIES`):

=========  =================================================================================
threshold  ``high``, ``low`` (required), ``debounce``, ``min_dwell``, ``signal``, ``prefills``,
           ``prefill_step_tokens``, ``prefill_debounce``
goodput    ``shape`` (chainN | tree | topk,steps,draft_tokens | [topk, steps, draft_tokens]),
           ``accept_len`` (required), ``table``, ``ctx``, ``shapes`` (a list of shapes, or
           ``"chain1,chain3,4,2,16"``: choose the shape among them and PLAIN), ``profile``
           (a cost CSV: the engine's start-up profile), ``calibrate`` and GoodputPolicy's
           keywords
fixed      ``speculate`` (true | false)
scripted   ``schedule`` ([[iteration, "SPECULATING" | "PLAIN"], ...]), ``initial``, ``prefills``
=========  =================================================================================

Any other name is a plugin (`specfsm.policy.plugins`): ``package.module:Class`` or an entry
point in group ``specfsm.policies``. The test policies ``every`` and ``random``
(`specfsm.policy.testing.TEST_POLICIES`) are not in this registry: a test opts into them with
``registry=with_test_policies()`` or, for engines it starts, ``SPECFSM_TEST_POLICIES=1`` in the
environment. A refusal is `PolicySpecError` (a ValueError): ``<key>: <reason>``, the key naming
the parameter (``policy.high: expected an integer >= 1, got 'abc'``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from specfsm.fsm.decision import FixedPolicy, Policy
from specfsm.fsm.table import INITIAL_MODE, TARGET_MODES, Mode
from specfsm.policy.checks import (
    Check,
    PolicyKind,
    PolicySpecError,
    check_choice,
    check_int,
    check_keys,
    check_number,
)
from specfsm.policy.plugins import check_policy, entry_point_exists, load_policy_factory
from specfsm.policy.simple import ScriptedPolicy, ThresholdPolicy

#: Set to "1" to accept the test policies (every, random) without passing a registry.
ENV_TEST_POLICIES = "SPECFSM_TEST_POLICIES"

#: the checks and the record of a policy kind, for callers that import them from here
__all__ = [
    "ENV_TEST_POLICIES",
    "POLICIES",
    "Check",
    "PolicyKind",
    "PolicySpecError",
    "check_choice",
    "check_int",
    "check_keys",
    "check_number",
    "default_registry",
    "known_policies",
    "make_policy",
    "parse_shorthand",
    "parse_spec",
    "with_test_policies",
]


#: The modes a schedule may name, as the config spells them ("SPECULATING", "PLAIN").
_TARGETS: tuple[str, ...] = tuple(m.value for m in TARGET_MODES)


def _schedule(key: str, value: object) -> list[tuple[int, Mode]]:
    if not isinstance(value, list):
        raise PolicySpecError(key, f"expected a list of [iteration, mode] pairs, got {value!r:.60}")
    out = []
    for i, item in enumerate(value):
        if not (isinstance(item, list) and len(item) == 2):
            raise PolicySpecError(f"{key}[{i}]", f"expected [iteration, mode], got {item!r}")
        it = check_int(f"{key}[{i}][0]", item[0], 0)
        mode = check_choice(f"{key}[{i}][1]", item[1], _TARGETS)
        out.append((it, Mode(mode)))
    return out


# ------------------------------------------------------------------------------- the registry
def _goodput(args: dict[str, Any]) -> Policy:
    from specfsm.policy.goodput import goodput_from_args

    return goodput_from_args(args)


#: The production policies, by name.
POLICIES: Mapping[str, PolicyKind] = {
    "threshold": PolicyKind(
        lambda a: ThresholdPolicy(**a),
        {
            "high": lambda k, v: check_int(k, v, 1),
            "low": lambda k, v: check_int(k, v, 0),
            "debounce": lambda k, v: check_int(k, v, 1),
            "min_dwell": lambda k, v: check_int(k, v, 0),
            "signal": lambda k, v: check_choice(k, v, ("decode_bs", "running")),
            "prefills": lambda k, v: check_choice(k, v, (True, False)),
            "prefill_step_tokens": lambda k, v: check_int(k, v, 0),
            "prefill_debounce": lambda k, v: check_choice(k, v, (True, False)),
        },
        ("high", "low"),
    ),
    "goodput": PolicyKind(_goodput),
    "fixed": PolicyKind(
        lambda a: FixedPolicy(a["speculate"]),
        {"speculate": lambda k, v: check_choice(k, v, (True, False))},
        ("speculate",),
    ),
    "scripted": PolicyKind(
        lambda a: ScriptedPolicy(
            a["schedule"],
            initial=Mode(a.get("initial", INITIAL_MODE.value)),
            prefills=a.get("prefills", False),
        ),
        {
            "schedule": _schedule,
            "initial": lambda k, v: check_choice(k, v, _TARGETS),
            "prefills": lambda k, v: check_choice(k, v, (True, False)),
        },
        ("schedule",),
    ),
}


def with_test_policies() -> Mapping[str, PolicyKind]:
    """The production registry plus the test policies (every, random): for tests only."""
    from specfsm.policy.testing import TEST_POLICIES

    return {**POLICIES, **TEST_POLICIES}


def default_registry() -> Mapping[str, PolicyKind]:
    """`POLICIES`, plus the test policies when ``SPECFSM_TEST_POLICIES=1`` (a test's engine)."""
    if os.environ.get(ENV_TEST_POLICIES) == "1":
        return with_test_policies()
    return POLICIES


def known_policies(registry: Mapping[str, PolicyKind] | None = None) -> str:
    """The names a config may use, for error messages."""
    reg = default_registry() if registry is None else registry
    prod = [n for n, k in reg.items() if not k.test_only]
    test = [n for n, k in reg.items() if k.test_only]
    text = f"production policies: {', '.join(prod)}; "
    if test:
        text += f"test policies: {', '.join(test)}; "
    else:
        text += f"test policies (every, random) only with {ENV_TEST_POLICIES}=1; "
    return (
        text + "or your own as 'package.module:Class' or an entry point in group 'specfsm.policies'"
    )


# ------------------------------------------------------------------------------- the syntax
def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text  # a bare word stays a string; the schema then says what it expected


def _split_items(text: str) -> list[str]:
    """Split at commas outside double quotes and brackets."""
    items, depth, quoted, start = [], 0, False, 0
    for i, ch in enumerate(text):
        if ch == '"' and (i == 0 or text[i - 1] != "\\"):
            quoted = not quoted
        elif not quoted and ch in "[{":
            depth += 1
        elif not quoted and ch in "]}":
            depth -= 1
        elif ch == "," and not quoted and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return items


def parse_shorthand(text: str, key: str = "policy") -> dict[str, Any]:
    """``threshold:high=32,low=8`` -> {"name": "threshold", "high": 32, "low": 8}."""
    parts = text.split(":")
    i = 0
    while i < len(parts) and "=" not in parts[i]:
        i += 1  # a plugin's dotted path keeps its own ':' ("mypkg.mod:Cls:k=1")
    name, rest = ":".join(parts[:i]).strip(), ":".join(parts[i:])
    if not name:
        raise PolicySpecError(key, f"expected name:key=value,... , got {text!r}")
    head, colon, tail = name.partition(":")
    if colon and (head in POLICIES or head in ("every", "random")):
        raise PolicySpecError(key, f"expected key=value, got {tail!r} in {text!r}")
    out: dict[str, Any] = {"name": name}
    for item in filter(None, (x.strip() for x in _split_items(rest))):
        k, eq, v = item.partition("=")
        if not eq or not k.strip():
            raise PolicySpecError(key, f"expected key=value, got {item!r} in {text!r}")
        out[k.strip()] = _value(v.strip())
    return out


def parse_spec(text: str, key: str = "policy") -> dict[str, Any]:
    """A JSON object or the shorthand -> {"name": ..., **params}."""
    text = text.strip()
    if text.startswith("{"):
        try:
            obj = json.loads(text)
        except ValueError as exc:
            raise PolicySpecError(key, f"not JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise PolicySpecError(key, "expected a JSON object")
        return obj
    return parse_shorthand(text, key)


# ------------------------------------------------------------------------------- building
def make_policy(
    spec: object, key: str = "policy", registry: Mapping[str, PolicyKind] | None = None
) -> Policy:
    """Build the policy `spec` (a JSON object) names; PolicySpecError ``<key>.<param>: ...``."""
    reg = default_registry() if registry is None else registry
    if not isinstance(spec, dict):
        what = "null" if spec is None else type(spec).__name__
        raise PolicySpecError(
            key,
            'expected a JSON object (e.g. {"name": "threshold", "high": 32, "low": 8}), '
            f"got a {what}: {spec!r:.60}",
        )
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise PolicySpecError(f"{key}.name", f"expected a policy name ({known_policies(reg)})")
    args = {k: v for k, v in spec.items() if k != "name"}
    kind = reg.get(name)
    if kind is not None:
        if kind.params is not None:
            check_keys(key, args, ("name", *kind.params))
            args = {k: kind.params[k](f"{key}.{k}", v) for k, v in args.items()}
            for req in kind.required:
                if req not in args:
                    raise PolicySpecError(f"{key}.{req}", f"required by the {name!r} policy")
        try:
            return kind.build(args)
        except (TypeError, ValueError) as exc:
            raise PolicySpecError(key, str(exc)) from exc
    if ":" not in name and not entry_point_exists(name):
        raise PolicySpecError(f"{key}.name", f"unknown policy {name!r} ({known_policies(reg)})")
    try:
        factory = load_policy_factory(name)
    except (LookupError, TypeError) as exc:
        raise PolicySpecError(f"{key}.name", str(exc)) from exc
    try:
        built = factory(**args)
    except Exception as exc:  # a plugin's constructor: any failure is a refused config
        raise PolicySpecError(
            key, f"{name}(**{args!r:.80}) failed: {type(exc).__name__}: {exc}"
        ) from exc
    try:
        return check_policy(built, name)
    except TypeError as exc:
        raise PolicySpecError(key, str(exc)) from exc
