"""Policies from their text: the adapter's policy syntax, built without the adapter.

``threshold:high=32,low=8`` (a shorthand: name, then key=value with JSON values; a plugin's
dotted path keeps its own colon, ``mypkg.mod:Cls:k=1``) or a JSON object
``{"name": "threshold", "high": 32, "low": 8}``. Names: threshold, goodput, fixed, scripted,
the test policies every and random, and plugins (``package.module:Class`` or an entry point in
group ``specfsm.policies``). Refusals are `PolicySpecError` (a ValueError) with the text
``<key>: <reason>``, as the adapter's config errors.

The SGLang adapter (specfsm_sglang.config: parse_shorthand, make_policy) carries its own copy
of this logic with a stricter per-parameter schema; it could build on this module instead. Core
code (`specfsm logs replay`) must not import the adapter, hence this module.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from typing import Any

from specfsm.policies import (
    FixedPolicy,
    Policy,
    ScriptedPolicy,
    ThresholdPolicy,
    check_policy,
    load_policy_factory,
)
from specfsm.table import Mode

BUILTIN = ("threshold", "goodput", "fixed", "scripted", "every", "random")


class PolicySpecError(ValueError):
    """A refused policy text or object: ``<key>: <reason>``."""

    def __init__(self, key: str, reason: str) -> None:
        self.key, self.reason = key, reason
        super().__init__(f"{key}: {reason}")


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text  # a bare word stays a string; the policy then says what it expected


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
    parts = text.split(":")
    i = 0
    while i < len(parts) and "=" not in parts[i]:
        i += 1
    name, rest = ":".join(parts[:i]).strip(), ":".join(parts[i:])
    if not name:
        raise PolicySpecError(key, f"expected name:key=value,... , got {text!r}")
    head, colon, tail = name.partition(":")
    if colon and head in BUILTIN:
        raise PolicySpecError(key, f"expected key=value, got {tail!r} in {text!r}")
    out: dict[str, Any] = {"name": name}
    for item in filter(None, (x.strip() for x in rest.split(","))):
        k, eq, v = item.partition("=")
        if not eq or not k.strip():
            raise PolicySpecError(key, f"expected key=value, got {item!r} in {text!r}")
        out[k.strip()] = _value(v.strip())
    return out


def _schedule(value: object, key: str) -> list[tuple[int, Mode]]:
    if not isinstance(value, list) or not all(
        isinstance(x, list)
        and len(x) == 2
        and isinstance(x[0], int)
        and x[1] in ("SPECULATING", "PLAIN")
        for x in value
    ):
        raise PolicySpecError(f"{key}.schedule", "expected [[iteration, SPECULATING|PLAIN], ...]")
    return [(int(it), Mode[m]) for it, m in value]


def make_policy(spec: Mapping[str, Any], key: str = "policy") -> Policy:
    """Build the policy `spec` names; PolicySpecError on anything wrong."""
    if not isinstance(spec, Mapping):
        raise PolicySpecError(key, 'expected a JSON object, e.g. {"name": "threshold", ...}')
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise PolicySpecError(f"{key}.name", f"expected a policy name ({', '.join(BUILTIN)})")
    args = {k: v for k, v in spec.items() if k != "name"}
    try:
        if name == "threshold":
            return ThresholdPolicy(**args)
        if name == "fixed":
            if set(args) != {"speculate"} or not isinstance(args["speculate"], bool):
                raise PolicySpecError(f"{key}.speculate", "fixed takes speculate=true|false")
            return FixedPolicy(args["speculate"])
        if name == "scripted":
            initial = args.pop("initial", "SPECULATING")
            if initial not in ("SPECULATING", "PLAIN") or set(args) != {"schedule"}:
                raise PolicySpecError(key, "scripted takes schedule (and initial)")
            return ScriptedPolicy(_schedule(args["schedule"], key), initial=Mode[initial])
        if name == "every":
            k = args.get("k")
            if set(args) != {"k"} or not isinstance(k, int) or k < 1:
                raise PolicySpecError(f"{key}.k", "every takes k, an integer >= 1")
            return ScriptedPolicy(lambda i: (i // k) % 2 == 1)
        if name == "random":
            seed, p, hold = args.pop("seed", 0), args.pop("p", 0.5), args.pop("hold", 1)
            if args:
                raise PolicySpecError(key, f"random takes seed, p, hold; not {sorted(args)}")
            return ScriptedPolicy(
                lambda i: random.Random(seed * 1_000_003 + i // hold).random() < p
            )
        if name == "goodput":
            from specfsm.goodput import policy_from_config

            return policy_from_config(args)
    except PolicySpecError:
        raise
    except (TypeError, ValueError) as exc:
        raise PolicySpecError(key, f"{name}: {exc}") from None
    try:
        factory = load_policy_factory(name)
        return check_policy(factory(**args), name)
    except (LookupError, TypeError) as exc:
        raise PolicySpecError(f"{key}.name", str(exc)) from None
    except Exception as exc:
        raise PolicySpecError(key, f"{name}(**{args!r:.80}): {type(exc).__name__}: {exc}") from None
