"""The SGLang CPU test bed: tiny deterministic models (:mod:`.models`) and engines
(:mod:`.engine`)."""
