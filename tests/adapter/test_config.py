"""The SGLang plugin's configuration: env layering, one schema, one-line refusals."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("specfsm_sglang")
from specfsm_sglang.config import (
    Config,
    ConfigError,
    make_policy,
    parse_shorthand,
    requested,
    resolve,
)
from specfsm_sglang.refusal import refusal_line
from specfsm_sglang.server_checks import check_policy_shape, server_shape

from specfsm import FixedPolicy, ThresholdPolicy
from specfsm.model.acceptance import DraftShape
from specfsm.policy import GoodputPolicy


def test_not_requested_without_variables() -> None:
    """The plugin stays inert unless one of the config variables is set."""
    assert not requested({})
    assert requested({"SPECFSM_POLICY": "fixed:speculate=true"})


def test_layering(tmp_path: Path) -> None:
    """File < inline JSON < policy shorthand / SPECFSM_LOG; the result is a typed Config."""
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"observe_every": 5, "policy": {"name": "fixed", "speculate": True}}))
    env = {
        "SPECFSM_CONFIG": str(f),
        "SPECFSM_CONFIG_JSON": json.dumps({"observe_every": 7}),
        "SPECFSM_POLICY": "threshold:high=32,low=8",
        "SPECFSM_LOG": "-",
    }
    cfg = resolve(env)
    assert isinstance(cfg, Config)
    assert cfg.observe_every == 7 and cfg.log == "-"
    assert cfg.policy == {"name": "threshold", "high": 32, "low": 8}
    assert isinstance(make_policy(cfg.policy), ThresholdPolicy)
    assert resolve({"SPECFSM_POLICY": "fixed:speculate=false"}).max_policy_faults == 3


@pytest.mark.parametrize(
    ("env", "line"),
    [
        (
            {"SPECFSM_CONFIG_JSON": '{"observe_seconds": "soon"}'},
            "observe_seconds: expected a number >= 0, got 'soon'",
        ),
        ({"SPECFSM_CONFIG_JSON": '{"log": 5}'}, 'log: expected a file path (string), "-"'),
        (
            {"SPECFSM_POLICY": "threshold:high=abc"},
            "policy.high: expected an integer >= 1, got 'abc' "
            "(from SPECFSM_POLICY='threshold:high=abc')",
        ),
        (
            {
                "SPECFSM_CONFIG_JSON": '{"policy": {"name": "threshold", "high": 8, "low": 2, '
                '"debounce": "2"}}'
            },
            "policy.debounce: expected an integer >= 1, got '2'",
        ),
        (
            {"SPECFSM_CONFIG_JSON": '{"contracts_every": true}'},
            "contracts_every: expected an integer >= 1, got True",
        ),
        ({"SPECFSM_CONFIG_JSON": '{"polcy": 1}'}, "polcy: unknown configuration keys ['polcy']"),
        ({"SPECFSM_CONFIG_JSON": "{not json"}, "SPECFSM_CONFIG_JSON: cannot read configuration"),
        ({"SPECFSM_CONFIG_JSON": "[1, 2]"}, "SPECFSM_CONFIG_JSON: expected a JSON object"),
        ({"SPECFSM_CONFIG": "/nonexistent/specfsm.json"}, "SPECFSM_CONFIG: cannot read"),
        ({"SPECFSM_POLICY": "threshold:high=4,low=8"}, "policy: ThresholdPolicy: need low < high"),
        ({"SPECFSM_POLICY": "warp:speed=9"}, "policy.name: unknown policy 'warp'"),
        ({"SPECFSM_POLICY": "threshold:high"}, "SPECFSM_POLICY: expected key=value"),
        ({"SPECFSM_CONFIG_JSON": '{"initial_mode": "DRAINING"}'}, "initial_mode: expected"),
        ({"SPECFSM_CONFIG_JSON": '{"contracts_every": 0}'}, "contracts_every: expected"),
        ({"SPECFSM_CONFIG_JSON": '{"max_policy_faults": 0}'}, "max_policy_faults: expected"),
        ({"SPECFSM_CONFIG_JSON": '{"control_file": 3}'}, "control_file: expected a path"),
        ({"SPECFSM_POLICY": "goodput:accept_len=2.5"}, "policy: goodput policy: 'shape'"),
        ({"SPECFSM_POLICY": "fixed:speculate=1"}, "policy.speculate: expected true or false"),
        ({"SPECFSM_POLICY": "every:k=0"}, "policy.k: expected an integer >= 1, got 0"),
        ({"SPECFSM_POLICY": "random:p=2"}, "policy.p: expected a number in [0, 1], got 2"),
        ({"SPECFSM_POLICY": "threshold:high=9,low=1,x=1"}, "policy.x: unknown configuration"),
        (
            {"SPECFSM_CONFIG_JSON": '{"defer_prefill_tokens": "all"}'},
            "defer_prefill_tokens: expected an integer >= 0 or \"pool\", got 'all'",
        ),
    ],
)
def test_refusals_name_key_and_allowed_values(env: dict[str, str], line: str) -> None:
    """Every broken value is one ConfigError line naming the key and what it allows."""
    with pytest.raises(ConfigError) as info:
        resolve(env)
    text = refusal_line(info.value)
    assert "\n" not in text and text.startswith("specfsm: refusing to start: ")
    assert line in text
    assert "JSONDecodeError" not in text and "not supported between" not in text


def test_log_directory_created_or_refused(tmp_path: Path) -> None:
    """A missing log directory is created; one that cannot be created or written is refused."""
    path = tmp_path / "new" / "deeper" / "log-{rank}.jsonl"
    resolve({"SPECFSM_POLICY": "fixed:speculate=true", "SPECFSM_LOG": str(path)})
    assert (tmp_path / "new" / "deeper").is_dir()
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="log: cannot create directory"):
        resolve({"SPECFSM_POLICY": "fixed:speculate=true", "SPECFSM_LOG": f"{blocker}/x.jsonl"})
    with pytest.raises(ConfigError, match="only \\{rank\\} is replaced"):
        resolve({"SPECFSM_POLICY": "fixed:speculate=true", "SPECFSM_LOG": f"{tmp_path}/{{x}}"})
    with pytest.raises(ConfigError, match="is a directory"):
        resolve({"SPECFSM_POLICY": "fixed:speculate=true", "SPECFSM_LOG": str(tmp_path)})
    if os.geteuid() != 0:  # root writes anywhere
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        with pytest.raises(ConfigError, match="not writable"):
            resolve({"SPECFSM_POLICY": "fixed:speculate=true", "SPECFSM_LOG": f"{ro}/x.jsonl"})


def test_defer_prefill_tokens_default_is_the_pool() -> None:
    """The deferred-prompt store defaults to the KV pool's size; an integer sets it."""
    assert resolve({"SPECFSM_POLICY": "fixed:speculate=true"}).defer_prefill_tokens == "pool"
    cfg = resolve({"SPECFSM_CONFIG_JSON": '{"defer_prefill_tokens": 4096}'})
    assert cfg.defer_prefill_tokens == 4096


