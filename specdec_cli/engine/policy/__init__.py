"""Deciding from measurements: what a target pass and a draft token cost on this machine
(``costmodel``: measured, smoothed, cached per model and settings), and what those costs decide
(``decisions``: the draft length that maximises expected tokens per second, a shared pass's drafts
cut together, how many sequences at once, acceptance calibration).

Its own package because the drafters (auto) and the decoding loops both ask it, and it asks
nothing of them: the costs and the arithmetic on them, no model calls.
"""
