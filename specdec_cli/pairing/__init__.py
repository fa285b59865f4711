"""Which draft serves which target, and with which settings: the registry (``pairs.toml``),
llama.cpp's vocabulary and base/size rules, the draft chosen for a target, a pair's files on
this machine (found, planned, pulled), stored bench settings, and the one plan a run follows.

It may use ``engine`` (its defaults), ``hub``, ``models``, ``terminal`` and the shared
modules; ``commands`` use it.
"""