def test_shorthand_keeps_plugin_paths() -> None:
    """A dotted plugin path keeps its ':' in the shorthand; bare words stay strings."""
    assert parse_shorthand("mypkg.mod:Cls:k=1,s=abc") == {
        "name": "mypkg.mod:Cls",
        "k": 1,
        "s": "abc",
    }
    assert parse_shorthand("mypkg.mod:Cls") == {"name": "mypkg.mod:Cls"}
    assert parse_shorthand("threshold:high=32,low=8")["high"] == 32


def test_policies_from_json() -> None:
    """Each named policy builds; scripted/every/random are deterministic per iteration."""
    assert isinstance(make_policy({"name": "fixed", "speculate": False}), FixedPolicy)
    every = make_policy({"name": "every", "k": 2})
    rnd1 = make_policy({"name": "random", "seed": 3, "p": 0.5})
    rnd2 = make_policy({"name": "random", "seed": 3, "p": 0.5})
    assert [every.target(i) for i in range(6)] == [False, False, True, True, False, False]  # type: ignore[attr-defined]
    assert [rnd1.target(i) for i in range(50)] == [rnd2.target(i) for i in range(50)]  # type: ignore[attr-defined]
    scripted = make_policy({"name": "scripted", "schedule": [[5, "PLAIN"], [9, "SPECULATING"]]})
    assert scripted.describe()["policy"] == "scripted"
    goodput = make_policy(
        {
            "name": "goodput",
            "table": "h200_sglang0517_llama8b",
            "shape": "chain3",
            "accept_len": 2.5,
        }
    )
    assert isinstance(goodput, GoodputPolicy)
    assert goodput.cost.shape == DraftShape.chain(3) and goodput.prior_accept_len == 2.5
    assert goodput.cost.table.source == "h200_sglang0517_llama8b"
    assert goodput.describe()["policy"] == "goodput"


