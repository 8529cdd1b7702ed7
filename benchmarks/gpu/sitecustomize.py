"""Step timing inside a real SGLang engine (loaded only when this folder is on PYTHONPATH).

run_on_device.sh copies this file as ``sitecustomize.py`` into a folder it puts on PYTHONPATH
for the timing runs only, so it loads in the launcher and in SGLang's spawned scheduler process.
When ``SPECFSM_TIMING_FILE`` is set it wraps, as their modules are imported:

- ``TpModelWorker.forward_batch_generation``: stage ``decode`` (plain decode batches) and
  ``target_verify_fwd`` (the target forward inside a verify, ``is_verify=True``);
- ``EAGLEWorkerV2.verify``: stage ``verify`` (target forward of the draft tokens + acceptance);
- ``EagleDraftWorker.draft``: stage ``draft`` (all draft forwards of one iteration + tree build);
- ``EagleDraftWorker._draft_extend_for_decode``: stage ``draft_extend``;
- ``EAGLEWorkerV2.forward_batch_generation`` (decode batches only): stage ``spec_step``, the
  whole speculative iteration (draft + verify + draft-extend, or the 1-wide step specfsm
  attached), with the worker's ``steps`` and, when specfsm runs, the ``mode`` it attached.

``SPECFSM_TIMING_GATED=1``: time only while the file ``$SPECFSM_TIMING_FILE.on`` exists (the
acceptance suite turns it on around its timing phase, so its end-to-end phases run unsynced).

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
        ("EAGLEWorkerV2", "forward_batch_generation", "spec_step"),
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


_GATE = _FILE + ".on" if _FILE and os.environ.get("SPECFSM_TIMING_GATED") == "1" else None


def _mode_and_steps(self_obj) -> dict:
    """specfsm's attached mode (if the plugin runs in this process) and the worker's steps."""
    rec = {"steps": getattr(self_obj, "speculative_num_steps", None)}
    mod = sys.modules.get("specfsm_sglang.hooks")
    ctl = mod.controller() if mod is not None else None
    if ctl is not None:
        rec["mode"] = ctl.fsm.mode.value
    return rec


def _stage(kind: str, args, kwargs) -> str | None:
    if _GATE is not None and not os.path.exists(_GATE):
        return None
    if kind == "spec_step":
        batch = kwargs.get("batch", args[1] if len(args) > 1 else None)
        if batch is None or batch.forward_mode.is_extend():
            return None
        if getattr(batch, "is_extend_in_batch", False):
            return None
        return kind
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
        sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
        sync()
        t0 = time.perf_counter()
        out = orig(*args, **kwargs)
        sync()
        ms = (time.perf_counter() - t0) * 1e3
        rec = {"t": time.time(), "pid": os.getpid(), "stage": stage, "bs": _bs(args, kwargs)}
        rec["ms"] = round(ms, 4)
        if kind in ("spec_step", "verify", "draft", "draft_extend") and args:
            rec.update(_mode_and_steps(args[0]))
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
if os.environ.get("SPECFSM_AGREE"):  # bigram target + agreeing draft (agree_weights.py, copied
    __import__("agree_weights").install_hook()  # next to this file by run_on_device.sh)

# chain to the next sitecustomize on sys.path, if any
_here = os.path.dirname(os.path.abspath(__file__))
for _entry in sys.path:
    _cand = os.path.join(_entry, "sitecustomize.py")
    if _entry and os.path.abspath(_entry) != _here and os.path.isfile(_cand):
        _spec = importlib.util.spec_from_file_location("_next_sitecustomize", _cand)
        if _spec is not None and _spec.loader is not None:
            _spec.loader.exec_module(importlib.util.module_from_spec(_spec))
        break
