"""The FSM core: the transition table and everything that executes or shows it.

`table` (modes, events, TRANSITIONS: Rule 1), `machine` (SpecFSM, the executor), `actions`
(the ModeActions protocol an engine adapter implements), `record` (the one transition record),
`decision` (the Policy protocol the machine asks), `contracts`, `errors`, `log`, `observation`,
`diagram` and `testing`. This package imports nothing from specfsm.policy, specfsm.sim or
specfsm.cli, and from specfsm.model only `DraftShape` (specfsm.model.acceptance, pure Python).
"""
