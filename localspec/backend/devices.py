"""ggml's devices, through its C API: the local GPUs, llama.cpp's RPC servers registered as devices,
and the NULL-terminated device list a model load is given.

Registered RPC devices would serve every later load (llama.cpp puts them first in its default list),
so once any is registered every load names its devices: the target its servers and the local GPUs,
the draft the local GPUs alone."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import llama_cpp
from llama_cpp._ggml import libggml

from localspec.errors import LocalspecError

CPU, GPU, IGPU = 0, 1, 2  # enum ggml_backend_dev_type
RPC = b"RPC"  # the name of the RPC backend's registry, and of its devices' registry
NO_RPC = (
    "this llama-cpp-python was built without RPC: reinstall it with "
    'CMAKE_ARGS="-DGGML_RPC=ON" pip install --force-reinstall --no-deps --no-cache-dir llama-cpp-python'
)


def _fn(name: str, restype: object, *argtypes: object):
    f = getattr(libggml, name)
    f.restype, f.argtypes = restype, list(argtypes)
    return f


_P, _S = ctypes.c_void_p, ctypes.c_char_p
_reg_by_name = _fn("ggml_backend_reg_by_name", _P, _S)
_reg_proc = _fn("ggml_backend_reg_get_proc_address", _P, _P, _S)
_reg_name = _fn("ggml_backend_reg_name", _S, _P)
_reg_dev_count = _fn("ggml_backend_reg_dev_count", ctypes.c_size_t, _P)
_reg_dev_get = _fn("ggml_backend_reg_dev_get", _P, _P, ctypes.c_size_t)
_register = _fn("ggml_backend_register", None, _P)
_reg_count = _fn("ggml_backend_reg_count", ctypes.c_size_t)
_reg_get = _fn("ggml_backend_reg_get", _P, ctypes.c_size_t)
_dev_count = _fn("ggml_backend_dev_count", ctypes.c_size_t)
_dev_get = _fn("ggml_backend_dev_get", _P, ctypes.c_size_t)
_dev_name = _fn("ggml_backend_dev_name", _S, _P)
_dev_description = _fn("ggml_backend_dev_description", _S, _P)
_dev_type = _fn("ggml_backend_dev_type", ctypes.c_int, _P)
_dev_reg = _fn("ggml_backend_dev_backend_reg", _P, _P)

_servers: dict[str, list[int]] = {}  # endpoint -> its devices, registered once per process


def build() -> str:
    """Which llama.cpp this is and the ggml backends compiled into it (CPU, Metal, CUDA, RPC...)."""
    names = ", ".join(_reg_name(_reg_get(i)).decode() for i in range(_reg_count()))
    return (
        f"llama-cpp-python {llama_cpp.__version__} (llama.cpp {llama_cpp.llama_version().decode()}), "
        f"backends: {names}"
    )


def rpc_available() -> bool:
    return bool(_reg_by_name(RPC))


def rpc_function(name: str, prototype: type) -> ctypes._CFuncPtr:
    """A function of the RPC backend, found through its registry (so dynamic backends work too)."""
    reg = _reg_by_name(RPC)
    address = _reg_proc(reg, name.encode()) if reg else None
    if not address:
        raise LocalspecError(NO_RPC)
    return prototype(address)


def _is_rpc(dev: int) -> bool:
    return _reg_name(_dev_reg(dev)) == RPC


def all_devices() -> list[int]:
    return [_dev_get(i) for i in range(_dev_count())]


def name(dev: int) -> str:
    return _dev_name(dev).decode()


def description(dev: int) -> str:
    return _dev_description(dev).decode("utf-8", "replace")


def _local() -> list[int]:
    return [d for d in all_devices() if not _is_rpc(d)]


def served_devices(names: Sequence[str]) -> list[int]:
    """The devices an RPC server offers: those named, else the local GPUs, else the CPU (as
    llama.cpp's rpc-server picks them)."""
    local = {name(d): d for d in _local()}
    if names:
        unknown = [n for n in names if n not in local]
        if unknown:
            raise LocalspecError(f"no device {unknown[0]!r} here (there are: {', '.join(local)})")
        return [local[n] for n in names]
    return local_gpus() or [d for d in local.values() if _dev_type(d) == CPU][:1]


def local_gpus() -> list[int]:
    """This machine's GPUs as llama.cpp picks them by default: discrete ones, else integrated ones."""
    local = _local()
    return [d for d in local if _dev_type(d) == GPU] or [d for d in local if _dev_type(d) == IGPU]


def add_rpc_servers(endpoints: Sequence[str]) -> list[int]:
    """Register each server's devices (once per process) and return theirs, in `endpoints` order."""
    add = rpc_function("ggml_backend_rpc_add_server", ctypes.CFUNCTYPE(_P, _S))
    for endpoint in endpoints:
        if endpoint not in _servers:
            reg = add(endpoint.encode())
            if not reg:
                raise LocalspecError(f"RPC server {endpoint} offers no devices")
            _register(reg)
            _servers[endpoint] = [_reg_dev_get(reg, i) for i in range(_reg_dev_count(reg))]
    return [dev for endpoint in endpoints for dev in _servers[endpoint]]


def device_list(devices: Sequence[int] | None) -> ctypes.Array | None:
    """A NULL-terminated device array for llama_model_params.devices; None (llama.cpp's own choice)
    while no RPC server is registered and none is asked for."""
    if devices is None:
        if not _servers:
            return None
        devices = local_gpus()
    return (ctypes.c_void_p * (len(devices) + 1))(*devices, None)
