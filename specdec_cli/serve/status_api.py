"""``GET /v1/models``, ``/health`` and ``/metrics``: what the server serves, whether it is serving,
and what it has done. None of them decodes; ``/health`` and ``/metrics`` take no key
(a load balancer and a scraper have none) and write no log line (``request_log.QUIET_PATHS``).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from .bodies import check_key
from .lifecycle import ServeContext


class StatusApi:
    """The three routes' handlers, over the server's context."""

    def __init__(self, ctx: ServeContext):
        self.ctx = ctx

    async def models(self, request: Request, arrived: float) -> Response:
        """The one model, by the name the server answers as (OpenAI's list shape)."""
        check_key(request, self.ctx.api_key)
        return JSONResponse({"object": "list", "data": [
            {"id": self.ctx.model, "object": "model", "created": self.ctx.metrics.started, "owned_by": "specdec"}]})

    async def health(self, _request: Request) -> Response:
        """200 while requests submitted now will run; 503 once the engine has stopped or failed."""
        if not self.ctx.worker.alive:
            return JSONResponse({"status": "error"}, status_code=503)
        return JSONResponse({"status": "ok"})

    async def prometheus(self, _request: Request) -> Response:
        return PlainTextResponse(self.ctx.metrics.render(self.ctx.worker), media_type="text/plain; version=0.0.4")
