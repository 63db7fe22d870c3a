"""The HTTP side: Starlette routes over one loaded engine, answered in OpenAI's shapes."""

from __future__ import annotations

import secrets
import time
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
from localspec.server.api_error import ApiError, bad
from localspec.server.delivery import Choices, Delivery, error
from localspec.server.internal_error import InternalErrors, log_error, log_line
from localspec.server.logprobs import Gathered, Shaper
from localspec.server.metrics import Metrics
from localspec.server.protocol import ApiRequest, parse_request
from localspec.server.request_body import DEFAULT_MAX_BODY, read_body
from localspec.server.request_log import RequestLog
from localspec.server.responses import Reply, ToolReading
from localspec.server.scheduler import Scheduler
from localspec.server.tool_request import tool_plan
from localspec.session.generation import generation_config
from localspec.session.loader import Loaded
from localspec.session.prompt import (
    prompt_tokens,
    render_chat,
    template_of,
    tokenize_rendered,
    tokens_in_prefix,
)
from localspec.session.simulated import simulated_seconds
from localspec.session.tool_format import for_template


@dataclass
class ServeConfig:
    settings: Settings  # what requests start from (serve's flags over the usual defaults)
    # What /v1/models lists and replies name. A request's `model` may name anything: one model is
    # served, and clients send whatever name they were configured with (as llama-server allows).
    model_id: str
    api_key: str | None = None
    cors: tuple[str, ...] = ()
    max_queue: int = 16
    max_body: int = DEFAULT_MAX_BODY
    log_format: str = "text"
    cost_profile: str | None = None  # the profile's name where passes are charged by one (--cost-profile)
    created: int = field(default_factory=lambda: int(time.time()))


class Server:
    def __init__(self, loaded: Loaded, config: ServeConfig) -> None:
        self.loaded, self.config = loaded, config
        self.metrics = Metrics(simulated=config.cost_profile is not None)
        self.scheduler = Scheduler(loaded, config.max_queue, on_error=log_error)
        self.delivery = Delivery(self.scheduler, self.metrics, config.max_queue)

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
            middleware.append(
                Middleware(
                    CORSMiddleware,
                    allow_origins=list(self.config.cors),
                    allow_methods=["*"],
                    allow_headers=["*"],
                )
            )
        middleware.append(Middleware(InternalErrors, on_error=self.metrics.requests.labels("error").inc))
        handlers = {ApiError: self._api_error, HTTPException: self._http_error}
        return Starlette(routes=routes, middleware=middleware, exception_handlers=handlers)  # type: ignore[arg-type]

    # --- small endpoints -------------------------------------------------------------------
    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def models(self, request: Request) -> Response:
        self._authorize(request)
        model = {
            "id": self.config.model_id,
            "object": "model",
            "created": self.config.created,
            "owned_by": "localspec",
        }
        return JSONResponse({"object": "list", "data": [model]})

    async def prometheus(self, request: Request) -> Response:
        self._authorize(request)
        self.metrics.waiting.set(self.scheduler.waiting)
        self.metrics.running.set(self.scheduler.generating)
        if self.loaded.lockstep is not None:
            for lanes, count in sorted(self.loaded.lockstep.passes_of(self.loaded.target).lanes.items()):
                self.metrics.passes.labels(str(lanes)).set(count)
        if self.metrics.simulated is not None:
            self.metrics.simulated.set(simulated_seconds(self.loaded))
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
            body, replaced = await read_body(request, self.config.max_body)
            if replaced:
                log_line(
                    f"{replaced} text(s) of a request held lone surrogates (not Unicode): replaced with "
                    "U+FFFD"
                )
            req = parse_request(body, chat)
            fmt, values = (
                tool_plan(req.tools, template_of(self.loaded.target), req.values)
                if chat
                else ("", req.values)
            )
            tokens = await run_in_threadpool(self._tokens, req, fmt)
            room = self.loaded.n_ctx - len(tokens)
            # A request that names no limit may fill the context (OpenAI's and llama-server's default).
            config = generation_config(
                self._settings({"max_tokens": min(self.config.settings.max_tokens, room), **values})
            )
        except ApiError as e:
            self.metrics.requests.labels("bad_request" if e.status < 500 else "error").inc()
            return error(e)
        target = self.loaded.target
        reading = ToolReading(fmt, frozenset(t.name for t in req.tools.tools)) if req.tools else None
        shaper = Shaper(target.piece) if req.logprobs is not None else None
        choices = Choices(
            tokens,
            replace(config, logprobs=req.logprobs),
            Reply(chat, self.config.model_id, reading),
            lambda: Gathered(shaper, chat, target.is_eog),
            req.n,
            req.include_usage,
        )
        job = choices.job(0, arrived)
        refused = await self.delivery.begin(job, request)
        if refused is not None:
            return refused
        waited = {"X-Queue-Ms": f"{job.queue_ms:.0f}"}
        if req.stream:
            stream = self.delivery.stream(choices, job, request)
            return StreamingResponse(
                stream, media_type="text/event-stream", headers={"Cache-Control": "no-cache", **waited}
            )
        return await self.delivery.whole(choices, job, request, waited)

    # --- request checks ----------------------------------------------------------------------
    def _authorize(self, request: Request) -> None:
        key = self.config.api_key
        if key is None:
            return
        given = request.headers.get("authorization", "")
        if not given.lower().startswith("bearer ") or not secrets.compare_digest(
            given[7:].strip().encode(), key.encode()
        ):
            raise ApiError(
                401, "missing or wrong API key (send Authorization: Bearer KEY)", kind="authentication_error"
            )

    def _settings(self, values: dict[str, Any]) -> Settings:
        try:
            return self.config.settings.merged(repeatable(values))
        except SettingError as e:
            raise ApiError(
                400, e.worded(lambda n: FIELDS[n].api or n), FIELDS[e.name].api or e.name
            ) from None

    def _tokens(self, req: ApiRequest, fmt: str) -> list[int]:
        target = self.loaded.target
        where = "messages" if req.chat else "prompt"
        if req.chat:
            messages, tools = for_template(req.messages, req.tools, fmt)
            text = self._fitting(render_chat(target, messages, tools), where)
            tokens = tokenize_rendered(target, text)
        elif isinstance(req.prompt, str):
            tokens = prompt_tokens(target, self._fitting(req.prompt, where), raw=True)
        else:
            tokens = req.prompt
            wrong = next((t for t in tokens if t >= target.n_vocab), None)
            if wrong is not None:
                raise bad(
                    "prompt", f"token id {wrong} is not in the model's vocabulary ({target.n_vocab} ids)"
                )
        n_ctx = self.loaded.n_ctx
        if len(tokens) >= n_ctx:
            raise bad(
                where,
                f"the prompt is {len(tokens)} tokens, the context holds {n_ctx} (start the server "
                "with a larger --ctx)",
            )
        return tokens

    def _fitting(self, text: str, where: str) -> str:
        n_ctx = self.loaded.n_ctx
        if tokens_in_prefix(self.loaded.target, text) >= n_ctx:
            raise bad(
                where,
                f"the prompt is over {n_ctx} tokens ({len(text):,} characters), the context holds {n_ctx} "
                "(start the server with a larger --ctx)",
            )
        return text

    # --- errors --------------------------------------------------------------------------------
    async def _http_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return error(
            ApiError(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}", kind=kind)
        )

    async def _api_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return error(exc)
