"""llama.cpp and ggml write their own logs to stderr; users see them only with --verbose."""

from __future__ import annotations

import sys

import llama_cpp


def _discard(_level: int, _text: bytes, _data: object) -> None:
    return None


def _to_stderr(_level: int, text: bytes, _data: object) -> None:
    sys.stderr.write(text.decode("utf-8", "replace"))


# ctypes callbacks must stay referenced for as long as llama.cpp may call them: constants, built once.
SILENT_CALLBACK = llama_cpp.llama_log_callback(_discard)
STDERR_CALLBACK = llama_cpp.llama_log_callback(_to_stderr)


def silence_llama_logs(verbose: bool) -> None:
    llama_cpp.llama_log_set(STDERR_CALLBACK if verbose else SILENT_CALLBACK, None)
