"""Decoding: the loops that run the models, one sequence and many.

One sequence: ``session`` (prefill, then draft, verify, accept, roll back, until a stop) and
``engine`` (``Engine``: models and contexts loaded once, many generations, for run, bench and
serve; its measured costs a part of it, ``engine_costs``). Many sequences in one target
context: ``scheduler`` (one pass for every sequence, prefill chunks, shared prefixes) and the
parts it owns: ``admission`` (which sequence a prompt takes and what it need not compute),
``job_start`` (a job taking a sequence), ``pass_drafts`` (what the sequences of a pass draft)
and ``pass_batch`` (a pass's rows); ``jobs`` (what it runs, every field of a sequence declared).
The top of the engine: it puts the drafters, the verifiers, the policy, the grammar and the
chat prompt together, and nothing in the engine imports it.
"""
