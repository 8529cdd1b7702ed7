"""Runs one engine in its own process for tests whose engine must fail: SGLang's scheduler
answers a fatal error by killing its parent process tree, so such an engine may not live in
the pytest process. argv[1]: JSON {"env": {...}, "engine": {...}, "generate": bool}."""

from __future__ import annotations

import json
import os
import sys

if __name__ == "__main__":
    spec = json.loads(sys.argv[1])
    os.environ.update(spec.get("env", {}))
    from specfsm_testbed import engine as E

    eng = E.make_engine(**spec.get("engine", {}))
    print("ENGINE-STARTED", flush=True)
    if spec.get("generate"):
        test_dir = spec["env"].get("SPECFSM_TEST_DIR")
        if test_dir and spec.get("inject"):
            from specfsm_testbed import fsm as F

            F.inject(test_dir, **spec["inject"])
        out = E.generate_greedy(eng, E.default_prompts(4), 16)
        print("GENERATED", json.dumps(out), flush=True)
    eng.shutdown()
    print("ENGINE-STOPPED", flush=True)
