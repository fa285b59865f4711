"""Measuring speculation on against off: prompt sets per use case, the runner that times each
configuration, the report and its recommendation, and the plot.

It may use ``engine``, ``models``, ``terminal`` and the shared modules; ``commands`` use it.
"""
