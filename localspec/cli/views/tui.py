"""The live terminal display: text streams normally, only a status line below it stays live.

Rich Live crops whatever is taller than the terminal, so the live region holds just the line being
written plus the status line; every finished line is printed above it, where the terminal scrolls."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from localspec.engine.events import DoneEvent, Event, NoticeEvent, StepEvent, TokenEvent, drain

DRAFT_STYLE = "green"
NOTICE_STYLE = "yellow"
RATE_WINDOW_S = 1.0
MAX_LIVE_ROWS = 4  # a longer unfinished line is printed out, so the live region never outgrows the screen


class LiveStats:
    """Running figures for the status line, from the engine's events alone."""

    def __init__(self, clock=time.perf_counter) -> None:
        self._clock = clock
        self.start = clock()
        self.n_generated = self.n_drafted = self.n_accepted = self.n_steps = 0
        self.drafter = "none"
        self._recent: deque[float] = deque()

    def on_step(self, ev: StepEvent) -> None:
        self.n_steps += 1
        self.n_drafted += ev.drafted
        self.n_accepted += ev.accepted
        if ev.drafter:
            self.drafter = ev.drafter

    def on_token(self) -> None:
        now = self._clock()
        self.n_generated += 1
        self._recent.append(now)
        while self._recent and now - self._recent[0] > RATE_WINDOW_S:
            self._recent.popleft()

    def status(self) -> Text:
        elapsed = max(self._clock() - self.start, 1e-9)
        overall = self.n_generated / elapsed
        current = len(self._recent) / RATE_WINDOW_S if elapsed > RATE_WINDOW_S else overall
        parts = [f"{overall:.1f} tok/s (now {current:.1f})"]
        if self.n_drafted:
            parts.append(f"accept {self.n_accepted / self.n_drafted:.0%} ({self.n_accepted}/{self.n_drafted})")
        else:
            parts.append("accept -")
        per_pass = self.n_generated / self.n_steps if self.n_steps else 0.0
        parts += [f"{per_pass:.2f} tok/pass", self.drafter, f"{elapsed:.1f}s"]
        return Text(" · ".join(parts), style="dim")


class LiveRenderer:
    def __init__(self, console: Console, show_accepted: bool = False, refresh_per_second: float = 8) -> None:
        self.console = console
        self.show_accepted = show_accepted
        self.refresh_per_second = refresh_per_second
        self.stats = LiveStats()
        self._line = Text()
        self._lock = threading.Lock()

    def _renderable(self) -> Group:
        with self._lock:
            return Group(self._line.copy(), self.stats.status())

    def _write(self, live: Live, text: str, style: str | None) -> None:
        with self._lock:
            *done, rest = text.split("\n")
            for piece in done:
                self._line.append(piece, style=style)
                live.console.print(self._line, soft_wrap=True)
                self._line = Text()
            self._line.append(rest, style=style)
            if self._line.cell_len > MAX_LIVE_ROWS * max(self.console.width, 20):
                live.console.print(self._line, soft_wrap=True)
                self._line = Text()

    def render(self, events: Iterable[Event]) -> DoneEvent:
        with Live(
            get_renderable=self._renderable, console=self.console, refresh_per_second=self.refresh_per_second,
            transient=True, vertical_overflow="visible",
        ) as live:

            def show(ev: Event) -> None:
                if isinstance(ev, TokenEvent):
                    self.stats.on_token()
                    if ev.text:
                        style = DRAFT_STYLE if self.show_accepted and ev.source else None
                        self._write(live, ev.text, style)
                elif isinstance(ev, StepEvent):
                    self.stats.on_step(ev)
                elif isinstance(ev, NoticeEvent):
                    live.console.print(Text(f"note: {ev.message}", style=NOTICE_STYLE))

            done = drain(events, show)
        self._line.append(done.tail)
        self.console.print(self._line, soft_wrap=True)
        return done
