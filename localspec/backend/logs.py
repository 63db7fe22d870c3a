"""llama.cpp and ggml write their own logs to stderr; users see them only with --verbose."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

import llama_cpp


def _discard(_level: int, _text: bytes, _data: object) -> None:
    return None


def _to_stderr(_level: int, text: bytes, _data: object) -> None:
    sys.stderr.write(text.decode("utf-8", "replace"))


# ctypes callbacks must stay referenced for as long as llama.cpp may call them: constants, built once.
SILENT_CALLBACK = llama_cpp.llama_log_callback(_discard)
STDERR_CALLBACK = llama_cpp.llama_log_callback(_to_stderr)


_current = [STDERR_CALLBACK]  # llama.cpp's own default also writes to stderr


def silence_llama_logs(verbose: bool) -> None:
    _current[0] = STDERR_CALLBACK if verbose else SILENT_CALLBACK
    llama_cpp.llama_log_set(_current[0], None)


@contextlib.contextmanager
def caught_logs() -> Iterator[list[str]]:
    """What llama.cpp logs meanwhile, kept instead of shown (its reasons for refusing input)."""
    caught: list[str] = []

    def keep(_level: int, text: bytes, _data: object) -> None:
        caught.append(text.decode("utf-8", "replace"))

    callback = llama_cpp.llama_log_callback(keep)
    llama_cpp.llama_log_set(callback, None)
    try:
        yield caught
    finally:
        llama_cpp.llama_log_set(_current[0], None)
