"""Decoding: the loops that run the models, one sequence and many.

One sequence: ``session`` (prefill, then draft, verify, accept, roll back, until a stop) and
``runner`` (``Engine``: models and contexts loaded once, many generations; its measured costs
in ``engine_costs``). Many sequences in one target context: ``scheduler`` (one pass for every
sequence, prefill chunks, shared prefixes), its halves ``admission`` (which sequence a prompt
takes and what it need not compute) and ``pass_drafts`` (what the sequences of a pass draft),
and ``jobs`` (what it runs). The top of the engine: it puts the drafters, the verifiers, the
policy, the grammar and the chat prompt together, and nothing in the engine imports it.
"""
