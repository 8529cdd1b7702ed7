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
import threading
import time

_FILE = os.environ.get("SPECFSM_TIMING_FILE")

_TARGETS: dict = (
    {}
    if not _FILE
    else {
        "sglang.srt.managers.tp_worker": [("TpModelWorker", "forward_batch_generation", "target")],
        "sglang.srt.speculative.eagle_worker_v2": [
            ("EAGLEWorkerV2", "forward_batch_generation", "spec_step"),
            ("EAGLEWorkerV2", "verify", "verify"),
            ("EagleDraftWorker", "draft", "draft"),
            ("EagleDraftWorker", "_draft_extend_for_decode", "draft_extend"),
        ],
    }
)


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
                    if kind == "run_batch":
                        _run_batch_wrap(cls)
                    elif kind.startswith("phase_"):
                        _phases.wrap_class(cls, meth, _phases.FIELDS.index(kind[len("phase_") :]))
                    elif kind == "adaptive":
                        _adaptive_wrap(cls)
                    elif kind.startswith("prefill_"):
                        _prefill_wrap(cls, meth, kind[len("prefill_") :])
                    else:
                        _wrap(cls, meth, kind)
                else:
                    print(f"[timing] {fullname}.{cls_name}.{meth} not found", file=sys.stderr)

        loader.exec_module = exec_module
        return spec


# ``SPECFSM_ITER_TRACE=<dir>``: one record per scheduler iteration (hook_iters.py, copied beside
# this file; with ``SPECFSM_ITER_PHASES=1`` the host time of the loop's parts, hook_phases.py)
_ITER = os.environ.get("SPECFSM_ITER_TRACE")
_iters = __import__("hook_iters") if _ITER else None
_phases = _iters.phases if _iters is not None else None


def _run_batch_wrap(cls) -> None:
    """Scheduler.run_batch, once for both per-iteration hooks: the iteration trace
    (``SPECFSM_ITER_TRACE``) and the sync-debug window's toggle (``SPECFSM_SYNC_DEBUG``)."""
    orig = cls.run_batch

    def run_batch(self, batch, *args, **kwargs):
        t = time.perf_counter()
        try:
            fm = batch.forward_mode
            if _phases is not None:
                _phases.attach(self)
            if _sync is not None:
                _sync.toggle(_SYNC, "E" if fm.is_extend() else "D" if fm.is_decode() else "I")
            if _iters is not None:
                _iters.record(self, batch, fm)
        except Exception as exc:  # a trace must never break the server
            print(f"[iter-trace] {type(exc).__name__}: {exc}", file=sys.stderr)
        try:
            return orig(self, batch, *args, **kwargs)
        finally:
            if _phases is not None:
                _phases.add(_phases.RUN, time.perf_counter() - t)

    run_batch.__wrapped__ = orig
    cls.run_batch = run_batch


if _phases is not None:
    _TARGETS.setdefault("sglang.srt.managers.tp_worker", []).append(
        ("TpModelWorker", "forward_batch_generation", "phase_target")
    )
    _TARGETS.setdefault("sglang.srt.layers.attention.flashinfer_backend", []).append(
        ("FlashInferAttnBackend", "init_forward_metadata", "phase_plan")
    )

# ``SPECFSM_PREFILL_TIMING=<dir>``: GPU time of each prefill piece, from CUDA events (no
# synchronize: an event pair is read once the GPU passed its end, so overlap is untouched).
# Stages: ``target`` (TpModelWorker.forward_batch_generation on an extend batch: the target
# prefill, with the hidden-state capture a speculative server asks for) and ``draft``
# (EagleDraftWorker._draft_extend_for_prefill: the draft's prefill over the same tokens).
# One record per piece: [wall time at launch, stage, extend tokens, bs, GPU ms, specfsm mode].
#
# ``SPECFSM_SKIP_DRAFT_PREFILL=<flag file>`` (harness only, a measurement of what deferring
# the draft prefill can save at most): while the flag file exists and specfsm's mode is PLAIN,
# _draft_extend_for_prefill returns shape-valid zeros without running the draft (what PLAIN
# relays anyway). Outputs stay exact (PLAIN never reads the draft); the draft KV of those
# prompts is left unwritten, so it is for pinned-PLAIN runs only.
_PREFILL = os.environ.get("SPECFSM_PREFILL_TIMING")
_SKIP_FLAG = os.environ.get("SPECFSM_SKIP_DRAFT_PREFILL")
_PF_PENDING: list = []
_PF_BUF: list = []
_PF_LOCK = threading.Lock()  # the scheduler thread and the idle flusher share both lists
_PF_IDLE: list = []  # the pid whose idle flusher runs (a spawned child starts its own)
_PF_DEV: list = []  # the scheduler's CUDA device, for the flusher's event queries


