"""One line on stderr per request, once its response has been sent: method, path, status, time, and
for a generation its tokens, speed, drafts, how long it waited behind others and how many requests
its passes were shared with on average (`--log-format
json`: one JSON object a line, for machines)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from localspec.engine.events import GenerationStats

LOG_FORMATS = ("text", "json")
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


def note_generation(state: Any, stats: GenerationStats, queue_ms: float) -> None:
    """What a handler tells the log of its request (`request.state`)."""
    state.generation, state.queue_ms = stats, queue_ms


def fields(
    method: str, path: str, status: int, seconds: float, state: MutableMapping[str, Any]
) -> dict[str, Any]:
    out: dict[str, Any] = {"method": method, "path": path, "status": status, "seconds": round(seconds, 3)}
    stats = state.get("generation")
    if isinstance(stats, GenerationStats):
        out |= {
            "prompt_tokens": stats.n_prompt,
            "completion_tokens": stats.n_generated,
            "tokens_per_second": round(stats.tokens_per_second, 1),
            "drafted": stats.n_drafted,
            "accepted": stats.n_accepted,
            "queue_ms": round(state.get("queue_ms", 0.0)),
            "batch": round(stats.batch, 2),
        }
    return out


def line(f: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(f)
    text = f"{f['method']} {f['path']} {f['status']} {f['seconds']:.2f} s"
    if "completion_tokens" in f:
        text += (
            f" · {f['prompt_tokens']} prompt + {f['completion_tokens']} tokens, "
            f"{f['tokens_per_second']:.1f} tok/s"
            f" · drafted {f['drafted']}, accepted {f['accepted']} · queued {f['queue_ms']} ms"
        )
        if f["batch"] > 1:
            text += f" · batch {f['batch']:.1f}"
    return text


class RequestLog:
    """ASGI middleware: the status is taken from the response as sent, so every answer is logged,
    the router's 404s and the exception handlers' answers included."""

    def __init__(self, app: App, fmt: str = "text") -> None:
        self.app, self.fmt = app, fmt

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status = time.perf_counter(), [499]  # no response started: the client went away
        state = scope.setdefault("state", {})  # what the handler's request.state writes to

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            f = fields(scope["method"], scope["path"], status[0], time.perf_counter() - start, state)
            print(
                f"localspec serve: {line(f, self.fmt)}" if self.fmt == "text" else line(f, self.fmt),
                file=sys.stderr,
                flush=True,
            )
