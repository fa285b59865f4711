"""``specdec serve``: an OpenAI-compatible HTTP server over the many-sequence scheduler.

``app.py`` is the HTTP side (Starlette; requests checked with pydantic, ``schemas.py``),
``worker.py`` the loop that owns llama.cpp (on the main thread) and steps the scheduler, ``metrics.py`` what
``/metrics`` reports. It may use ``engine``, ``models``, ``terminal`` and the shared modules;
``commands`` use it.
"""