def _spec_mode():
    try:
        mod = sys.modules.get("specfsm_sglang.hooks")
        ctl = mod.controller() if mod is not None else None
        return ctl.fsm.mode.value if ctl is not None else None
    except Exception:
        return None


def _pf_flush(force: bool = False, drain: bool = False) -> None:
    """Move the pieces the GPU has passed into the buffer and write it once it holds 64
    records or a second of launches; ``drain`` writes whatever it holds, ``force`` waits
    for every pending piece first (at exit)."""
    with _PF_LOCK:
        keep = []
        for rec, ev0, ev1 in _PF_PENDING:
            if force or ev1.query():
                if force:
                    ev1.synchronize()
                _PF_BUF.append([*rec[:4], round(ev0.elapsed_time(ev1), 4), rec[4]])
            else:
                keep.append((rec, ev0, ev1))
        _PF_PENDING[:] = keep
        due = len(_PF_BUF) >= 64 or (_PF_BUF and _PF_BUF[-1][0] - _PF_BUF[0][0] > 1.0)
        if _PF_BUF and (force or drain or due):
            with open(os.path.join(_PREFILL, f"prefill-{os.getpid()}.jsonl"), "a") as fh:
                fh.write("".join(json.dumps(r) + "\n" for r in _PF_BUF))
            _PF_BUF.clear()


def _pf_quiet(now: float) -> bool:
    """Pieces are held and none was launched for a quarter of a second: a run's last
    prefills, which no later piece would push out before the driver reads its window."""
    with _PF_LOCK:  # pieces enter both lists in launch order: the last held is the last launched
        last = _PF_PENDING[-1][0][0] if _PF_PENDING else _PF_BUF[-1][0] if _PF_BUF else None
    return last is not None and now - last > 0.25


def _pf_idle_flusher() -> None:
    try:
        if _PF_DEV:
            import torch

            torch.cuda.set_device(_PF_DEV[0])  # event queries on the scheduler's device
    except Exception as exc:
        print(f"[prefill-timing] {type(exc).__name__}: {exc}", file=sys.stderr)
    while True:
        time.sleep(0.25)
        try:
            if _pf_quiet(time.time()):
                _pf_flush(drain=True)
        except Exception as exc:  # a measurement must never break the server: said once,
            # and the scheduler's own flushes (64 records or a second of launches) go on
            print(
                f"[prefill-timing] idle flusher stopped: {type(exc).__name__}: {exc}",
                file=sys.stderr,
            )
            return


def _prefill_wrap(cls, name: str, stage: str) -> None:
    orig = getattr(cls, name)

    def wrapped(*args, **kwargs):
        batch = kwargs.get("batch", args[1] if len(args) > 1 else None)
        fm = getattr(batch, "forward_mode", None)
        if batch is None or fm is None or not fm.is_extend():
            return orig(*args, **kwargs)
        mode = _spec_mode()
        if stage == "draft" and _SKIP_FLAG and mode == "PLAIN" and os.path.exists(_SKIP_FLAG):
            return _zero_draft_input(args[0], batch, *args[2:4])
        if not _PREFILL:
            return orig(*args, **kwargs)
        import torch

        try:
            ev0 = torch.cuda.Event(enable_timing=True)
            ev1 = torch.cuda.Event(enable_timing=True)
            rec = [
                round(time.time(), 5),
                stage,
                int(getattr(batch, "extend_num_tokens", 0) or 0),
                int(batch.batch_size()),
                mode,
            ]
            ev0.record()
        except Exception:
            return orig(*args, **kwargs)
        out = orig(*args, **kwargs)
        ev1.record()
        with _PF_LOCK:
            _PF_PENDING.append((rec, ev0, ev1))
        _pf_flush()
        if os.getpid() not in _PF_IDLE:
            _PF_IDLE[:] = [os.getpid()]
            _PF_DEV[:] = [torch.cuda.current_device()]
            threading.Thread(target=_pf_idle_flusher, name="prefill-timing", daemon=True).start()
        return out

    wrapped.__wrapped__ = orig
    setattr(cls, name, wrapped)