class Plugged:
    """A plugin policy (dotted path from the config)."""

    def __init__(self, speculate: bool = True) -> None:
        self.inner = FixedPolicy(speculate)
        self.last_reason = ""

    def decide(self, mode, obs):  # type: ignore[no-untyped-def]
        return self.inner.decide(mode, obs)

    def describe(self) -> dict[str, object]:
        return {"policy": "plugged"}


def test_plugin_policy_by_dotted_path_and_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    """{"name": "module:Class", ...kwargs} builds a plugin policy; an entry point in group
    specfsm.policies too; wrong kwargs, missing members and bad paths are one-line refusals."""
    p = make_policy({"name": f"{__name__}:Plugged", "speculate": False})
    assert isinstance(p, Plugged) and p.inner.speculate is False
    with pytest.raises(ConfigError, match=r"^policy: .*Plugged\(\*\*\{'nope': 1\}\) failed"):
        make_policy({"name": f"{__name__}:Plugged", "nope": 1})
    with pytest.raises(ConfigError, match=r"policy: policy .* lacks decide, describe, last_reason"):
        make_policy({"name": "collections:OrderedDict"})
    with pytest.raises(ConfigError, match=r"policy\.name: policy 'no_such_mod:X': cannot import"):
        make_policy({"name": "no_such_mod:X"})

    import importlib.metadata as md

    ep = md.EntryPoint("plugged", f"{__name__}:Plugged", "specfsm.policies")
    real = md.entry_points

    def fake(**kw: object) -> object:
        if kw.get("group") == "specfsm.policies":
            return md.EntryPoints([ep])
        return real(**kw)  # type: ignore[arg-type]

    monkeypatch.setattr(md, "entry_points", fake)
    assert isinstance(make_policy({"name": "plugged"}), Plugged)


def test_goodput_shape_checked_against_server() -> None:
    """A goodput policy priced for chain3 is refused on a tree server, naming both shapes."""
    spec = {"name": "goodput", "shape": "chain3", "accept_len": 2.5}
    chain = SimpleNamespace(
        speculative_eagle_topk=1, speculative_num_steps=3, speculative_num_draft_tokens=4
    )
    tree = SimpleNamespace(
        speculative_eagle_topk=4, speculative_num_steps=2, speculative_num_draft_tokens=8
    )
    check_policy_shape(spec, server_shape(chain))
    with pytest.raises(ConfigError) as info:
        check_policy_shape(spec, server_shape(tree))
    text = str(info.value)
    assert text.startswith("policy.shape: ")
    assert "chain3 (topk 1, 3 steps, 4 draft tokens)" in text
    assert "tree (topk 4, 2 steps, 8 draft tokens)" in text
    check_policy_shape({"name": "threshold", "high": 9, "low": 1}, server_shape(tree))


