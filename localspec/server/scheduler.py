"""Generations in arrival order, each on a worker thread of its own; the HTTP side hands in jobs
and reads their events from an asyncio queue.

One worker by default; with --parallel N, N workers, each over a lane (backend/lanes.py) of the
same models, whose passes run together. A queued job goes to the free worker whose cache shares
the longest prefix with it (its conversation's lane).

A job whose client left is dropped from the queue, or, when it is generating, stopped within a
step: a single worker's llama_decode calls watch the same event, so even a long prompt pass stops
(lanes' passes are shared, so a lane stops between them, its prompt read in pieces: backend/lanes.py).
Shutting down answers the queued jobs at once and lets the running ones finish (the HTTP server
cancels them when its grace period ends)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from localspec.backend.lanes import Lane
from localspec.backend.slots import common_prefix
from localspec.engine.events import DoneEvent, PromptEvent, TokenEvent
from localspec.engine.speculative import GenerationConfig, SpeculativeEngine
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


@dataclass(eq=False)
class Worker:
    """A thread that generates one job at a time with its engine."""

    engine: SpeculativeEngine
    cancel: threading.Event  # what its generation's passes and steps watch
    job: Job | None = None  # the job it generates
    free: bool = False  # waiting for a job
    used: int = -1  # when it last took a job (-1: never)
    idle: list[Worker] = field(default_factory=list)  # free workers whose lanes it stashes as it starts

    @property
    def lane(self) -> Lane | None:
        """Its engine's target's lane, where requests are generated together."""
        target = self.engine.target
        return target if isinstance(target, Lane) else None

    @property
    def conversation(self) -> list[int]:
        return self.lane.conversation if self.lane else self.engine.target.cached


class Scheduler:
    def __init__(self, loaded: Loaded, max_queue: int, on_error: Callable[[BaseException], None]) -> None:
        self.loaded = loaded
        self.max_queue = max_queue
        self._on_error = on_error
        self._queue: deque[Job] = deque()
        self._cv = threading.Condition()
        self._stopping = False
        engines = loaded.lanes or [loaded.engine]
        # A lane's passes watch its own event (backend/lanes.py); a single engine's, the models'.
        self.workers = [
            Worker(e, e.target.cancel if isinstance(e.target, Lane) else loaded.cancel) for e in engines
        ]
        self._threads = [
            threading.Thread(target=self._work, args=(w,), name=f"localspec-generation-{i}", daemon=True)
            for i, w in enumerate(self.workers)
        ]
        for thread in self._threads:
            thread.start()

    @property
    def waiting(self) -> int:
        return len(self._queue)

    @property
    def generating(self) -> int:
        return sum(w.job is not None for w in self.workers)

    def submit(self, job: Job) -> None:
        with self._cv:
            if self._stopping:
                raise ShuttingDown()
            if not any(w.free for w in self.workers) and len(self._queue) >= self.max_queue:
                raise QueueFull()
            self._queue.append(job)
            self._cv.notify_all()

    def leave(self, job: Job) -> bool:
        """The job's client went away: drop it from the queue, or stop it if it is generating.
        False when it had already ended (or left)."""
        with self._cv:
            if job.done or job.left:
                return False
            job.left = True
            worker = self._worker_of(job)
            if worker is not None:
                worker.cancel.set()
            elif job in self._queue:
                self._queue.remove(job)
            return True

    def _worker_of(self, job: Job) -> Worker | None:
        return next((w for w in self.workers if w.job is job), None)

    def stop(self, grace: float | None = None) -> None:
        """Accept nothing more and answer every queued job; the running ones go on, for `grace`
        seconds if given, and are then cancelled."""
        with self._cv:
            if grace is not None and not self._stopping:
                timer = threading.Timer(grace, self.cancel_running)
                timer.daemon = True
                timer.start()
            self._stopping = True
            while self._queue:
                self._queue.popleft().post(ShuttingDown())
            self._cv.notify_all()

    def cancel_running(self) -> bool:
        """Stop the generations under way within a step (their clients are answered); False if none runs."""
        with self._cv:
            running = [w for w in self.workers if w.job is not None]
            for worker in running:
                worker.cancel.set()
            return bool(running)

    @property
    def running(self) -> bool:
        return self.generating > 0

    def join(self, timeout: float | None = None) -> None:
        for thread in self._threads:
            thread.join(timeout)

    def _next(self, worker: Worker) -> Job | None:
        with self._cv:
            worker.free = True
            while True:
                # (a worker whose lane another is stashing is not free)
                if self._queue and worker.free and self._best_for(self._queue[0]) is worker:
                    break
                if self._stopping and not self._queue:
                    worker.free = False
                    return None
                self._cv.wait()
            job = worker.job = self._queue.popleft()
            worker.used = max(w.used for w in self.workers) + 1
            worker.free = False
            job.started = time.perf_counter()
            worker.cancel.clear()
            # Idle lanes holding a conversation in the cache: stashed as this one starts (lanes.py)
            worker.idle = [w for w in self.workers if w.free and w.lane and w.lane.cached]
            for w in worker.idle:
                w.free = False
            self._cv.notify_all()  # the next job may be another free worker's
            return job

    def _best_for(self, job: Job) -> Worker:
        """The free worker whose cache shares the longest prefix with the job's prompt (its
        conversation's lane) where that is at least half of what it holds, else the free worker used
        least recently: a short request between two turns (a chat UI's title) shares little more
        than the system prompt with a conversation, and must not take its lane (as slots.py)."""
        free = [w for w in self.workers if w.free]
        shared, best = max(((common_prefix(w.conversation, job.tokens), w) for w in free), key=lambda t: t[0])
        if shared and 2 * shared >= len(best.conversation):
            return best
        return min(free, key=lambda w: w.used)

    def _stash_idle(self, worker: Worker) -> None:
        """Stash the idle lanes reserved for it in _next, then free them again; and its own lane's
        conversation where its cells are spread (lanes.py): restored, they lie low again."""
        try:
            for w in worker.idle:
                w.lane.stash()  # type: ignore[union-attr]
            if worker.lane is not None and worker.lane.spread:
                worker.lane.stash()
        finally:
            with self._cv:
                for w in worker.idle:
                    w.free = True
                worker.idle = []
                self._cv.notify_all()

    def _work(self, worker: Worker) -> None:
        lockstep = self.loaded.lockstep
        while (job := self._next(worker)) is not None:
            if lockstep is not None:
                lockstep.join()
            lane = worker.lane
            passes, beside = (lane.passes, lane.beside) if lane else (0, 0)
            try:
                if lockstep is not None:
                    self._stash_idle(worker)
                for ev in worker.engine.generate(job.tokens, job.config, worker.cancel):
                    if isinstance(ev, DoneEvent) and lane and lane.passes > passes:
                        ev.stats.batch = (lane.beside - beside) / (lane.passes - passes)
                    if isinstance(ev, (TokenEvent, PromptEvent, DoneEvent)):
                        job.post(ev)
            except LocalspecError as e:
                job.post(ApiError(400, str(e)))
            except Exception as e:  # noqa: BLE001 -- any failure of a generation is answered, and the server goes on
                self._on_error(e)
                job.post(internal(e))
            finally:
                if lockstep is not None:
                    lockstep.leave()
                with self._cv:
                    job.done, worker.job = True, None
