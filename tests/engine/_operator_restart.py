"""An engine WITHOUT specfsm, shut down, then one WITH specfsm in the same process (the
plugin loads once per process). Prints one JSON line: the specfsm engine's per-request spec
metrics. Never calls hooks.ensure_tokenizer_side."""

from __future__ import annotations

import json
import os
import sys
import tempfile

if __name__ == "__main__":
    from specfsm_testbed import engine as E

    prompts = E.default_prompts(6, seed=21)
    with E.engine_session(spec="EAGLE3") as first:  # no SPECFSM_* variable: plain SGLang
        E.generate(first, prompts, 8)
    test_dir = tempfile.mkdtemp(prefix="specfsm-restart-")
    cfg = {
        "policy": {"name": "every", "k": 2},
        "log": os.path.join(test_dir, "transitions-{rank}.jsonl"),
    }
    os.environ["SPECFSM_CONFIG_JSON"] = json.dumps(cfg)
    with E.engine_session(spec="EAGLE3") as second:
        outs = E.generate(second, prompts, 24)
    keys = ("spec_accept_length", "spec_verify_ct", "spec_num_correct_drafts")
    print("METRICS", json.dumps([{k: o["meta_info"].get(k) for k in keys} for o in outs]))
    sys.stdout.flush()
