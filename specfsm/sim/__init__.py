"""The serving simulator and tuner (extra ``sim``: numpy for the engine, matplotlib for plots).

`traces` (load traces, the workload), `peers` (the controllers compared: specfsm's policies
through the real SpecFSM, SGLang adaptive, vLLM's batch-size table, TensorRT-LLM's max
concurrency, static baselines; `lineup`), `baselines` (the honest baselines: the static
grid of the engine's states, i.e. the draft shapes and the engine's PLAIN state, the server
without a draft as an info baseline, and each peer's rule fitted on the fit table: vLLM's K
table, SGLang adaptive with default and tuned tiers, SGLang's skip-flag steps=0, TensorRT-LLM's
draft_len_schedule), `oracle` (the per-phase oracle of a time-varying trace: the best static
state per phase), `engine` (`run`: one load, one controller; common random numbers for
acceptance), `tune` (the crossover, recommended parameters and the per-bs shape table),
`report` (progress bar, tables, CSV, plots). Importing any of them needs only the stdlib:
numpy is imported inside `engine.run`, matplotlib inside the plot functions.
"""
