"""The live terminal display: text streams as the terminal wraps it, a status line stays below.

The text is written as it comes, never with a newline the model did not produce, so the screen
and anything copied from it read as the model wrote it. The status line lives on the terminal's
last row, outside a scroll region that holds everything above it (DECSTBM, which every VT100
descendant has): the terminal itself wraps and scrolls the text, and the status line is redrawn in
place, the cursor saved and restored around it. The region is always reset on the way out.

Restoring the cursor forgets a pending wrap (a row just filled to its last column, the next
character due on the row below): tmux and most real terminals then print that character over the
last column. So the text's column is tracked, and while a row stands full the status line waits
for the next character (which wraps the row) instead of being redrawn."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import TextIO

from rich.cells import get_character_cell_size
from rich.console import Console
from rich.text import Text

from localspec.cli.views.plain import say
from localspec.engine.events import (
    DoneEvent,
    Event,
    NoticeEvent,
    PromptEvent,
    StepEvent,
    TokenEvent,
    drain,
)

RATE_WINDOW_S = 1.0
SAVE, RESTORE = "\x1b7", "\x1b8"  # DECSC / DECRC: the cursor's position (and attributes)
DRAFT_COLOUR, DIM, RESET = "\x1b[32m", "\x1b[2m", "\x1b[0m"
MIN_ROWS = 3  # a terminal this short shows the text without a status line


class LiveStats:
    """Running figures for the status line, from the engine's events alone. Until the prompt is
    evaluated it says so; rates count from then, as the summary's do."""

    def __init__(self, clock=time.perf_counter) -> None:
        self._clock = clock
        self.start = clock()
        self.n_generated = self.n_drafted = self.n_accepted = self.n_steps = 0
        self.drafter = "-"
        self.prompt: PromptEvent | None = None
        self._recent: deque[float] = deque()

    def on_prompt(self, ev: PromptEvent) -> None:
        self.prompt, self.drafter, self.start = ev, ev.drafter, self._clock()

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
        if self.prompt is None and not self.n_generated:
            return Text(f"processing prompt · {self._clock() - self.start:.1f}s", style="dim")
        elapsed = max(self._clock() - self.start, 1e-9)
        overall = self.n_generated / elapsed
        current = len(self._recent) / RATE_WINDOW_S if elapsed > RATE_WINDOW_S else overall
        parts = [f"{overall:.1f} tok/s (now {current:.1f})"]
        if self.n_drafted:
            parts.append(
                f"accept {self.n_accepted / self.n_drafted:.0%} ({self.n_accepted}/{self.n_drafted})"
            )
        else:
            parts.append("accept -")
        per_pass = self.n_generated / self.n_steps if self.n_steps else 0.0
        parts += [f"{per_pass:.2f} tok/pass", self.drafter, f"{elapsed:.1f}s"]
        return Text(" · ".join(parts), style="dim")


