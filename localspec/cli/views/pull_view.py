"""Rich progress for `localspec pull`: one bar per file (size, speed, ETA) and a total."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from localspec.cli.views.plain import description_column


class PullProgress:
    def __init__(self, total_bytes: int, console: Console | None = None) -> None:
        self._progress = Progress(
            description_column(),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=console or Console(stderr=True),
        )
        self._total = self._progress.add_task("total", total=total_bytes)
        self._tasks: dict[str, TaskID] = {}
        self._done: dict[str, int] = {}

    def __enter__(self) -> PullProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def _counts_toward_total(self, name: str) -> bool:
        return not name.startswith("verify ")

    def file_started(self, name: str, size: int, done: int) -> None:
        if name not in self._tasks:
            self._tasks[name] = self._progress.add_task(name, total=size or None, completed=done)
            self._done[name] = 0
        if self._counts_toward_total(name) and done > self._done[name]:
            self._progress.advance(self._total, done - self._done[name])  # resumed bytes already on disk
            self._done[name] = done

    def file_advanced(self, name: str, n: int) -> None:
        self._progress.advance(self._tasks[name], n)
        if self._counts_toward_total(name):
            self._done[name] += n
            self._progress.advance(self._total, n)

    def file_finished(self, name: str, size: int) -> None:
        if name not in self._tasks:  # already complete on disk: no transfer happened
            self._tasks[name] = self._progress.add_task(
                f"{name} (cached)", total=size or 1, completed=size or 1
            )
            self._done[name] = 0
        if self._counts_toward_total(name) and size > self._done[name]:
            self._progress.advance(self._total, size - self._done[name])
            self._done[name] = size
        self._progress.update(self._tasks[name], completed=size or 1, total=size or 1)
