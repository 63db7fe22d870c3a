"""One generation at a time, in arrival order, on a thread of its own; the HTTP side hands in jobs
and reads their events from an asyncio queue.

A job whose client left is dropped from the queue, or, when it is the one generating, stopped
within a step: the models' llama_decode calls watch the same event, so even a long prompt pass
stops. Shutting down answers the queued jobs at once and lets the running one finish (the HTTP
server cancels it when its grace period ends)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from localspec.engine.events import DoneEvent, PromptEvent, TokenEvent
from localspec.engine.speculative import GenerationConfig
from localspec.errors import LocalspecError
from localspec.server.api_error import ApiError, internal
from localspec.session.loader import Loaded


class QueueFull(Exception):
    pass


class ShuttingDown(Exception):
    pass


@dataclass(eq=False)
class Job:
    tokens: list[int]
    config: GenerationConfig
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    left: bool = False  # the client went away
    done: bool = False
    checked: float = 0.0  # when the client was last seen to be there (time.monotonic)
    arrived: float = field(default_factory=time.perf_counter)
    started: float | None = None  # when its generation began (time.perf_counter)

    @property
    def queue_ms(self) -> float:
        """How long it waited behind other requests (so far, if it still waits)."""
        return 1000 * ((self.started or time.perf_counter()) - self.arrived)

    def post(self, item: Any) -> None:
        """Hand an event (or an ApiError) to the request's coroutine, from the generation thread."""
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, item)
        except RuntimeError:  # the event loop is gone: the server is stopping
            pass


class Scheduler:
    def __init__(self, loaded: Loaded, max_queue: int, on_error: Callable[[BaseException], None]) -> None:
        self.loaded = loaded
        self.max_queue = max_queue
        self._on_error = on_error
        self._queue: deque[Job] = deque()
        self._cv = threading.Condition()
        self._current: Job | None = None
        self._stopping = False
        self._thread = threading.Thread(target=self._work, name="localspec-generation", daemon=True)
        self._thread.start()

    @property
    def waiting(self) -> int:
        return len(self._queue)

    def submit(self, job: Job) -> None:
        with self._cv:
            if self._stopping:
                raise ShuttingDown()
            if self._current is not None and len(self._queue) >= self.max_queue:
                raise QueueFull()
            self._queue.append(job)
            self._cv.notify()

    def leave(self, job: Job) -> bool:
        """The job's client went away: drop it from the queue, or stop it if it is generating.
        False when it had already ended (or left)."""
        with self._cv:
            if job.done or job.left:
                return False
            job.left = True
            if job is self._current:
                self.loaded.cancel.set()
            elif job in self._queue:
                self._queue.remove(job)
            return True

    def stop(self, grace: float | None = None) -> None:
        """Accept nothing more and answer every queued job; the running one goes on, for `grace`
        seconds if given, and is then cancelled."""
        with self._cv:
            if grace is not None and not self._stopping:
                timer = threading.Timer(grace, self.cancel_running)
                timer.daemon = True
                timer.start()
            self._stopping = True
            while self._queue:
                self._queue.popleft().post(ShuttingDown())
            self._cv.notify()

    def cancel_running(self) -> bool:
        """Stop the generation under way within a step (its client is answered); False if none runs."""
        with self._cv:
            if self._current is not None:
                self.loaded.cancel.set()
            return self._current is not None

    @property
    def running(self) -> bool:
        return self._current is not None

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _next(self) -> Job | None:
        with self._cv:
            while not self._queue and not self._stopping:
                self._cv.wait()
            if not self._queue:
                return None
            job = self._current = self._queue.popleft()
            job.started = time.perf_counter()
            self.loaded.cancel.clear()
            return job

    def _work(self) -> None:
        while (job := self._next()) is not None:
            try:
                for ev in self.loaded.engine.generate(job.tokens, job.config, self.loaded.cancel):
                    if isinstance(ev, (TokenEvent, PromptEvent, DoneEvent)):
                        job.post(ev)
            except LocalspecError as e:
                job.post(ApiError(400, str(e)))
            except Exception as e:  # noqa: BLE001 -- any failure of a generation is answered, and the server goes on
                self._on_error(e)
                job.post(internal(e))
            finally:
                with self._cv:
                    job.done, self._current = True, None
