"""An error response: what went wrong, in OpenAI's shape, naming the field at fault."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An error response: its HTTP status, message, the field at fault and OpenAI's error type."""

    def __init__(
        self, status: int, message: str, param: str | None = None, kind: str = "invalid_request_error"
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.kind = status, message, param, kind

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": None}}


def internal(exc: BaseException) -> ApiError:
    """The answer to a failure no handler expected: its type only (the log has the message)."""
    return ApiError(500, f"internal error: {type(exc).__name__}", kind="server_error")


def bad(param: str, problem: str) -> ApiError:
    return ApiError(400, f"{param}: {problem}", param)