def _zero_draft_input(draft_worker, batch, hidden, next_token_ids):
    """What PLAIN relays after its own steps: the bonus tokens and shape-valid zero drafts."""
    import torch
    from sglang.srt.speculative.eagle_info import EagleDraftInput

    bs = int(batch.batch_size())
    dev = next_token_ids.device
    topk = int(getattr(draft_worker, "topk", 1))
    width = int(hidden.shape[-1]) if hidden is not None else 0
    return EagleDraftInput(
        topk_p=torch.zeros((bs, topk), dtype=torch.float32, device=dev),
        topk_index=torch.zeros((bs, topk), dtype=torch.int64, device=dev),
        hidden_states=torch.zeros((bs, width), dtype=hidden.dtype, device=dev)
        if hidden is not None
        else None,
        bonus_tokens=next_token_ids,
        num_tokens_per_req=1,
        num_tokens_for_logprob_per_req=1,
    )


if _PREFILL or _SKIP_FLAG:
    import atexit

    if _PREFILL:
        os.makedirs(_PREFILL, exist_ok=True)
        atexit.register(lambda: _pf_flush(force=True))
        _TARGETS.setdefault("sglang.srt.managers.tp_worker", []).append(
            ("TpModelWorker", "forward_batch_generation", "prefill_target")
        )
    _TARGETS.setdefault("sglang.srt.speculative.eagle_worker_v2", []).append(
        ("EagleDraftWorker", "_draft_extend_for_prefill", "prefill_draft")
    )


# ``SPECFSM_ADAPTIVE_GROW=1`` (harness only, for SGLang's own ``--speculative-adaptive`` as a
# measured peer): 0.5.17 sizes the process-wide CUDA-graph logits buffer (GraphSharedOutput) for
# the launch shape, so building the adaptive states of more steps fails at start ("shared
# logits buffer holds 1024 rows but caller needs 2048"). Where that assertion would fire, the
# buffer grows to the caller's rows instead: the old tensors stay referenced (graphs captured
# on them keep writing there) and later callers get views of a new, larger tensor; the same
# repair specfsm's plugin makes for its own shapes (adapters/specfsm_sglang/compat.py,
# grow_graph_logits), made at the one call that knows the rows it needs (a row count computed
# from the state's pruned batch sizes missed it). Nothing else of the adaptive path changes.
def _adaptive_wrap(cls) -> None:
    orig = cls.get_logits_buffer

    def get_logits_buffer(self, vocab_size, *, rows):
        if rows > self.max_rows:
            kept = self.__dict__.setdefault("_grow_kept", [])
            kept.extend(self._logits_buffers.values())
            self._logits_buffers = {}
            print(f"[adaptive-grow] logits buffer {self.max_rows} -> {rows} rows", file=sys.stderr)
            self.max_rows = rows
        return orig(self, vocab_size, rows=rows)

    get_logits_buffer.__wrapped__ = orig
    cls.get_logits_buffer = get_logits_buffer


if os.environ.get("SPECFSM_ADAPTIVE_GROW"):
    _TARGETS.setdefault("sglang.srt.model_executor.graph_shared_output", []).append(
        ("GraphSharedOutput", "get_logits_buffer", "adaptive")
    )

# ``SPECFSM_SYNC_DEBUG=<flag file>`` (diagnosis only): the scheduler's waits for the GPU while
# the flag file exists, by call site (hook_sync.py, copied beside this file).
_SYNC = os.environ.get("SPECFSM_SYNC_DEBUG")
_sync = __import__("hook_sync") if _SYNC else None


# the toggle runs in Scheduler.run_batch's wrapper (_run_batch_wrap), beside the iteration trace
if _ITER or _SYNC:
    _TARGETS.setdefault("sglang.srt.managers.scheduler", []).append(
        ("Scheduler", "run_batch", "run_batch")
    )

if _FILE or _ITER or _PREFILL or _SKIP_FLAG or _SYNC or os.environ.get("SPECFSM_ADAPTIVE_GROW"):
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
