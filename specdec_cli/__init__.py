"""specdec: speculative decoding with llama.cpp, made practical on a local machine."""

__version__ = "0.1.0"
