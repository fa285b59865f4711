"""Tool calls: what a request offers (``request.py``), how each model family writes a call
(``formats/``, one module per family, on the shared ``syntax.py``), the grammar that makes a
started call well formed (``grammar.py``), and reading calls back out of the text, whole or
as it streams (``parse.py``).

Text in, text out: nothing here touches llama.cpp. The engine renders the prompt (with the
tools passed to the model's own template) and runs the grammar; the server and ``--batch``
spell the calls in OpenAI's shape.
"""
