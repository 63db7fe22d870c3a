"""The HTTP side: Starlette routes over one loaded engine, answered in OpenAI's shapes."""

from __future__ import annotations

import asyncio
import json
import secrets
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from localspec.config.settings import FIELDS, SettingError, Settings, repeatable
from localspec.engine.events import DoneEvent, GenerationStats, PromptEvent, TokenEvent
from localspec.server.logprobs import Gathered, Shaper
from localspec.server.metrics import Metrics
from localspec.server.protocol import ApiError, ApiRequest, bad, parse_request
from localspec.server.request_log import RequestLog, note_generation
from localspec.server.responses import FINISH_REASONS, Reply, sse, timings
from localspec.server.scheduler import Job, QueueFull, Scheduler, ShuttingDown
from localspec.session.generation import generation_config
from localspec.session.loader import Loaded
from localspec.session.prompt import prompt_tokens, render_chat, tokenize_rendered

DISCONNECT_POLL_S = 0.05  # how often a waiting request checks that its client is still there
RETRY_AFTER_S = 2
CLOSING = ApiError(503, "the server is shutting down", kind="server_busy")
# A generation still running when the shutdown grace period ends is cancelled, and answered so.
SHUT_DOWN = ApiError(503, "the generation was cancelled: the server is shutting down", kind="server_busy")


@dataclass
class ServeConfig:
    settings: Settings  # what requests start from (serve's flags over the usual defaults)
    # What /v1/models lists and replies name. A request's `model` may name anything: one model is
    # served, and clients send whatever name they were configured with (as llama-server allows).
    model_id: str
    api_key: str | None = None
    cors: tuple[str, ...] = ()
    max_queue: int = 16
    log_format: str = "text"
    created: int = field(default_factory=lambda: int(time.time()))


def error(e: ApiError, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status, headers=headers)


