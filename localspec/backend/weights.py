"""Loading a GGUF's weights (or only its vocabulary) into llama.cpp."""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Sequence
from pathlib import Path

import llama_cpp

from localspec.backend.devices import device_list
from localspec.errors import LocalspecError


class OutOfMemory(LocalspecError):
    """Loading failed with layers offloaded: most likely the GPU ran out of memory."""


# llama_print_system_info writes a static string: two threads' first calls at once (a draft loading
# beside its target, backend/side_load.py) corrupted the heap.
_SYSTEM_INFO = threading.Lock()


def _cpu_has_amx() -> bool:
    with _SYSTEM_INFO:
        return _amx_listed()


@functools.cache
def _amx_listed() -> bool:
    return b"AMX_INT8 = 1" in llama_cpp.llama_print_system_info()


def load_weights(
    path: Path,
    n_gpu_layers: int,
    vocab_only: bool,
    devices: Sequence[int] | None = None,
    split: Sequence[float] = (),
    heads: bool = False,
) -> llama_cpp.llama_model_p:
    """`devices`: what the offloaded layers are spread over (None: this machine's GPUs), in the
    proportions of `split` (empty: by free memory); `heads`: load the MTP heads (NextN layers)."""
    params = llama_cpp.llama_model_default_params()
    params.n_gpu_layers = n_gpu_layers
    params.vocab_only = vocab_only
    params.load_mtp = heads
    listed = device_list(devices)  # both arrays must outlive the load
    if listed is not None:
        params.devices = ctypes.cast(listed, ctypes.c_void_p)
    if split:
        proportions = (ctypes.c_float * llama_cpp.llama_max_devices())(
            *split[: llama_cpp.llama_max_devices()]
        )
        params.tensor_split = proportions
    # ggml's AMX matrix kernels, used for weights repacked into its AMX buffers, crash the process
    # on some Sapphire Rapids machines for any batch of more than one token (llama.cpp issue 20824,
    # still open; seen here in a VM with Q4_1 weights). Without the extra buffer types the CPU runs
    # the plain AVX-512 kernels: slower prompt passes there, but no crash.
    params.use_extra_bufts = not _cpu_has_amx()
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        what = f"llama.cpp could not load {path} (unsupported architecture or corrupt file"
        if n_gpu_layers:
            raise OutOfMemory(f"{what}, or the GPU ran out of memory)")
        raise LocalspecError(f"{what})")
    return model


def metadata(model: llama_cpp.llama_model_p, key: str) -> str | None:
    """A loaded model's GGUF metadata value as text (None where the file has no such key)."""
    buf = ctypes.create_string_buffer(256)
    if llama_cpp.llama_model_meta_val_str(model, key.encode(), buf, len(buf)) < 0:
        return None
    return buf.value.decode(errors="replace")
