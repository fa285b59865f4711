"""The prompt cache: a long prompt's cells read once, kept past the sequence, the server and the
process that computed them.

Three tiers, nearest first: the context's own cells (a free sequence still holding a finished
conversation: ``decode/admission.py``), host RAM (``host.py``) and files on disk (``disk.py``,
``entry_file.py``). ``cache.py`` puts them together: a prompt is matched against every kept
entry by its longest common token prefix, and the winner's cells are restored with llama.cpp's
own ``llama_state_seq_*`` calls (``llama/memory.py``), the rest of the prompt read as usual.
``key.py`` says what must agree for cells to be reused at all: the model file, the llama.cpp
build and the cache's types.

The cells of a sequence are what reading its tokens left in the cache, so restoring them gives
the next pass the same keys and values as reading the prompt would: the output is the target's
own, up to llama.cpp's batch-shape numerics (the prefix was read in other chunks), as with
cells shared between sequences.
"""
