"""What a model file is, without loading it: the GGUF reader, the metadata (``GGUFInfo``),
base family and size guessed from names, the memory a model keeps and how a draft is taken
back out of it, the drafting methods, and the command that converts a checkpoint to GGUF.

The bottom layer, beside ``terminal``: it may use only ``errors`` and ``paths``.
"""
