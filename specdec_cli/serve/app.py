"""The HTTP app of ``specdec serve``: every route, the API it speaks, and its error format.

The table below is the whole server's surface. A generating route's handler lives with its API
(``completions_api.py``, ``messages_api.py``, ``responses_api.py``), which reads its body into
the common request; the request's life from there is the same for all (``lifecycle.py``). An
``ApiError`` raised anywhere in a handler (a bad body, a full queue, a failed generation) is
answered in the route's API's error format: OpenAI's object on the OpenAI routes, Anthropic's on
``/v1/messages``. Starlette and uvicorn, as llama-cpp-python's own server uses, do the HTTP.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .api_error import ApiError
from .completions_api import CompletionsApi
from .lifecycle import Handler, ServeContext, endpoint
from .messages_api import MessagesApi
from .messages_out import MessagesWire
from .openai_out import ChatWire, CompletionWire
from .request_log import RequestLog
from .responses_api import ResponsesApi
from .responses_out import ResponsesWire
from .status_api import StatusApi

if TYPE_CHECKING:
    from ..engine.options import GenOptions
    from ..toolcalls.turn import ChatPrompter
    from .metrics import Metrics
    from .schemas import ChatRequest, CompletionRequest
    from .worker import Worker


def create_app(worker: Worker, *, model: str, api_key: str | None,
               make_gen: Callable[[ChatRequest | CompletionRequest], GenOptions], metrics: Metrics,
               prompter: ChatPrompter, log: bool = True) -> Starlette:
    """``make_gen(body) -> GenOptions``: the generation settings of a checked request; ``prompter``:
    the loaded target's ``ChatPrompter``; ``log``: a line on stderr per request."""
    ctx = ServeContext(worker, metrics, prompter, make_gen, model, api_key)
    completions, messages, responses, status = CompletionsApi(ctx), MessagesApi(ctx), ResponsesApi(ctx), StatusApi(ctx)
    return Starlette(routes=[
        # method, path, handler, how its errors are spelled
        _route("POST", "/v1/chat/completions", completions.chat, ChatWire.error_response),
        _route("POST", "/v1/completions", completions.completions, CompletionWire.error_response),
        _route("POST", "/v1/messages", messages.create, MessagesWire.error_response),
        _route("POST", "/v1/messages/count_tokens", messages.count_tokens, MessagesWire.error_response),
        _route("POST", "/v1/responses", responses.create, ResponsesWire.error_response),
        _route("GET", "/v1/responses/{rid}", responses.retrieve, ResponsesWire.error_response),
        _route("GET", "/v1/models", status.models, ApiError.response),
        _plain("/health", status.health),
        _plain("/metrics", status.prometheus),
    ], middleware=[Middleware(RequestLog)] if log else [])


def _route(method: str, path: str, handler: Handler, error_response: Callable[[ApiError], Response]) -> Route:
    return Route(path, endpoint(handler, error_response), methods=[method])


def _plain(path: str, handler: Callable[[Request], Awaitable[Response]]) -> Route:
    """A GET route that refuses nothing (no key, no body)."""
    return Route(path, handler, methods=["GET"])
