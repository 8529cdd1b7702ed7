"""specfsm: a formal FSM that owns speculative-decoding state."""
