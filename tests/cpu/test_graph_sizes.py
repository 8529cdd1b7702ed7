"""Config shape_graph_max_bs reaches SGLang's own capture sizes (`specfsm_sglang.graph_sizes`).

SGLang's graph runners size their captures with ``get_batch_sizes_to_capture`` from the
resolved ``cuda_graph_config.decode.bs``; ``build_adaptive_runtime_state``'s ``cuda_graph_bs``
overrides the ``cuda_graph_bs_decode`` leaf, which that function does not read. The probe runs
SGLang's real function against a published server config with decode graphs on (in a process
of its own: publishing the runtime context is process-wide), with the model runners the
adapter finds the configs through.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("sglang")

PROBE = textwrap.dedent("""
    import json
    from types import SimpleNamespace as NS

    from sglang.srt.model_executor.cuda_graph_config import CudaGraphConfig
    from sglang.srt.model_executor.runner.base_cuda_graph_runner import (
        get_batch_sizes_to_capture,
    )
    from sglang.srt.runtime_context import get_context
    from sglang.srt.server_args import ServerArgs
    from specfsm_sglang import graph_sizes
    from specfsm_sglang.refusal import ConfigError
    from specfsm_testbed.models import target_path

    out = {"before_publish": graph_sizes.graphs_on(NS())}
    sa = ServerArgs(model_path=str(target_path()), device="cpu")
    full = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    sa.cuda_graph_config = CudaGraphConfig.from_dict({"decode": {"backend": "full", "bs": full}})
    get_context().set_server_args(sa)
    runner = NS(req_to_token_pool=NS(size=256), server_args=sa)
    worker = NS(_target_worker=NS(model_runner=runner), _draft_worker=NS(draft_runner=runner))
    capture = lambda: get_batch_sizes_to_capture(runner)[0]
    out["on"] = graph_sizes.graphs_on(worker)
    out["server"] = graph_sizes.server_sizes(worker)
    kept = graph_sizes.capped(out["server"], 64, True)
    # SGLang's own override of the sizes, as build_adaptive_runtime_state makes it
    get_context().override("probe", cuda_graph_bs_decode=kept)
    out["sglang_override"] = capture()
    get_context().override("probe", cuda_graph_bs_decode=None)
    with graph_sizes.captured_at(worker, kept):
        out["inside"] = capture()
    out["after"] = capture()
    out["list_kept"] = sa.cuda_graph_config.decode.bs is not kept
    try:
        graph_sizes.capped(None, 64, True)
    except ConfigError as exc:
        out["unreadable"] = str(exc)
    state = NS(target_graph_runner=NS(capture_bs=[1, 2, 4]), cuda_graph_runner=None)
    out["captured_max"] = graph_sizes.captured_max(state)
    # the launch's own graph runner, where the worker has one, says what was captured
    runner.decode_cuda_graph_runner = NS(capture_bs=[1, 2, 4, 8])
    out["launch"] = graph_sizes.server_sizes(worker)
    runner.decode_cuda_graph_runner = None
    out["launch_off"] = [graph_sizes.graphs_on(worker), graph_sizes.server_sizes(worker)]
    print(json.dumps(out))
""")


def test_the_cap_narrows_what_sglang_captures() -> None:
    """Inside `captured_at` SGLang's `get_batch_sizes_to_capture` gives the capped sizes, and
    the server's full sizes again after it, while SGLang's own override leaves them full; a
    cap with graphs on and no readable sizes refuses in one line."""
    env = dict(os.environ, SPECFSM_SGLANG_CPU="1")
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    out = json.loads(proc.stdout.strip().splitlines()[-1])
    full = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert out["before_publish"] is False and out["on"] is True
    assert out["server"] == full
    assert out["sglang_override"] == full  # why the adapter applies the cap itself
    assert out["inside"] == [1, 2, 4, 8, 16, 32, 64]
    assert out["after"] == full and out["list_kept"]
    assert out["unreadable"].startswith("shape_graph_max_bs: 64 cannot be applied")
    assert out["captured_max"] == 4
    assert out["launch"] == [1, 2, 4, 8] and out["launch_off"] == [False, None]
