"""A target split over llama.cpp RPC servers, made safe to use.

ggml-rpc aborts the process on a failed connect, a version mismatch or a lost message, and its
sockets have no timeouts. So every server is checked first (connect and HELLO, with a timeout); an
abort becomes a one-line error and exit status 1; the client's sockets get short TCP keepalive
timers, so a link that drops while the client waits breaks the socket within seconds; and a watchdog
ends a target pass that runs far past what passes of its size took (a server that stopped
answering without closing its socket), since a pass blocked in a socket read cannot be cancelled."""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import stat
import struct
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from localspec.backend.devices import (
    NO_RPC,
    add_rpc_servers,
    rpc_available,
    rpc_function,
)
from localspec.backend.endpoints import host_port
from localspec.errors import LocalspecError

# ggml-rpc.h of the llama.cpp that llama-cpp-python pins (pyproject.toml): the client's protocol.
PROTO_MAJOR, PROTO_MINOR = 7, 0
HELLO, CAPS_SIZE = 14, 24  # RPC_CMD_HELLO; RPC_CONN_CAPS_SIZE (transport.h)
CHECK_TIMEOUT_S = 5.0
KEEPALIVE_IDLE_S, KEEPALIVE_INTERVAL_S, KEEPALIVE_COUNT = 2, 1, 3
# A pass is given up on after STALL_FACTOR times what its size cost so far (seconds per token of the
# slowest pass per token), at least STALL_FLOOR_S; before any pass finished, FIRST_PASS_S per token.
STALL_FACTOR, STALL_FLOOR_S, FIRST_PASS_S = 20.0, 5.0, 1.0
EXIT_LINK_LOST = 1


def check_server(endpoint: str, timeout: float = CHECK_TIMEOUT_S) -> None:
    """Connect and exchange HELLO with the server, as ggml-rpc would, but with a timeout."""
    try:
        with _connect(endpoint, timeout) as sock:
            sock.sendall(bytes([HELLO]) + struct.pack("<Q", CAPS_SIZE) + bytes(CAPS_SIZE))
            size = struct.unpack("<Q", _recv(sock, 8))[0]
            if size != 4 + CAPS_SIZE:
                raise LocalspecError(f"{endpoint} is not a llama.cpp RPC server of a compatible version")
            major, minor, patch = _recv(sock, size)[:3]
    except TimeoutError:
        raise LocalspecError(
            f"RPC server {endpoint} did not answer within {timeout:g} s (it serves one client at a time: "
            "is another using it?)"
        ) from None
    except OSError as e:
        raise LocalspecError(f"cannot reach RPC server {endpoint}: {e.strerror or e}") from None
    if major != PROTO_MAJOR or minor > PROTO_MINOR:
        raise LocalspecError(
            f"RPC server {endpoint} speaks protocol {major}.{minor}.{patch}, this build "
            f"{PROTO_MAJOR}.{PROTO_MINOR}: "
            "run the same llama.cpp on both machines (`localspec rpc-server` does)"
        )


def _connect(endpoint: str, timeout: float) -> socket.socket:
    """A TCP connection over IPv4, as ggml-rpc makes it."""
    address = socket.getaddrinfo(*host_port(endpoint), socket.AF_INET, socket.SOCK_STREAM)[0][4]
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(address)
    except BaseException:
        sock.close()
        raise
    return sock


def _recv(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionResetError(0, "the server closed the connection")
        data += chunk
    return data


def die(message: str) -> None:
    """End the process now, from any thread, with a one-line error: a thread blocked in ggml-rpc
    cannot be unwound, and ggml would abort() after its callback."""
    out = "\x1b[?25h\n" if sys.stderr.isatty() else ""  # a live display hid the cursor, mid-line
    os.write(2, f"{out}error: {message}\n".encode())
    os._exit(EXIT_LINK_LOST)


_ABORT_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_char_p)


@_ABORT_CALLBACK
def _on_abort(message: bytes) -> None:
    text = message.decode("utf-8", "replace").strip()
    text = text.split(": ", 1)[-1] if text.count(":") >= 2 else text  # drop ggml's "file:line: "
    die(
        f"the link to an RPC server failed ({text.rstrip('.')}); the server may have stopped or the "
        "network dropped"
    )


