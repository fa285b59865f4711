"""Running models: llama.cpp through llama-cpp-python's low-level API, one generation as
prefill, draft, verify, accept and roll back (``session``), the verifiers apart from the
drafters (``drafters/``, one module per method), the measured cost model and the policy that
decides each draft.

It may use ``models``, ``terminal`` and the shared modules; ``bench``, ``pairing``, ``memory``
and ``commands`` use it.
"""
