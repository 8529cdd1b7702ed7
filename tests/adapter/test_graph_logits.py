"""SGLang's shared CUDA-graph logits buffer grows for wider shapes (the H200 start-up crash:
"shared logits buffer holds 256 rows but caller needs 384")."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("sglang")
from sglang.srt.model_executor.graph_shared_output import GraphSharedOutput
from specfsm_sglang import compat


def _states(build: Any, **kw: Any) -> SimpleNamespace:
    """A stand-in for `EngineStates` around `build` (SGLang's `build_adaptive_runtime_state`),
    launched at chain 7 with no shape built yet and graphs off unless `kw` says otherwise."""
    runner = SimpleNamespace(_get_attention_backend=lambda init_new_workspace=False: None)
    worker = SimpleNamespace(
        build_adaptive_runtime_state=build, _target_worker=SimpleNamespace(model_runner=runner)
    )
    base = {"shape_builds": {}, "topk": 1, "spec_tokens": 8, "graph_bs": None}
    extra = {"shape_graph_bs": None, "shape_graph_max_bs": None}
    return SimpleNamespace(worker=worker, **{**base, **extra, **kw})


def _worker(shared: object) -> SimpleNamespace:
    target = SimpleNamespace(graph_shared_output=shared)
    draft = SimpleNamespace(graph_shared_output=shared)
    return SimpleNamespace(
        _target_worker=SimpleNamespace(model_runner=target),
        _draft_worker=SimpleNamespace(draft_runner=draft),
    )


def test_buffer_grows_for_the_widest_shape() -> None:
    """A buffer sized for the launch shape is replaced by one the widest shape fits, on both
    runners and as SGLang's process-wide instance; the old one's tensors stay valid."""
    saved = GraphSharedOutput._process_shared
    old = GraphSharedOutput(device="cpu", max_rows=256)
    GraphSharedOutput._process_shared = old
    kept = old.get_logits_buffer(8, rows=256)
    w = _worker(old)
    with pytest.raises(AssertionError, match="holds 256 rows but caller needs 384"):
        old.get_logits_buffer(8, rows=384)
    assert compat.grow_graph_logits(w, 384) == 384
    new = w._target_worker.model_runner.graph_shared_output
    assert (
        new is w._draft_worker.draft_runner.graph_shared_output is GraphSharedOutput._process_shared
    )
    assert new.get_logits_buffer(8, rows=384).shape == (384, 8)
    assert kept.shape == (256, 8)
    assert compat.grow_graph_logits(w, 300) == 0  # already large enough
    GraphSharedOutput._process_shared = saved


def test_no_graphs_nothing_to_grow() -> None:
    """Without CUDA graphs (the CPU bed) there is no shared buffer and nothing changes."""
    w = _worker(None)
    assert compat.grow_graph_logits(w, 1024) == 0
    assert w._target_worker.model_runner.graph_shared_output is None


def test_a_shape_state_that_fails_to_build_refuses_in_one_line() -> None:
    """An error while SGLang builds a shape's runtime state becomes a ConfigError naming the
    shape (one refusal line at start-up), not a scheduler traceback."""
    from specfsm_sglang.config import ConfigError
    from specfsm_sglang.runtime_states import EngineStates

    from specfsm.model.acceptance import DraftShape

    def build(**kw: object) -> object:
        raise AssertionError("shared logits buffer holds 256 rows but caller needs 384")

    fake = _states(build)
    with pytest.raises(ConfigError) as exc:
        EngineStates._build_shape_state(fake, DraftShape.chain(5))  # type: ignore[arg-type]
    assert str(exc.value).startswith("shapes: building the runtime state of chain5 failed")
    assert "needs 384" in str(exc.value)


def test_an_out_of_memory_graph_capture_refuses_as_a_shape_that_does_not_fit() -> None:
    """SGLang's graph capture re-raises CUDA's out-of-memory error as a plain Exception; the
    refusal still says the shape does not fit and what to lower."""
    from specfsm_sglang.config import ConfigError
    from specfsm_sglang.runtime_states import EngineStates

    from specfsm.model.acceptance import DraftShape

    def build(**kw: object) -> object:
        raise Exception("Capture cuda graph failed: CUDA out of memory. Tried to allocate 188 MiB")

    fake = _states(build, shape_builds={"chain1": {"build_s": 1.0, "device_mib": 820.0}})
    with pytest.raises(ConfigError) as exc:
        EngineStates._build_shape_state(fake, DraftShape.chain(2))  # type: ignore[arg-type]
    text = str(exc.value)
    assert text.startswith("shapes: the runtime state of chain2 does not fit in device memory")
    assert "lower --mem-fraction-static" in text and "chain1" in text and "188 MiB" in text


def test_a_plain_graph_that_does_not_fit_refuses_with_the_states_before_it() -> None:
    """Zero-tax PLAIN's target decode graph is built after the extra shapes' states; when it
    does not fit (the chain-7 shapes example on an 80 GiB card at --mem-fraction-static 0.8),
    the start-up is refused in one line that gives the shapes' sizes and the levers, not
    SGLang's capture traceback. Any other error is SGLang's own and passes through."""
    import torch
    from specfsm_sglang.config import ConfigError
    from specfsm_sglang.runtime_states import EngineStates

    def backend(init_new_workspace: bool = False) -> object:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 MiB")

    fake = _states(None, shape_builds={"chain3": {"build_s": 2.1, "device_mib": 952.0}})
    runner = fake.worker._target_worker.model_runner
    runner.device, runner.init_new_workspace = "cpu", False
    runner._get_attention_backend = backend
    cfg = SimpleNamespace(lag_tokens=64, catchup_tokens=0, defer_prefill_tokens=0)
    with pytest.raises(ConfigError) as exc:
        EngineStates._build_zero_tax(fake, cfg)  # type: ignore[arg-type]
    text = str(exc.value)
    assert text.startswith("plain: zero-tax PLAIN's target decode graph does not fit")
    assert "chain3" in text and "shape_graph_max_bs" in text and "64.00 MiB" in text

    def broken(init_new_workspace: bool = False) -> object:
        raise KeyError("attention backend")

    runner._get_attention_backend = broken
    with pytest.raises(KeyError):
        EngineStates._build_zero_tax(fake, cfg)  # type: ignore[arg-type]


def test_shape_states_share_the_attention_workspace() -> None:
    """Inside `shared_attention_workspace` the target runner's backends are built on SGLang's
    process-wide workspace whatever the caller asks (SGLang's state builder asks for a new one,
    2 GiB per state with flashinfer on the H200); outside it the runner is as it was."""
    from specfsm_sglang import compat

    class Runner:
        def __init__(self) -> None:
            self.asked: list[bool] = []

        def _get_attention_backend(self, init_new_workspace: bool = False) -> str:
            self.asked.append(init_new_workspace)
            return "backend"

    tmr = Runner()
    worker = SimpleNamespace(_target_worker=SimpleNamespace(model_runner=tmr))
    with compat.shared_attention_workspace(worker):
        assert tmr._get_attention_backend(init_new_workspace=True) == "backend"
    assert "_get_attention_backend" not in vars(tmr)
    tmr._get_attention_backend(init_new_workspace=True)
    assert tmr.asked == [False, True]


def test_extra_shapes_are_captured_up_to_their_graph_cap() -> None:
    """Config shape_graph_max_bs: an extra shape's state is captured for the server's decode
    graph sizes up to the cap (larger batches run that shape eagerly); graphs off stays off, no
    cap keeps every size, a cap below every size refuses the start-up naming the key, and so
    does a state SGLang captured above the cap (tests/cpu/test_graph_sizes.py: the cap as
    SGLang's own capture function sees it)."""
    from specfsm_sglang.config import ConfigError
    from specfsm_sglang.graph_sizes import capped
    from specfsm_sglang.runtime_states import EngineStates

    from specfsm.model.acceptance import DraftShape

    server = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert capped(server, 64, True) == [1, 2, 4, 8, 16, 32, 64]
    assert capped(server, 100, True) == [1, 2, 4, 8, 16, 32, 64]
    assert capped(server, None, True) == server
    assert capped(None, 64, False) is None  # graphs off: nothing to cap
    with pytest.raises(ConfigError, match="shape_graph_max_bs: 1 is below every"):
        capped([2, 4], 1, True)

    def build(captured: list[int]) -> Any:
        runner = SimpleNamespace(capture_bs=captured)
        return lambda **kw: SimpleNamespace(target_graph_runner=runner, cuda_graph_runner=runner)

    kw = {"graph_bs": server, "shape_graph_bs": capped(server, 64, True), "shape_graph_max_bs": 64}
    fake = _states(build([1, 2, 4, 8, 16, 32, 64]), **kw)
    EngineStates._build_shape_state(fake, DraftShape.chain(2))  # type: ignore[arg-type]
    assert fake.shape_builds["chain2"]["graph_max_bs"] == 64
    fake = _states(build(server), **kw)
    with pytest.raises(ConfigError, match="shape_graph_max_bs: 64 was not applied"):
        EngineStates._build_shape_state(fake, DraftShape.chain(2))  # type: ignore[arg-type]