def connect(endpoints: Sequence[str]) -> list[int]:
    """Check every server, then register their devices with llama.cpp; returns the devices."""
    if not rpc_available():
        raise LocalspecError(NO_RPC)
    for endpoint in endpoints:
        check_server(endpoint)
    from llama_cpp._ggml import libggml

    libggml.ggml_set_abort_callback.argtypes = [_ABORT_CALLBACK]
    libggml.ggml_set_abort_callback.restype = ctypes.c_void_p
    libggml.ggml_set_abort_callback(_on_abort)
    return add_rpc_servers(endpoints)


def keep_alive(endpoints: Sequence[str]) -> int:
    """Short TCP keepalive timers (and, where there is one, a user timeout) on this process's
    connections to `endpoints`; returns how many sockets were set."""
    peers = {
        ai[4][:2]
        for e in endpoints
        for ai in socket.getaddrinfo(*host_port(e), socket.AF_INET, socket.SOCK_STREAM)
    }
    done = 0
    for fd in _open_fds():
        with contextlib.suppress(OSError):
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                continue
            with socket.socket(fileno=os.dup(fd)) as sock:
                if sock.type != socket.SOCK_STREAM or sock.getpeername()[:2] not in peers:
                    continue
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
                for name, value in (
                    ("TCP_KEEPIDLE", KEEPALIVE_IDLE_S),
                    ("TCP_KEEPALIVE", KEEPALIVE_IDLE_S),  # Linux, macOS
                    ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL_S),
                    ("TCP_KEEPCNT", KEEPALIVE_COUNT),
                    ("TCP_USER_TIMEOUT", 1000 * (KEEPALIVE_IDLE_S + KEEPALIVE_INTERVAL_S * KEEPALIVE_COUNT)),
                ):
                    if hasattr(socket, name):
                        sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)
                done += 1
    return done


def _open_fds() -> list[int]:
    with contextlib.suppress(OSError):
        return [int(fd) for fd in os.listdir("/dev/fd")]
    return list(range(1024))


@dataclass
class PassTimer:
    """When the target pass under way began, over how many tokens, and the slowest seconds per
    token of those that finished: what the watchdog judges a pass by."""

    since: float | None = None
    tokens: int = 0
    per_token: float = 0.0

    # A class's __enter__/__exit__, not a generator's context manager: this brackets every pass,
    # and on a CPU each pass leaves the caches cold for whatever Python runs next.
    def __call__(self, tokens: int) -> PassTimer:
        self.tokens = max(tokens, 1)
        return self

    def __enter__(self) -> None:
        self.since = time.monotonic()

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        if kind is None:
            self.per_token = max(self.per_token, (time.monotonic() - self.since) / self.tokens)
        self.since = None

    def overdue(self, now: float) -> float | None:
        """Seconds the pass under way has run, if that is past its limit."""
        since = self.since
        if since is None:
            return None
        rate = self.per_token * STALL_FACTOR if self.per_token else FIRST_PASS_S
        took = now - since
        return took if took > max(STALL_FLOOR_S, rate * self.tokens) else None


def watch(
    timer: PassTimer, endpoints: Sequence[str], on_stall: Callable[[str], None] = die
) -> threading.Thread:
    """A daemon thread that ends the process when a pass of `timer` is overdue."""

    def loop() -> None:
        while True:
            time.sleep(0.25)
            took = timer.overdue(time.monotonic())
            if took is not None:
                on_stall(
                    f"no answer from the RPC server(s) {','.join(endpoints)} for {took:.0f} s: the link "
                    "dropped or a server hangs"
                )
                return

    thread = threading.Thread(target=loop, name="rpc-watch", daemon=True)
    thread.start()
    return thread


def serve(endpoint: str, cache_dir: str | None, threads: int, devices: Sequence[int]) -> None:
    """llama.cpp's RPC server on `endpoint`: blocks for good (it has no stop call), or returns
    when it could not start (it said why on stderr)."""
    prototype = ctypes.CFUNCTYPE(
        None,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_size_t,
        ctypes.c_size_t,
        ctypes.POINTER(ctypes.c_void_p),
    )
    start = rpc_function("ggml_backend_rpc_start_server", prototype)
    array = (ctypes.c_void_p * len(devices))(*devices)
    start(endpoint.encode(), cache_dir.encode() if cache_dir else None, threads, len(devices), array)
