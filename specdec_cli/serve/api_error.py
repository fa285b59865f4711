"""A request the server will not run, or could not finish, and how each API spells that: OpenAI's
error object on the OpenAI routes, Anthropic's on ``/v1/messages``. Raised wherever a request
is checked, submitted or answered whole, by code that need not know which API it serves; the
route catches it (``lifecycle.endpoint``) and answers in its API's format (``Wire.error_response``)."""

from __future__ import annotations

from starlette.responses import JSONResponse

# Anthropic's error types by HTTP status (its API reference, "Errors")
_ANTHROPIC_KINDS = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                    404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
                    500: "api_error", 503: "overloaded_error", 529: "overloaded_error"}


class ApiError(Exception):
    def __init__(self, status: int, message: str, *, kind: str = "invalid_request_error",
                 param: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.param, self.headers = status, message, kind, param, headers

    def response(self) -> JSONResponse:
        """OpenAI's shape (Chat Completions, completions, Responses)."""
        body = {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": None}}
        return JSONResponse(body, status_code=self.status, headers=self.headers)

    def anthropic(self) -> JSONResponse:
        """Anthropic's shape (Messages)."""
        kind = _ANTHROPIC_KINDS.get(self.status, "invalid_request_error" if self.status < 500 else "api_error")
        message = f"{self.param}: {self.message}" if self.param and not self.message.startswith(self.param) \
            else self.message
        return JSONResponse({"type": "error", "error": {"type": kind, "message": message}},
                            status_code=self.status, headers=self.headers)