class Server:
    def __init__(self, loaded: Loaded, config: ServeConfig) -> None:
        self.loaded, self.config = loaded, config
        self.metrics = Metrics()
        self.scheduler = Scheduler(loaded, config.max_queue, on_error=_log_error)

    def app(self) -> Starlette:
        routes = [
            Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/health", self.health, methods=["GET"]),
            Route("/metrics", self.prometheus, methods=["GET"]),
        ]
        middleware = [Middleware(RequestLog, fmt=self.config.log_format)]
        if self.config.cors:
            middleware.append(Middleware(CORSMiddleware, allow_origins=list(self.config.cors), allow_methods=["*"], allow_headers=["*"]))
        handlers = {ApiError: self._api_error, HTTPException: self._http_error, Exception: self._internal_error}
        return Starlette(routes=routes, middleware=middleware, exception_handlers=handlers)  # type: ignore[arg-type]

    # --- small endpoints -------------------------------------------------------------------
    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def models(self, request: Request) -> Response:
        self._authorize(request)
        model = {"id": self.config.model_id, "object": "model", "created": self.config.created, "owned_by": "localspec"}
        return JSONResponse({"object": "list", "data": [model]})

    async def prometheus(self, request: Request) -> Response:
        self._authorize(request)
        self.metrics.waiting.set(self.scheduler.waiting)
        return Response(self.metrics.text(), media_type="text/plain; version=0.0.4; charset=utf-8")

    # --- completions -----------------------------------------------------------------------
    async def chat_completions(self, request: Request) -> Response:
        return await self._complete(request, chat=True)

    async def completions(self, request: Request) -> Response:
        return await self._complete(request, chat=False)

    async def _complete(self, request: Request, chat: bool) -> Response:
        arrived = time.perf_counter()
        try:
            self._authorize(request)
            try:
                body = json.loads(await request.body())
            except (ValueError, UnicodeDecodeError) as e:
                raise ApiError(400, f"the request body is not valid JSON: {e}") from None
            req = parse_request(body, chat)
            tokens = await run_in_threadpool(self._tokens, req)
            room = self.loaded.target.n_ctx - len(tokens)
            # A request that names no limit may fill the context (OpenAI's and llama-server's default).
            config = generation_config(self._settings({"max_tokens": min(self.config.settings.max_tokens, room), **req.values}))
            config = replace(config, logprobs=req.logprobs)
            job = Job(tokens, config, asyncio.get_running_loop(), arrived=arrived)
            try:
                self.scheduler.submit(job)
            except QueueFull:
                self.metrics.requests.labels("rejected").inc()
                busy = ApiError(503, f"the server is busy: {self.config.max_queue} requests are already waiting", kind="server_busy")
                return error(busy, {"Retry-After": str(RETRY_AFTER_S)})
            except ShuttingDown:
                self.metrics.requests.labels("rejected").inc()
                return error(CLOSING)
        except ApiError as e:
            self.metrics.requests.labels("bad_request" if e.status < 500 else "error").inc()
            return error(e)
        reply, target = Reply(chat, self.config.model_id), self.loaded.target
        scores = Gathered(Shaper(target.piece) if req.logprobs is not None else None, chat, target.is_eog)
        first = await self._next(job, request)
        if not isinstance(first, PromptEvent):
            return self._not_started(job, first)
        waited = {"X-Queue-Ms": f"{job.queue_ms:.0f}"}
        if req.stream:
            stream = self._stream(job, request, reply, scores, req.include_usage)
            return StreamingResponse(stream, media_type="text/event-stream", headers={"Cache-Control": "no-cache", **waited})
        return await self._whole(job, request, reply, scores, waited)

    def _not_started(self, job: Job, first: object) -> Response:
        if first is None:  # the client left while its request waited
            return Response(status_code=499)
        if isinstance(first, ShuttingDown):
            self.metrics.requests.labels("rejected").inc()
            return error(CLOSING)
        assert isinstance(first, ApiError)
        self.metrics.requests.labels("bad_request" if first.status < 500 else "error").inc()
        return error(first)

    async def _whole(self, job: Job, request: Request, reply: Reply, scores: Gathered, headers: dict[str, str]) -> Response:
        first_token = None
        while True:
            ev = await self._next(job, request)
            if ev is None:
                return Response(status_code=499)
            if isinstance(ev, TokenEvent):
                scores.add(ev.token, ev.logprob)
                if first_token is None:
                    first_token = time.perf_counter()
                    self.metrics.ttft.observe(first_token - job.arrived)
            elif isinstance(ev, ApiError):
                self.metrics.requests.labels("error").inc()
                return error(ev)
            elif isinstance(ev, DoneEvent):
                if ev.stop_reason == "interrupted":
                    self.metrics.requests.labels("cancelled").inc()
                    return error(SHUT_DOWN)
                self._finished(job, request, ev.stats)
                return JSONResponse(reply.whole(ev.text, ev.stop_reason, ev.stats, job.queue_ms, scores.take()), headers=headers)

    async def _stream(self, job: Job, request: Request, reply: Reply, scores: Gathered, include_usage: bool) -> AsyncIterator[bytes]:
        """Server-sent events: a role chunk, a chunk per piece of text, one with the finish reason,
        (with include_usage) one with usage and no choices, then [DONE]. The last chunk carries
        llama-server's timings. A client that disconnects cancels the generation."""
        ended = False
        try:
            yield sse(reply.chunk(first=True))
            first_token = True
            while not ended:
                ev = await job.events.get()
                if isinstance(ev, TokenEvent):
                    scores.add(ev.token, ev.logprob)
                    if first_token:
                        first_token = False
                        self.metrics.ttft.observe(time.perf_counter() - job.arrived)
                    if ev.text:  # with the logprobs of the tokens whose text it releases
                        yield sse(reply.chunk(ev.text, logprobs=scores.take()))
                elif isinstance(ev, ApiError) or (isinstance(ev, DoneEvent) and ev.stop_reason == "interrupted"):
                    ended = True
                    failed = ev if isinstance(ev, ApiError) else SHUT_DOWN
                    self.metrics.requests.labels("error" if failed is ev else "cancelled").inc()
                    yield sse(failed.body())
                    yield sse("[DONE]")
                elif isinstance(ev, DoneEvent):
                    ended = True
                    last = reply.chunk(ev.tail or None, FINISH_REASONS.get(ev.stop_reason, "stop"), logprobs=scores.take() if scores.pending else None)
                    usage_chunk = reply.usage_chunk(ev.stats) if include_usage else None
                    (usage_chunk or last)["timings"] = timings(ev.stats, job.queue_ms)
                    self._finished(job, request, ev.stats)
                    yield sse(last)
                    if usage_chunk:
                        yield sse(usage_chunk)
                    yield sse("[DONE]")
        finally:
            if not ended:  # the client went away (the response was cancelled)
                self._leave(job)

    async def _next(self, job: Job, request: Request) -> object:
        """The job's next event; None when the client went away meanwhile (the job is dropped).
        Whether the client is still there is checked every DISCONNECT_POLL_S, events or not."""
        getter = asyncio.ensure_future(job.events.get())
        try:
            while True:
                now = time.monotonic()
                if now - job.checked >= DISCONNECT_POLL_S:
                    job.checked = now
                    if await request.is_disconnected():
                        self._leave(job)
                        return None
                done, _ = await asyncio.wait({getter}, timeout=DISCONNECT_POLL_S)
                if done:
                    return getter.result()
        finally:
            if not getter.done():  # cancelled: the server is closing the connection
                getter.cancel()
                self._leave(job)

    def _leave(self, job: Job) -> None:
        if self.scheduler.leave(job):
            self.metrics.requests.labels("cancelled").inc()

    def _finished(self, job: Job, request: Request, stats: GenerationStats) -> None:
        note_generation(request.state, stats, job.queue_ms)
        self.metrics.finished(stats)
        self.metrics.latency.observe(time.perf_counter() - job.arrived)
        self.metrics.requests.labels("ok").inc()

    # --- request checks ----------------------------------------------------------------------
    def _authorize(self, request: Request) -> None:
        key = self.config.api_key
        if key is None:
            return
        given = request.headers.get("authorization", "")
        if not given.lower().startswith("bearer ") or not secrets.compare_digest(given[7:].strip().encode(), key.encode()):
            raise ApiError(401, "missing or wrong API key (send Authorization: Bearer KEY)", kind="authentication_error")

    def _settings(self, values: dict[str, Any]) -> Settings:
        try:
            return self.config.settings.merged(repeatable(values))
        except SettingError as e:
            raise ApiError(400, e.worded(lambda n: FIELDS[n].api or n), FIELDS[e.name].api or e.name) from None

    def _tokens(self, req: ApiRequest) -> list[int]:
        target = self.loaded.target
        where = "messages" if req.chat else "prompt"
        if req.chat:
            tokens = tokenize_rendered(target, render_chat(target, req.messages))
        elif isinstance(req.prompt, str):
            tokens = prompt_tokens(target, req.prompt, raw=True)
        else:
            tokens = req.prompt
            wrong = next((t for t in tokens if t >= target.n_vocab), None)
            if wrong is not None:
                raise bad("prompt", f"token id {wrong} is not in the model's vocabulary ({target.n_vocab} ids)")
        if len(tokens) >= target.n_ctx:
            raise bad(where, f"the prompt is {len(tokens)} tokens, the context holds {target.n_ctx} (start the server with a larger --ctx)")
        return tokens

    # --- errors --------------------------------------------------------------------------------
    async def _http_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return error(ApiError(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}", kind=kind))

    async def _api_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return error(exc)

    async def _internal_error(self, request: Request, exc: Exception) -> Response:
        _log_error(exc)
        self.metrics.requests.labels("error").inc()
        return error(ApiError(500, f"internal error: {type(exc).__name__}", kind="server_error"))


def _log_error(exc: BaseException) -> None:
    print(f"localspec serve: internal error: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
