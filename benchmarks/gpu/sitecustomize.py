"""Step timing inside a real SGLang engine (loaded only when this folder is on PYTHONPATH).

run_on_device.sh copies this file as ``sitecustomize.py`` into a folder it puts on PYTHONPATH
for the timing runs only, so it loads in the launcher and in SGLang's spawned scheduler process.
When ``SPECFSM_TIMING_FILE`` is set it wraps, as their modules are imported:

- ``TpModelWorker.forward_batch_generation``: stage ``decode`` (plain decode batches) and
  ``target_verify_fwd`` (the target forward inside a verify, ``is_verify=True``);
- ``EAGLEWorkerV2.verify``: stage ``verify`` (target forward of the draft tokens + acceptance);
- ``EagleDraftWorker.draft``: stage ``draft`` (all draft forwards of one iteration + tree build);
- ``EagleDraftWorker._draft_extend_for_decode``: stage ``draft_extend``.

Each call is bracketed by ``torch.cuda.synchronize()`` and timed with ``time.perf_counter``, so a
figure is the step's wall time on an idle GPU, host work included (run with
``disable_overlap_schedule=True``). One JSON line per call goes to ``$SPECFSM_TIMING_FILE``:
``{"t": ..., "pid": ..., "stage": ..., "bs": ..., "ms": ...}``. Any other ``sitecustomize``
further down ``sys.path`` is still executed.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import json
import os
import sys
import time

_FILE = os.environ.get("SPECFSM_TIMING_FILE")

_TARGETS = {
    "sglang.srt.managers.tp_worker": [("TpModelWorker", "forward_batch_generation", "target")],
    "sglang.srt.speculative.eagle_worker_v2": [
        ("EAGLEWorkerV2", "verify", "verify"),
        ("EagleDraftWorker", "draft", "draft"),
        ("EagleDraftWorker", "_draft_extend_for_decode", "draft_extend"),
    ],
}


def _bs(args, kwargs) -> int:
    batch = kwargs.get("batch", args[1] if len(args) > 1 else None)
    if batch is not None and getattr(batch, "seq_lens", None) is not None:
        return len(batch.seq_lens)
    fb = kwargs.get("forward_batch", args[2] if len(args) > 2 else None)
    return int(getattr(fb, "batch_size", -1) or -1)


def _stage(kind: str, args, kwargs) -> str | None:
    if kind != "target":
        return kind
    if kwargs.get("is_verify"):
        return "target_verify_fwd"
    batch = kwargs.get("batch", args[1] if len(args) > 1 else None)
    fb = kwargs.get("forward_batch", args[2] if len(args) > 2 else None)
    src = batch if batch is not None else fb
    mode = getattr(src, "forward_mode", None)
    if mode is not None and mode.is_decode():
        return "decode"
    return None


def _wrap(cls, name: str, kind: str) -> None:
    orig = getattr(cls, name)

    def timed(*args, **kwargs):
        import torch

        stage = _stage(kind, args, kwargs)
        if stage is None:
            return orig(*args, **kwargs)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = orig(*args, **kwargs)
        torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) * 1e3
        rec = {"t": time.time(), "pid": os.getpid(), "stage": stage, "bs": _bs(args, kwargs)}
        rec["ms"] = round(ms, 4)
        with open(_FILE, "a") as fh:
            fh.write(json.dumps(rec) + "\n")
        return out

    timed.__wrapped__ = orig
    setattr(cls, name, timed)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname not in _TARGETS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        orig_exec = loader.exec_module

        def exec_module(module):
            orig_exec(module)
            for cls_name, meth, kind in _TARGETS[fullname]:
                cls = getattr(module, cls_name, None)
                if cls is not None and hasattr(cls, meth):
                    _wrap(cls, meth, kind)
                else:
                    print(f"[timing] {fullname}.{cls_name}.{meth} not found", file=sys.stderr)

        loader.exec_module = exec_module
        return spec


if _FILE:
    sys.meta_path.insert(0, _Finder())

# chain to the next sitecustomize on sys.path, if any
_here = os.path.dirname(os.path.abspath(__file__))
for _entry in sys.path:
    _cand = os.path.join(_entry, "sitecustomize.py")
    if _entry and os.path.abspath(_entry) != _here and os.path.isfile(_cand):
        _spec = importlib.util.spec_from_file_location("_next_sitecustomize", _cand)
        if _spec is not None and _spec.loader is not None:
            _spec.loader.exec_module(importlib.util.module_from_spec(_spec))
        break
