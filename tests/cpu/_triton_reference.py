"""Runs SGLang 0.5.23 Triton kernels in Triton's CPU interpreter: the reference of test_ops.py.

Started by test_ops.py as ``python _triton_reference.py IN OUT`` with ``TRITON_INTERPRET=1``
set before anything imports triton (the interpreter must own ``triton.language`` too), and
the CPU test bed booted (``SPECFSM_SGLANG_CPU=1``: the stubs let ``sglang.srt`` import; the
kernels below are SGLang's Triton kernels and Python launchers, not the ports under test). IN is a
``torch.save``d dict ``case id -> (target "module:attr", grid or None, args, output positions)``;
OUT receives ``case id -> [args[i] for i in output positions]`` after the kernel (``grid``
given: ``kernel[grid](*args)``) or Python launcher (``grid`` None: ``fn(*args)``) ran.
"""

from __future__ import annotations

import importlib
import os
import sys

import torch


def main(src: str, dst: str) -> None:
    assert os.environ.get("TRITON_INTERPRET") == "1"
    jobs = torch.load(src, weights_only=False)
    results = {}
    for case_id, (target, grid, args, outputs) in jobs.items():
        module_name, attr = target.split(":")
        fn = getattr(importlib.import_module(module_name), attr)
        if grid is None:
            fn(*args)
        else:
            assert type(fn).__name__ == "InterpretedFunction", type(fn)
            fn[grid](*args)
        results[case_id] = [args[i] for i in outputs]
    torch.save(results, dst)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
