"""``fixlab admin``: the operator's commands to the running exchange, through the bus.

See docs/risk-and-dropcopy.md.
"""
