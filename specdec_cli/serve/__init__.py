"""``specdec serve``: an OpenAI- and Anthropic-compatible HTTP server over the many-sequence scheduler.

Three APIs (Chat Completions and completions, Anthropic's Messages, OpenAI's Responses) share
one request life: each reads its body into the common request and spells the answer its own
way; everything between is written once. The modules, from the socket to the engine:

- ``app.py``: the route table: each route's handler, and the API whose error format it answers in.
- ``bodies.py``: reading any body alike: the key, size and depth limits, the pydantic check as a 400.
- ``schemas.py``: the OpenAI request bodies (pydantic), the fields refused, ``response_format`` as a constraint.
- ``completions_api.py``: ``/v1/chat/completions`` (the common request itself) and ``/v1/completions``
  (its own prompt path).
- ``messages_api.py``: Anthropic's Messages body translated into the common request; ``count_tokens``.
- ``responses_api.py``: OpenAI's Responses body translated into the common request; the stored responses.
- ``status_api.py``: ``/v1/models``, ``/health`` and ``/metrics``, which never touch the engine.
- ``lifecycle.py``: a request's life for every API: prepare off the event loop, submit, answer whole or
  drive the stream, record the end.
- ``generation.py``: a request made ready (``Ready``) and in flight (``Generation``): its events read back, a cancel.
- ``wire.py``: the ``Wire`` protocol each API's format implements, and what they share (call ids, the
  chat message, ``specdec``'s figures).
- ``openai_out.py``: Chat Completions and completions, whole and as chunks (``ChatWire``, ``CompletionWire``).
- ``messages_out.py``: Anthropic's message and stream events (``MessagesWire``).
- ``responses_out.py``: the Responses object and its typed stream events (``ResponsesWire``).
- ``api_error.py``: a request refused or failed, in OpenAI's or Anthropic's error object.
- ``events.py``: what the engine thread tells a request, as types (``Text``, ``Logprobs``, ``Done``, ``Failed``).
- ``worker.py``: the loop that owns llama.cpp, on the main thread: takes ``Work``, steps the scheduler,
  answers on each ``Handle``.
- ``metrics.py``: ``/metrics`` in Prometheus text.
- ``request_log.py``: one line on stderr per request, when its response has ended.

It may use ``engine``, ``toolcalls``, ``models``, ``terminal`` and the shared modules; ``commands`` use it.
"""
