"""Conversations to prompts: chat messages (and tools) through the model's own Jinja template
(``template``), and the rendered prompt to tokens where only the template's markup becomes
control tokens (``prompt``).

Apart from ``llama/`` because none of it calls llama.cpp: it renders text and tokenizes through
a loaded ``Model``, so it sits above the bindings and below the decoding that feeds it prompts.
"""
