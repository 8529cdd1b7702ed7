"""The engine parent's launch check: one refusal line on stderr before any worker starts."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("specfsm_sglang")
from specfsm_sglang import hooks
from specfsm_sglang.config import ConfigError
from specfsm_sglang.refusal import StartRefused

ARGS = {
    "speculative_algorithm": "EAGLE3",
    "speculative_eagle_topk": 4,
    "speculative_num_steps": 2,
    "speculative_num_draft_tokens": 8,
}


@pytest.mark.parametrize(
    ("env", "args", "line"),
    [
        (
            {"SPECFSM_CONFIG_JSON": '{"observe_seconds": "soon"}'},
            {},
            "specfsm: refusing to start: observe_seconds: expected a number >= 0, got 'soon'",
        ),
        (
            {"SPECFSM_POLICY": "goodput:shape=chain3,accept_len=2.5"},
            {},
            "specfsm: refusing to start: policy.shape: the goodput policy is priced for chain3",
        ),
        (
            {"SPECFSM_POLICY": "fixed:speculate=true"},
            {"speculative_algorithm": "STANDALONE"},
            "specfsm: refusing to start: server_args: speculative_algorithm=STANDALONE",
        ),
        (
            {"SPECFSM_POLICY": "fixed:speculate=true"},
            {"enable_mixed_chunk": True},
            'specfsm: refusing to start: plain: enable_mixed_chunk=True with "plain": "zero_tax"',
        ),
        (
            {
                "SPECFSM_CONFIG_JSON": '{"plain": "warm", "policy": {"name": "goodput", '
                '"shape": "chain3", "accept_len": 2.0, "price_queued": 1.0}}'
            },
            {
                "enable_dp_attention": True,
                "speculative_eagle_topk": 1,
                "speculative_num_steps": 3,
                "speculative_num_draft_tokens": 4,
            },
            "specfsm: refusing to start: policy.price_queued: each DP rank has its own waiting",
        ),
    ],
    ids=["value", "shape", "server-args", "zero-tax", "queued-dp"],
)
def test_refusal_is_one_stderr_line(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    env: dict[str, str],
    args: dict[str, object],
    line: str,
) -> None:
    """A bad value, a goodput shape that is not the server's, an unsupported server, a server
    zero-tax PLAIN cannot serve (mixed chunks): the parent prints exactly one line and raises
    StartRefused (whose text is that line)."""
    for k in ("SPECFSM_CONFIG", "SPECFSM_CONFIG_JSON", "SPECFSM_POLICY", "SPECFSM_LOG"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(StartRefused) as info:
        hooks.launch_check(SimpleNamespace(**{**ARGS, **args}))
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(line)
    assert str(info.value) == err[0] and isinstance(info.value, ConfigError)


def test_not_requested_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without specfsm variables the launch check does nothing (and the accept-length hook is
    switched off for that engine)."""
    for k in ("SPECFSM_CONFIG", "SPECFSM_CONFIG_JSON", "SPECFSM_POLICY"):
        monkeypatch.delenv(k, raising=False)
    hooks._state.tokenizer_active = True
    hooks.launch_check(SimpleNamespace(**ARGS))
    assert hooks._state.tokenizer_active is False
    meta = {"spec_verify_ct": 2, "spec_num_correct_drafts": 2, "spec_accept_length": 9.0}
    hooks._after_spec_metrics(None, None, meta, None, 0)
    assert meta["spec_accept_length"] == 9.0


def test_warm_plain_serves_what_zero_tax_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    """The zero-tax refusal names its way out: with "plain": "warm" the same server starts."""
    for k in ("SPECFSM_CONFIG", "SPECFSM_CONFIG_JSON", "SPECFSM_POLICY", "SPECFSM_LOG"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("SPECFSM_CONFIG_JSON", '{"plain": "warm"}')
    hooks.launch_check(SimpleNamespace(**{**ARGS, "enable_dp_attention": True}))
