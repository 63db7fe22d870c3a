"""A file on the Hub as a pull sees it, and what a pull reports as it downloads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class RemoteFile:
    path: str
    size: int
    sha256: str | None


class DownloadProgress(Protocol):
    """What a pull reports; the CLI renders it (the hub code has no terminal code)."""

    def file_started(self, name: str, size: int, done: int) -> None: ...
    def file_advanced(self, name: str, n: int) -> None: ...
    def file_finished(self, name: str, size: int) -> None: ...
