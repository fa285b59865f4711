"""llama.cpp, through llama-cpp-python's low-level API: the FFI boundary, and the only code that
calls the native library.

One concept per module, as llama.cpp's own ``src/`` has them: ``library`` (the binding loaded
once, its log, the backend, threads, the abort callbacks, the ``llama-ext.h`` functions),
``model`` (a loaded GGUF: vocabulary, tokenizer, metadata), ``context`` (the passes: the token
batch, logits, hidden states), ``memory`` (what a context's KV cache or recurrent state holds and
how positions leave it) and ``batch`` (the extended batch draft heads feed). Keeping the FFI here
means everything above deals in Python ints, lists and numpy views, and the bindings' quirks
(pointer lifetimes, batch layout, logging) are handled once. The bottom of the engine: it imports
nothing else of it but ``engine/errors.py``.
"""
