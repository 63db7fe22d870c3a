"""Text coming in (command-line arguments, stdin, chat input, files) is read as UTF-8, the same
everywhere: bytes that are not UTF-8 become U+FFFD, and a one-line note names the source."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from localspec.errors import LocalspecError

# Every file the tool reads whole (config, registry, prompts, saved chats, grammars): ample for
# each, and a bound on what a wrong path (a device, a disk image) can make it hold in memory.
MAX_FILE_BYTES = 16 * 2**20


def note(message: str) -> None:
    """A one-line note on stderr (what the orchestration layer says when no front end is asked)."""
    print(f"note: {message}", file=sys.stderr)


def from_bytes(data: bytes, source: str, notify: Callable[[str], None] = note) -> str:
    """A file's text; a byte-order mark (Windows editors write one) is no part of it."""
    data = data.removeprefix(b"\xef\xbb\xbf")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        notify(f"{source} is not valid UTF-8: its invalid bytes were replaced with U+FFFD")
        return data.decode("utf-8", "replace")


def without_surrogates(text: str) -> str:
    """`text` with lone surrogates (JSON's "\\ud800" decodes to one; UTF-8 cannot hold it) replaced
    with U+FFFD; `text` itself when it holds none."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def from_arg(text: str, source: str, notify: Callable[[str], None] = note) -> str:
    """An argument or a line of input, as Python decoded it (undecodable bytes kept as surrogates)."""
    return from_bytes(text.encode("utf-8", "surrogateescape"), source, notify)


def exists(path: Path, what: str) -> bool:
    """Whether `path` exists; a path the system cannot even look up (a name too long, a folder
    without permission) is a one-line error, where Path.exists raises."""
    try:
        path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as e:
        raise LocalspecError(f"cannot look up {what} {path}: {e.strerror}") from None
    return True


def read_bytes(path: Path, what: str) -> bytes:
    """A file's bytes, refused past MAX_FILE_BYTES (read no further: /dev/zero has no end)."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise LocalspecError(f"cannot read {what} {path}: {e.strerror}") from None
    if len(data) > MAX_FILE_BYTES:
        raise LocalspecError(f"{what} {path} is larger than {MAX_FILE_BYTES // 2**20} MB: not read")
    return data


def read_file(path: Path, what: str, notify: Callable[[str], None] = note) -> str:
    return from_bytes(read_bytes(path, what), f"{what} {path}", notify)


def read_stdin(notify: Callable[[str], None] = note) -> str:
    return from_bytes(sys.stdin.buffer.read(), "stdin", notify)
