"""Will it fit: the memory each model needs (weights, KV cache, recurrent state, compute),
where it goes (layers per device, the offload choice and suggestions), and the free memory of
each device.

It may use ``engine`` (ggml's backends and llama.cpp's defaults), ``models``, ``terminal`` and
the shared modules; ``commands`` use it.
"""
