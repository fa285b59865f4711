"""The commands, each a function of a request that ``cli.py`` builds from the options: ``run``,
``bench``, ``export``, ``demo``; the options they share, the memory check before loading, the
tables they print and how they ask before a download. Tests call these functions directly.

The top layer under ``cli``: it may use every other package.
"""
