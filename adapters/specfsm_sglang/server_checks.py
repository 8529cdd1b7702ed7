"""The checks of a configuration against the server it is launched with: the server's own
arguments (`compat`), the goodput policy's draft shape, the shapes the engine builds a runtime
state for, and the start-up profile. Run in the engine's parent before any worker starts
(`hooks.launch_check`), again in each scheduler, and by `specfsm config check` given the
server's flags; each refusal is one `ConfigError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specfsm.model.acceptance import DraftShape, parse_shape
from specfsm_sglang import compat
from specfsm_sglang.paths import prepare_log
from specfsm_sglang.refusal import ConfigError
from specfsm_sglang.schema import Config
from specfsm_sglang.values import check_shapes


def check_server(cfg: Config, server_args: Any) -> None:
    """Every launch check of `cfg` on the server of `server_args`; ConfigError on the first."""
    reason = compat.unsupported_reason(server_args)
    if reason is not None:
        raise ConfigError("server_args", reason)
    if cfg.plain == "zero_tax" and (why := compat.zero_tax_unsupported(server_args)):
        raise ConfigError("plain", why)
    check_policy_shape(cfg.policy, server_shape(server_args))
    check_engine_shapes(cfg, server_shape(server_args), compat.dp_attention(server_args))
    check_queued_pricing(cfg.policy, compat.dp_attention(server_args))


def check_queued_pricing(policy: object, dp_attention: bool) -> None:
    """Refuse a goodput policy that prices the queue (``price_queued``) under DP attention:
    each DP rank has its own waiting queue, so ranks would price different batches and decide
    apart (the decode batch is made global; the queue is not)."""
    if not dp_attention or not isinstance(policy, Mapping):
        return
    if policy.get("name") == "goodput" and float(policy.get("price_queued", 0) or 0) > 0:
        raise ConfigError(
            "policy.price_queued",
            "each DP rank has its own waiting queue: ranks would decide apart; use 0 with DP "
            "attention",
        )


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