def test_a_config_builds_its_policy_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Validation builds the policy and the controller takes that instance (one build per
    process); asking again gives a fresh policy (policies keep state)."""
    from specfsm_sglang import config as cfg_mod
    from specfsm_sglang import schema

    calls: list[object] = []
    real = cfg_mod.make_policy

    def counting(spec: object, key: str = "policy") -> object:
        calls.append(spec)
        return real(spec, key)

    monkeypatch.setattr(schema, "make_policy", counting)
    cfg = cfg_mod.resolve({"SPECFSM_POLICY": "threshold:high=9,low=2"}, prepare=False)
    assert len(calls) == 1
    first = cfg.take_policy()
    assert len(calls) == 1
    second = cfg.take_policy()
    assert len(calls) == 2 and second is not first
    allowed = cfg_mod.Config.keys()
    assert "_built_policy" not in cfg.as_dict() and "_built_policy" not in allowed


def test_shapes_parsed_and_refused_in_one_line() -> None:
    """`shapes` takes shape labels; a bad one is refused naming its index."""
    assert Config.from_mapping({"shapes": ["chain1", "4,3,8"]}).shapes == ["chain1", "4,3,8"]
    with pytest.raises(ConfigError) as exc:
        Config.from_mapping({"shapes": ["chain1", "banana"]})
    assert refusal_line(exc.value).startswith("specfsm: refusing to start: shapes[1]:")
    with pytest.raises(ConfigError, match="expected a list of shapes"):
        Config.from_mapping({"shapes": "chain1"})


def test_engine_shapes_not_wider_than_the_launch_topk() -> None:
    """No extra shape may be wider than the server's launch shape, in top-k or in KV slots per
    decode step; narrower ones (shorter chains, chains under a tree server) are accepted; the
    launch shape always comes first."""
    from specfsm_sglang.server_checks import check_engine_shapes, engine_shapes

    cfg = Config.from_mapping({"shapes": ["chain1", "chain3", "chain5"]})
    assert engine_shapes(cfg, DraftShape.chain(7)) == [
        DraftShape.chain(7),
        DraftShape.chain(1),
        DraftShape.chain(3),
        DraftShape.chain(5),
    ]
    check_engine_shapes(cfg, (1, 7, 8))
    check_engine_shapes(cfg, (4, 2, 8))  # chains under a tree server: narrower, accepted
    check_engine_shapes(Config.from_mapping({"shapes": ["4,2,8", "chain3"]}), (4, 3, 8))
    with pytest.raises(ConfigError, match=r"chain5 reserves 6 KV slots .* more than the launch"):
        check_engine_shapes(cfg, (1, 3, 4))
    with pytest.raises(ConfigError, match="launch with the widest shape"):
        check_engine_shapes(Config.from_mapping({"shapes": ["4,3,8"]}), (4, 2, 8))
    with pytest.raises(ConfigError, match="top-k 4 but the server drafts with top-k 1"):
        check_engine_shapes(Config.from_mapping({"shapes": ["4,1,4"]}), (1, 7, 8))
    with pytest.raises(ConfigError, match="launch with the widest top-k"):
        check_engine_shapes(Config.from_mapping({"shapes": ["8,1,8"]}), (4, 2, 8))
    with pytest.raises(ConfigError, match="with DP attention: untested"):
        check_engine_shapes(Config.from_mapping({"shapes": ["chain3"]}), (4, 2, 8), True)
    check_engine_shapes(Config.from_mapping({"shapes": ["4,1,4"]}), (4, 2, 8), True)


def test_step_kind_names_what_each_mode_runs() -> None:
    """DRAINING's 1-wide forward is a warm step, never a plain one (a policy calibrating its
    PLAIN price from it would double it); warm PLAIN is warm too."""
    from specfsm_sglang.flight import step_kind

    from specfsm import Mode

    assert step_kind(Mode.SPECULATING, True) == "spec"
    assert step_kind(Mode.DRAINING, True) == "warm"
    assert step_kind(Mode.PLAIN, True) == "plain"
    assert step_kind(Mode.RESYNCING, True) == "resync"
    assert step_kind(Mode.PLAIN, False) == "warm"
    assert step_kind(Mode.RESYNCING, False) == "warm"
