"""The pieces of ``compare/native_compare.py``: its prompts, and one module per mode.

``prompts``      the prompt sets: built-in raw prompts, a --prompts-file, chats rendered with the
                 target's own template
``speculative``  per-prompt mode: llama-speculative-simple against specdec's Engine
``batch``        server mode: batch throughput of llama-server's slots against specdec commands
``session``      session mode: multi-turn conversations against llama-server
``slot``         slot mode: one at a time, specdec's target alone against llama-server's single slot

The llama-server process handling they share with other programs is ``_shared/llama_server.py``.
"""
