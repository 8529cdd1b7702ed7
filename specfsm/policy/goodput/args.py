"""The goodput policy from its JSON-style description (the registry's "goodput" entry)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specfsm.model.acceptance import DraftShape, parse_shape, parse_shape_list
from specfsm.model.costs import ENGINE_TABLE, CostModel, CostTable, load_table, overlay_table
from specfsm.policy.goodput.params import KEYWORDS as _KEYWORDS
from specfsm.policy.goodput.policy import GoodputPolicy


def _number(key: str, value: Any, kind: type) -> Any:
    if kind is str:
        if not isinstance(value, str):
            raise ValueError(f"goodput policy: {key} must be a string, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"goodput policy: {key} must be a number, got {value!r}")
    if kind is int:
        if float(value) != int(value):
            raise ValueError(f"goodput policy: {key} must be an integer, got {value!r}")
        return int(value)
    return float(value)


def goodput_from_args(args: Mapping[str, Any]) -> GoodputPolicy:
    """Build a GoodputPolicy from its JSON-style arguments (the registry's "goodput" entry).

    Keys: ``table`` (a packaged table name or a CSV path, or a list of them / "a+b" merged into
    one table, e.g. the same engine at two context lengths; default `ENGINE_TABLE`, the table
    measured inside SGLang on an H200), ``shape`` (required: "chain3", "tree",
    "topk,steps,tokens", [topk, steps, tokens] or an object; must be the shape the server runs),
    ``ctx`` (optional context length for the table lookup; with a table of several contexts the
    policy prices each iteration at the batch's mean KV length and uses ``ctx`` only when that
    is unknown), ``accept_len`` (required: mean tokens per verify incl. the bonus, >= 1), and
    GoodputPolicy's keyword parameters ``ema_alpha``, ``margin``, ``debounce``, ``min_dwell``,
    ``horizon``, ``lag_cap``, ``relax_half_life``, ``ctx_bucket``, ``plain`` ("zero_tax", the
    default and the adapter's default PLAIN, or "warm": it must name the PLAIN the server runs),
    ``shape_margin``, ``shape_debounce``, ``shape_dwell``, ``cal_ema``, ``cal_clip``, ``depth_ema``,
    ``shape_z``, ``probe_z``, ``reprobe_after``, ``reprobe_max``, ``reprobe_len``,
    ``reprobe_evidence``, ``price_queued``, ``prefill_ms_per_token``, ``prefill_extra``,
    ``prefill_ema`` (the prefill pressure, docs/policies.md). ``shapes`` (a list of shapes, or
    one string "chain1,chain3,4,2,16"):
    choose among PLAIN and these per iteration (``shape`` is the launch shape, added when not
    listed). ``profile`` (a cost CSV in the packaged table format, e.g. the engine's start-up
    profile): its series override the table's as the calibration's prior. ``calibrate`` (bool,
    default true): refine the costs online from the measured step times. ``prefills`` (bool, default
    true): decide before prefill forwards too, on the requests decoding once the prefill is done
    (and the queue, with ``price_queued``). ``prefill_debounce`` (bool, default true): with the
    prefill pressure on, a prefill chunk counts toward ``debounce`` as the decode steps its time
    is worth (false: one iteration). Raises ValueError with
    the reason on anything missing, unknown or invalid.
    """
    if not isinstance(args, Mapping):
        raise ValueError(f"goodput policy: expected an object, got {args!r}")
    known = {
        "table",
        "shape",
        "ctx",
        "accept_len",
        "shapes",
        "profile",
        "calibrate",
        "prefills",
        "prefill_debounce",
        *_KEYWORDS,
    }
    unknown = sorted(set(args) - known)
    if unknown:
        raise ValueError(f"goodput policy: unknown keys {unknown} (known: {sorted(known)})")
    for key in ("shape", "accept_len"):
        if key not in args:
            raise ValueError(f"goodput policy: {key!r} is required")
    shape = parse_shape(args["shape"])
    accept_len = _number("accept_len", args["accept_len"], float)
    ctx = args.get("ctx")
    if ctx is not None:
        ctx = _number("ctx", ctx, int)
        if ctx <= 0:
            raise ValueError(f"goodput policy: ctx must be > 0, got {ctx}")
    table_name = args.get("table", ENGINE_TABLE)
    if isinstance(table_name, (list, tuple)) and table_name:
        if not all(isinstance(t, str) and t for t in table_name):
            raise ValueError(f"goodput policy: table list must hold names or paths: {table_name!r}")
        table_name = "+".join(table_name)
    if not isinstance(table_name, str) or not table_name:
        raise ValueError(f"goodput policy: table must be a name or a path, got {table_name!r}")
    try:
        table = load_table(table_name)
        cost = CostModel(table, shape, ctx=ctx)
        cost.spec_ms(1)
        cost.warm_ms(1)
        cost.zero_tax_ms(1)
    except (OSError, KeyError, ValueError) as exc:
        raise ValueError(f"goodput policy: cannot use table {table_name!r}: {exc}") from exc
    kwargs = {k: _number(k, args[k], kind) for k, kind in _KEYWORDS.items() if k in args}
    shapes: tuple[DraftShape, ...] = ()
    if "shapes" in args:
        try:
            shapes = parse_shape_list(args["shapes"])
        except ValueError as exc:
            raise ValueError(f"goodput policy: shapes: {exc}") from None
    calibrate = args.get("calibrate", True)
    if not isinstance(calibrate, bool):
        raise ValueError(f"goodput policy: calibrate must be true or false, got {calibrate!r}")
    prefills = args.get("prefills", True)
    if not isinstance(prefills, bool):
        raise ValueError(f"goodput policy: prefills must be true or false, got {prefills!r}")
    kwargs["prefills"] = prefills
    prefill_debounce = args.get("prefill_debounce", True)
    if not isinstance(prefill_debounce, bool):
        raise ValueError(
            f"goodput policy: prefill_debounce must be true or false, got {prefill_debounce!r}"
        )
    kwargs["prefill_debounce"] = prefill_debounce
    profile: CostTable | None = None
    if "profile" in args:
        name = args["profile"]
        if not isinstance(name, str) or not name:
            raise ValueError(f"goodput policy: profile must be a path or a name, got {name!r}")
        try:
            profile = load_table(name)
            CostModel(overlay_table(table, profile), shape, ctx=ctx).spec_ms(1)
        except (OSError, KeyError, ValueError) as exc:
            raise ValueError(f"goodput policy: cannot use profile {name!r}: {exc}") from exc
    try:
        for s in shapes:
            cost.spec_ms(1, s)
    except (KeyError, ValueError) as exc:
        raise ValueError(f"goodput policy: cannot price shapes on {table_name!r}: {exc}") from exc
    return GoodputPolicy(
        cost, accept_len, shapes=shapes, profile=profile, calibrate=calibrate, **kwargs
    )
