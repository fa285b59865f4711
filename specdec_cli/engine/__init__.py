"""Running models: llama.cpp through llama-cpp-python's low-level API, one generation as
prefill, draft, verify, accept and roll back, and many generations in one pass.

One sub-package per concept, so the tree shows the architecture (top first; import-linter checks
it, ``pyproject.toml``): ``decode/`` (the loops: one sequence, many sequences, the ``Engine``),
``drafters/`` (one module per method), ``chat/`` (conversations to prompt tokens), ``policy/``
(the measured cost model and the decisions it makes), ``structured/`` (grammars, llguidance),
``verify/`` (the verifiers apart from the drafters, rollback, log-probabilities, the divergence
proof) and ``llama/`` (the FFI boundary, the only code that calls llama.cpp). The small shared
types stay here: ``errors``, ``options``, ``result``, ``stats``.

It may use ``models``, ``terminal`` and the shared modules; ``bench``, ``pairing``, ``memory``
and ``commands`` use it.
"""