class StatusTerminal:
    """A terminal whose last row is a status line and whose other rows scroll the text."""

    def __init__(self, out: TextIO, size, colour: bool) -> None:
        self.out, self._size, self.colour = out, size, colour
        self._rows = 0
        self.ends_line = True  # whether the text written so far ends with a newline
        self._col = 0  # cells of the text's last row (the width: the row is full, a wrap pending)
        self._line = 0  # cells since the last newline (to place the column again after a resize)
        self._width = 0
        self._waiting: str | None = None  # a status line held back while a wrap is pending

    def _margins(self) -> str:
        """Keep the text in rows 1..H-1 (setting margins homes the cursor: it is saved around it)."""
        self._rows = self._size()[1]
        return f"{SAVE}\x1b[1;{self._rows - 1}r{RESTORE}"

    def start(self) -> None:
        self._width = self._size()[0]
        if self._size()[1] < MIN_ROWS:
            return  # no room for a status line: the text alone
        # A row for the status line below the cursor: at the bottom of the screen this scrolls.
        self.out.write("\n\x1b[1A" + self._margins())
        self.out.flush()

    def write(self, text: str, colour: str | None = None) -> None:
        if not text:
            return
        self.ends_line = text.endswith("\n")
        self.out.write(f"{colour}{text}{RESET}" if self.colour and colour else text)
        self._advance(text)
        if self._waiting is not None and not self._wrap_pending():
            line, self._waiting = self._waiting, None
            self.status(line)
        else:
            self.out.flush()

    def _advance(self, text: str) -> None:
        """Follow the cursor's column as the terminal moves it for `text`."""
        width = self._size()[0]
        for ch in text:
            if ch in "\n\r":
                self._col = self._line = 0
            elif ch == "\b":
                self._col, self._line = max(self._col - 1, 0), max(self._line - 1, 0)
            elif ch == "\t":
                stop = min((self._col // 8 + 1) * 8, width - 1) if self._col < width else self._col
                self._line += stop - self._col
                self._col = stop
            elif cells := get_character_cell_size(ch):
                if self._col + cells > width:  # the row is full, or a wide character does not fit
                    self._col = 0
                self._col += cells
                self._line += cells

    def _wrap_pending(self) -> bool:
        width = self._size()[0]
        if width != self._width:  # resized: the terminal reflowed the row (as tmux does), or not
            self._width = width
            self._col = self._line % width if width else 0
            if self._line and not self._col:
                self._col = width
        return self._col >= width > 0

    def status(self, line: str) -> None:
        width, rows = self._size()
        if rows < MIN_ROWS:
            return
        if self._wrap_pending():
            self._waiting = line
            return
        redo = self._margins() if rows != self._rows else ""  # the terminal was resized
        shown = line[: max(width - 1, 0)]
        if self.colour:
            shown = f"{DIM}{shown}{RESET}"
        self.out.write(f"{redo}{SAVE}\x1b[{self._rows};1H\x1b[2K{shown}{RESTORE}")
        self.out.flush()

    def stop(self) -> None:
        """Give the whole screen back and clear the status line; the cursor stays after the text."""
        if self._rows:
            self.out.write(f"{SAVE}\x1b[r\x1b[{self._rows};1H\x1b[2K{RESTORE}")
        if not self.ends_line:
            self.out.write("\n")
        self.out.flush()


class LiveRenderer:
    def __init__(self, console: Console, show_accepted: bool = False, refresh_per_second: float = 8) -> None:
        self.console = console
        self.show_accepted = show_accepted
        self.refresh_s = 1.0 / refresh_per_second
        self.stats = LiveStats()
        self._lock = threading.Lock()

    def render(self, events: Iterable[Event]) -> DoneEvent:
        console = self.console
        term = StatusTerminal(
            console.file,
            lambda: console.size,
            colour=not console.no_color and console.color_system is not None,
        )
        notices: list[str] = []
        stop = threading.Event()

        def refresh() -> None:
            while not stop.wait(self.refresh_s):
                with self._lock:
                    term.status(self.stats.status().plain)

        def show(ev: Event) -> None:
            with self._lock:
                if isinstance(ev, TokenEvent):
                    self.stats.on_token()
                    if ev.text:
                        term.write(ev.text, DRAFT_COLOUR if self.show_accepted and ev.source else None)
                elif isinstance(ev, StepEvent):
                    self.stats.on_step(ev)
                elif isinstance(ev, PromptEvent):
                    self.stats.on_prompt(ev)
                elif isinstance(ev, NoticeEvent):
                    notices.append(ev.message)  # shown after the text, which a line of its own would split
                term.status(self.stats.status().plain)

        ticker = threading.Thread(target=refresh, daemon=True)
        with self._lock:
            term.start()
            term.status(self.stats.status().plain)
        ticker.start()
        try:
            done = drain(events, show)
            with self._lock:
                term.write(done.tail)
        finally:
            stop.set()
            ticker.join()
            term.stop()
        for message in notices:
            say(console, (f"note: {message}", "yellow"))
        return done
