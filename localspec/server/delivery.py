"""A request's generations delivered: each job's events read into a whole reply or a stream of
server-sent events, its `n` choices one after the other; a client that leaves cancels its job."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from localspec.engine.events import DoneEvent, GenerationStats, PromptEvent, TokenEvent
from localspec.engine.generation import GenerationConfig
from localspec.server.api_error import ApiError
from localspec.server.logprobs import Gathered
from localspec.server.metrics import Metrics
from localspec.server.request_log import note_generation
from localspec.server.responses import Reply, sse, timings
from localspec.server.scheduler import Job, QueueFull, Scheduler, ShuttingDown

DISCONNECT_POLL_S = 0.05  # how often a waiting request checks that its client is still there
RETRY_AFTER_S = 2
CLOSING = ApiError(503, "the server is shutting down", kind="server_busy")
# A generation still running when the shutdown grace period ends is cancelled, and answered so.
SHUT_DOWN = ApiError(503, "the generation was cancelled: the server is shutting down", kind="server_busy")


def error(e: ApiError, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status, headers=headers)


@dataclass
class Choices:
    """A request's n generations: the i-th shaped by its own reply and logprobs, and (seeded)
    drawn with seed + i, so that the choices differ and a seed repeats them all."""

    tokens: list[int]
    config: GenerationConfig
    reply: Reply
    scores: Callable[[], Gathered]
    n: int = 1
    include_usage: bool = False

    def job(self, i: int, arrived: float | None = None) -> Job:
        config = (
            self.config
            if self.config.seed is None or i == 0
            else replace(self.config, seed=(self.config.seed + i) % 2**64)
        )
        return Job(self.tokens, config, asyncio.get_running_loop(), arrived=arrived or time.perf_counter())

    def reply_for(self, i: int) -> Reply:
        return replace(self.reply, index=i)


@dataclass
class Outcome:
    done: DoneEvent | None = None  # how a streamed choice ended (None: it failed)


def combined(all_stats: list[GenerationStats]) -> GenerationStats:
    """The choices' counts together (one prompt, evaluated once)."""
    total = lambda key: sum(getattr(s, key) for s in all_stats)  # noqa: E731
    counts = ("n_generated", "n_drafted", "n_accepted", "n_steps", "n_steps_drafted", "elapsed_s")
    return replace(all_stats[0], **{key: total(key) for key in counts})


