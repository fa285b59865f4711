"""Reading a request body the same way on every route: the key (``Authorization: Bearer`` as
OpenAI's clients send it, ``x-api-key`` as Anthropic's do), the size, the JSON and how deep it
nests, then the route's pydantic model and the fields it knows but cannot honour. Every
failure is an ``ApiError`` (401, 413 or 400) raised before the model is touched. What pydantic
finds wrong becomes a 400 one way only (``validated``), for a client's body and for the chat
request a Messages or Responses body is translated into: whichever API a client speaks, the
error names the field to fix."""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from typing import TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from .api_error import ApiError
from .schemas import RequestBody

MAX_BODY = 8 * 1024 * 1024  # bytes of a request body
MAX_DEPTH = 64  # JSON nesting of a body: far past any real request, far short of Python's recursion limit

B = TypeVar("B", bound=RequestBody)
M = TypeVar("M", bound=BaseModel)


def check_key(request: Request, api_key: str | None) -> None:
    if not api_key:
        return  # no key set: any key (or none) is accepted
    given = request.headers.get("authorization", "")
    token = given[7:] if given.lower().startswith("bearer ") else request.headers.get("x-api-key", "")
    if not secrets.compare_digest(token.encode(), api_key.encode()):
        raise ApiError(401, "invalid or missing API key (send Authorization: Bearer KEY, or x-api-key: KEY)",
                       kind="authentication_error")


async def read_body(request: Request, model_cls: type[B], api_key: str | None) -> B:
    """The checked body of ``request`` as ``model_cls``."""
    check_key(request, api_key)
    size = request.headers.get("content-length")
    if size is not None and size.isdigit() and int(size) > MAX_BODY:
        raise ApiError(413, f"request body over {MAX_BODY // (1024 * 1024)} MiB")
    raw = await request.body()
    if len(raw) > MAX_BODY:
        raise ApiError(413, f"request body over {MAX_BODY // (1024 * 1024)} MiB")
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"the body is not valid JSON ({exc})") from None
    except RecursionError:
        data = None
    if data is None or depth(data) > MAX_DEPTH:
        raise ApiError(400, f"the body nests JSON more than {MAX_DEPTH} levels deep")
    if not isinstance(data, dict):
        raise ApiError(400, "the body must be a JSON object")
    body = validated(model_cls, data)
    refused = body.unsupported()
    if refused is not None:
        raise ApiError(400, refused[1], param=refused[0])
    return body


def validated(model_cls: type[M], data: dict, names: Mapping[str, str] | None = None) -> M:
    """``data`` as ``model_cls``; the first thing pydantic finds wrong as a 400 naming its top-level
    field as ``param``. The one mapping for every body: a client's own, and the chat request
    that Messages and Responses bodies are translated into, whose fields ``names`` renames to
    what the client sent (a Messages client sent ``stop_sequences``, not the chat's ``stop``)."""
    try:
        return model_cls.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = [p for p in err["loc"] if not isinstance(p, str) or p not in ("str", "list[str]")]
        if loc and names:
            loc[0] = names.get(str(loc[0]), loc[0])
        where = ".".join(str(p) for p in loc)
        param = str(loc[0]) if loc else None
        raise ApiError(400, f"{where}: {err['msg']}" if where else err["msg"], param=param) from None


def depth(value, limit: int = MAX_DEPTH) -> int:
    """How deep ``value`` nests lists and objects (counted without recursion, up to past ``limit``)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        v, d = todo.pop()
        if isinstance(v, (dict, list)):
            deepest = max(deepest, d)
            if deepest > limit:
                return deepest
            todo.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest
