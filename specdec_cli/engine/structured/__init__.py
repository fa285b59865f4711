"""Structured output: a JSON Schema, a grammar or a regex, compiled with llguidance and enforced
token by token (``constraint``: masks, forced tokens, drafts cut at the first token the grammar
rejects).

A package of its own because the grammar is one concept with its own engine (llguidance) and
users outside the engine too (``toolcalls``, ``commands/structured.py``, which compile a
constraint before any model loads). It cuts drafts as ``Proposal``s (``verify/``) and is applied
by the decoding loops above it; a loaded model reaches it only as an argument (llguidance builds
its tokenizer from the model's vocabulary), so it imports nothing of ``llama/``.
"""