class Delivery:
    def __init__(self, scheduler: Scheduler, metrics: Metrics, max_queue: int) -> None:
        self.scheduler, self.metrics, self.max_queue = scheduler, metrics, max_queue

    def _submit(self, job: Job) -> Response | None:
        """Queue a job; the error response when it cannot be."""
        try:
            self.scheduler.submit(job)
        except QueueFull:
            self.metrics.requests.labels("rejected").inc()
            busy = ApiError(
                503, f"the server is busy: {self.max_queue} requests are already waiting", kind="server_busy"
            )
            return error(busy, {"Retry-After": str(RETRY_AFTER_S)})
        except ShuttingDown:
            self.metrics.requests.labels("rejected").inc()
            return error(CLOSING)
        return None

    async def begin(self, job: Job, request: Request) -> Response | None:
        """Queue a job and wait for its prompt to be taken; the response when it never starts."""
        return self._submit(job) or await self._started(job, request)

    async def _started(self, job: Job, request: Request) -> Response | None:
        first = await self.next(job, request)
        if isinstance(first, PromptEvent):
            return None
        if first is None:  # the client left while its request waited
            return Response(status_code=499)
        if isinstance(first, ShuttingDown):
            self.metrics.requests.labels("rejected").inc()
            return error(CLOSING)
        assert isinstance(first, ApiError)
        self.metrics.requests.labels("bad_request" if first.status < 500 else "error").inc()
        return error(first)

    async def whole(self, choices: Choices, job: Job, request: Request, headers: dict[str, str]) -> Response:
        """One JSON reply with every choice (the first's job already started)."""
        bodies, all_stats, queue_ms, arrived = [], [], job.queue_ms, job.arrived
        for i in range(choices.n):
            if i > 0:
                job = choices.job(i)
                refused = await self.begin(job, request)
                if refused is not None:
                    return refused
            scores = choices.scores()
            ev = await self._one(job, request, scores)
            if isinstance(ev, Response):
                return ev
            bodies.append(
                choices.reply_for(i).whole(ev.text, ev.stop_reason, ev.stats, queue_ms, scores.take())
            )
            all_stats.append(ev.stats)
        stats = combined(all_stats)
        self._finished(request, stats, queue_ms, arrived)
        return JSONResponse(choices.reply.merged(bodies, stats, queue_ms), headers=headers)

    async def _one(self, job: Job, request: Request, scores: Gathered) -> DoneEvent | Response:
        """A choice's events gathered to its end, or the response it failed with."""
        first_token = True
        while True:
            ev = await self.next(job, request)
            if ev is None:
                return Response(status_code=499)
            if isinstance(ev, TokenEvent):
                scores.add(ev.token, ev.logprob)
                if first_token:
                    first_token = False
                    self.metrics.ttft.observe(time.perf_counter() - job.arrived)
            elif isinstance(ev, ApiError):
                self.metrics.requests.labels("error").inc()
                return error(ev)
            elif isinstance(ev, DoneEvent):
                if ev.stop_reason == "interrupted":
                    self.metrics.requests.labels("cancelled").inc()
                    return error(SHUT_DOWN)
                return ev

    async def stream(self, choices: Choices, job: Job, request: Request) -> AsyncIterator[bytes]:
        """Server-sent events: per choice a role chunk, a chunk per piece of text, the last with its
        finish reason; (with include_usage) one with usage and no choices; then [DONE]. The last
        chunk carries llama-server's timings. A client that disconnects cancels the generation."""
        all_stats, queue_ms, arrived, live = [], job.queue_ms, job.arrived, job
        try:
            for i in range(choices.n):
                if i > 0:
                    live = job = choices.job(i)
                    refused = await self.begin(job, request)
                    if refused is not None:
                        live = None
                        if isinstance(refused, JSONResponse):  # not a client that left
                            yield sse(bytes(refused.body).decode())
                            yield sse("[DONE]")
                        return
                reply, scores, outcome = choices.reply_for(i), choices.scores(), Outcome()
                async for piece in self._pieces(job, reply, scores, outcome):
                    yield piece
                live, done = None, outcome.done
                if done is None:
                    return  # failed: the error event and [DONE] are sent
                all_stats.append(done.stats)
                chunks = reply.ending(done.tail, done.stop_reason, scores.take() if scores.pending else None)
                if i < choices.n - 1:
                    for chunk in chunks:
                        yield sse(chunk)
            stats = combined(all_stats)
            usage_chunk = choices.reply.usage_chunk(stats) if choices.include_usage else None
            (usage_chunk or chunks[-1])["timings"] = timings(stats, queue_ms)
            self._finished(request, stats, queue_ms, arrived)
            for chunk in [*chunks, *([usage_chunk] if usage_chunk else [])]:
                yield sse(chunk)
            yield sse("[DONE]")
        finally:
            if live is not None:  # the client went away (the response was cancelled)
                self._leave(live)

    async def _pieces(
        self, job: Job, reply: Reply, scores: Gathered, outcome: Outcome
    ) -> AsyncIterator[bytes]:
        """One choice's events as they come: its text in chunks, or an error event and [DONE].
        Its last chunks wait (the last choice's carries the timings): `outcome` gets its end."""
        yield sse(reply.chunk(first=True))
        first_token = True
        while True:
            ev = await job.events.get()
            if isinstance(ev, TokenEvent):
                scores.add(ev.token, ev.logprob)
                if first_token:
                    first_token = False
                    self.metrics.ttft.observe(time.perf_counter() - job.arrived)
                text = reply.content(ev.text) if ev.text else ""
                if text:  # with the logprobs of the tokens whose text it releases
                    yield sse(reply.chunk(text, logprobs=scores.take()))
            elif isinstance(ev, ApiError) or (isinstance(ev, DoneEvent) and ev.stop_reason == "interrupted"):
                failed = ev if isinstance(ev, ApiError) else SHUT_DOWN
                self.metrics.requests.labels("error" if failed is ev else "cancelled").inc()
                yield sse(failed.body())
                yield sse("[DONE]")
                return
            elif isinstance(ev, DoneEvent):
                outcome.done = ev
                return

    async def next(self, job: Job, request: Request) -> object:
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

    def _finished(self, request: Request, stats: GenerationStats, queue_ms: float, arrived: float) -> None:
        note_generation(request.state, stats, queue_ms)
        self.metrics.finished(stats)
        self.metrics.latency.observe(time.perf_counter() - arrived)
        self.metrics.requests.labels("ok").inc()
