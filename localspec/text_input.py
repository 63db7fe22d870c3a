"""Text coming in (command-line arguments, stdin, chat input, files) is read as UTF-8, the same
everywhere: bytes that are not UTF-8 become U+FFFD, and a one-line note names the source."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from localspec.errors import LocalspecError


def note(message: str) -> None:
    """A one-line note on stderr (what the orchestration layer says when no front end is asked)."""
    print(f"note: {message}", file=sys.stderr)


def from_bytes(data: bytes, source: str, notify: Callable[[str], None] = note) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        notify(f"{source} is not valid UTF-8: its invalid bytes were replaced with U+FFFD")
        return data.decode("utf-8", "replace")


def from_arg(text: str, source: str, notify: Callable[[str], None] = note) -> str:
    """An argument or a line of input, as Python decoded it (undecodable bytes kept as surrogates)."""
    return from_bytes(text.encode("utf-8", "surrogateescape"), source, notify)


def read_file(path: Path, what: str, notify: Callable[[str], None] = note) -> str:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise LocalspecError(f"cannot read {what} {path}: {e.strerror}") from None
    return from_bytes(data, f"{what} {path}", notify)


def read_stdin(notify: Callable[[str], None] = note) -> str:
    return from_bytes(sys.stdin.buffer.read(), "stdin", notify)
