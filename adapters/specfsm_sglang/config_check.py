"""`specfsm config check FILE [-- SERVER FLAGS]`: the launch check without SGLang.

The same checks as the engine's launch hook (`hooks.launch_check`): every key's value, the
policy (built by the registry), the start-up profile, the SGLang version when one is installed
(read from its metadata, never imported), and, given the server's flags, the server-argument
refusals and the shape checks. One `ConfigError` per problem: each key is checked on its own, so
a file with three bad keys gets three lines; the checks across keys run once every key passes.
Nothing is created: the log's and the profile's directories are checked, not made.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from importlib import metadata
from types import SimpleNamespace
from typing import Any

import attrs

from specfsm_sglang import compat
from specfsm_sglang.paths import check_path
from specfsm_sglang.refusal import ConfigError
from specfsm_sglang.schema import Config
from specfsm_sglang.server_checks import check_profile, check_server

#: SGLang server flags the launch check reads (`compat.unsupported_reason`,
#: `compat.zero_tax_unsupported`, `server_checks.server_shape`); any other flag is ignored.
_VALUE_FLAGS = {
    "--speculative-algorithm": str,
    "--speculative-eagle-topk": int,
    "--speculative-num-steps": int,
    "--speculative-num-draft-tokens": int,
    "--pp-size": int,
    "--disaggregation-mode": str,
}
_BOOL_FLAGS = (
    "--speculative-adaptive",
    "--enable-multi-layer-eagle",
    "--enable-two-batch-overlap",
    "--enable-pdmux",
    "--enable-mixed-chunk",
    "--speculative-use-rejection-sampling",
    "--enable-dp-attention",
)


def server_args(flags: Sequence[str]) -> SimpleNamespace:
    """The launch check's fields from SGLang server flags (unknown flags ignored)."""
    ap = argparse.ArgumentParser(add_help=False)
    for flag, kind in _VALUE_FLAGS.items():
        ap.add_argument(flag, type=kind)
    for flag in _BOOL_FLAGS:
        ap.add_argument(flag, action="store_true")
    try:
        known, _ = ap.parse_known_args(list(flags))
    except SystemExit:  # argparse printed the reason (a bad value of a known flag)
        raise ConfigError("server flags", f"cannot read {' '.join(flags)}") from None
    return SimpleNamespace(**vars(known))


def _sglang_problem() -> ConfigError | None:
    try:
        v = metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return None  # checked at launch; the operator may check a config on another machine
    if v not in compat.SURFACES:
        return ConfigError(
            "sglang", f"specfsm supports sglang {', '.join(compat.SURFACES)}; found {v}"
        )
    return None


def problems(data: dict[str, Any], flags: Sequence[str] | None = None) -> list[ConfigError]:
    """Every problem of the configuration file's object `data` (and of the server `flags`, when
    given)."""
    known = Config.keys()
    out = [
        ConfigError(k, f"unknown configuration key (known: {', '.join(known)})")
        for k in sorted(set(data) - set(known))
    ]
    for key in known:
        if key in data:
            try:
                Config.from_mapping({key: data[key]})
            except ConfigError as exc:
                out.append(exc)
    if out:
        return out
    cfg = Config.from_mapping(data)
    for key, template in (("log", cfg.log), ("profile.save", _profile_save(cfg))):
        if template is not None:
            try:
                check_path(key, template)
            except ConfigError as exc:
                out.append(exc)
    if (sg := _sglang_problem()) is not None:
        out.append(sg)
    args = server_args(flags or ())
    unsaved = attrs.evolve(cfg, profile=_without_save(cfg.profile))
    try:
        if flags:
            check_server(unsaved, args)
        elif cfg.profile_spec is not None:
            check_profile(unsaved)
    except ConfigError as exc:
        out.append(exc)
    return out


def _profile_save(cfg: Config) -> str | None:
    spec = cfg.profile_spec
    return spec.save if spec is not None and spec.save else None


def _without_save(profile: Any) -> Any:
    if isinstance(profile, dict) and "save" in profile:
        return {k: v for k, v in profile.items() if k != "save"}
    return profile
