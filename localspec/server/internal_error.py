"""The answer to an exception no handler expected: a 500 in OpenAI's shape and one line in the log.

Starlette's own last-resort handler answers and then re-raises, and uvicorn logs the re-raised
exception as a 40-line traceback: a client could fill the log by sending what trips a bug."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

from localspec.server.api_error import internal
from localspec.server.request_log import App, Message, Receive, Scope, Send


class InternalErrors:
    """ASGI middleware; `on_error` counts what it caught."""

    def __init__(self, app: App, on_error: Callable[[], None] | None = None) -> None:
        self.app, self.on_error = app, on_error

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started, ended = [False], [False]

        async def sending(message: Message) -> None:
            started[0] |= message["type"] == "http.response.start"
            ended[0] |= message["type"] == "http.response.body" and not message.get("more_body", False)
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception as exc:  # noqa: BLE001 - every unexpected error ends here, as one line
            log_error(exc)
            if self.on_error is not None:
                self.on_error()
            if scope["type"] != "http" or ended[0]:
                return
            if started[0]:  # a stream already under way ends where it is
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                return
            body = json.dumps(internal(exc).body()).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 500,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})


def log_error(exc: BaseException) -> None:
    log_line(f"internal error: {type(exc).__name__}: {exc}")


def log_line(message: str) -> None:
    print(f"localspec serve: {message}", file=sys.stderr, flush=True)
