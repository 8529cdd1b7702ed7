"""The serving simulator and tuner (extra ``sim``: numpy for the engine, matplotlib for plots).

`traces` (load traces, the workload), `peers` (the controllers compared: specfsm's policies
through the real SpecFSM, SGLang adaptive, vLLM's batch-size table, TensorRT-LLM's max
concurrency, static baselines; `lineup`), `engine` (`run`: one load, one controller), `tune`
(the crossover and recommended parameters), `report` (progress bar, tables, CSV, plots).
Importing any of them needs only the stdlib: numpy is imported inside `engine.run`, matplotlib
inside the plot functions.
"""
