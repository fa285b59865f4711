"""The ``gguf`` package, imported only once llama.cpp's native libraries are loaded.

Why: ``gguf`` imports ``sentencepiece``, a C++ extension. On an H200 machine with a CUDA build
of llama-cpp-python 0.3.36 (CUDA 13, Python 3.12, sentencepiece in the same environment),
importing ``gguf`` first made every model load crash inside llama.cpp's ``print_info`` (a
segfault in ``std::ostream``, with the CPU as well as the GPU); importing ``llama_cpp`` first
avoided it, as did ``LD_PRELOAD=libstdc++.so.6``. The order costs the commands that read GGUF
metadata the import of ``llama_cpp`` (about half a second), and nearly all of them go on to load
a model anyway.
"""

from __future__ import annotations

import contextlib

# a broken install is reported where a model is loaded, not here
with contextlib.suppress(Exception):
    import llama_cpp  # noqa: F401  (imported for its side effect: the native libraries load first)

import gguf  # noqa: E402

__all__ = ["gguf"]
