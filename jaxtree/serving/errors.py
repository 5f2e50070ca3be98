"""ApiError: an error answered in OpenAI's shape, {"error": {"message", "type", "param", "code"}}.

Statuses the server answers with: 400 for malformed JSON, missing or mistyped fields and values
out of range (`param` names the field) and for a prompt that fills the context; 404 for an
unknown path, 405 for a wrong method, 411 for a body without a Content-Length, 413 for one over
`max_request_bytes`; 500 when a generation fails (the worker answers that batch's requests and
keeps serving); 503 for requests still queued when the server stops.

    raise ApiError(400, "'n' must be an integer in [1, 16]; got 0", "n")
    ...
    except ApiError as e:
        status, payload = e.status, e.body()
"""

from __future__ import annotations


class ApiError(Exception):
    """An error answered in OpenAI's shape: HTTP `status`, the message, the offending field."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 code: str | None = None, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.kind = kind

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param,
                          "code": self.code}}
