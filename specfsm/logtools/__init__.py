"""Operators' tools for the JSON transition log: `specfsm logs summary|timeline|replay` and
`specfsm bundle`. Each module does one job: reader (parse and check lines, group them into
engines, ranks and runs), summary, timeline (the plot), replay (another policy on recorded
observations, priced with the cost model), bundle (one file for a bug report), cli (argparse).
"""
