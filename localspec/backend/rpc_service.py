"""`rpc-server`'s service: llama.cpp's RPC server in a child process, restarted when it dies.

llama.cpp's server trusts what clients send: a tensor described outside its buffer fails a
GGML_ASSERT, and an assert aborts the process. So the server runs in a child that this process
watches: when it dies, one line says which client was connected and what failed, and a new child
listens again at once; a crafted message costs its sender the connection, not the service.

The child is `python -m localspec.backend.rpc_service ENDPOINT CACHE THREADS SILENT_S DEVICE...`; it ends
when its stdin closes, so it never outlives the supervisor."""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from localspec.backend.rpc_silence import SilenceWatch

ACCEPTED, CLOSED = "Accepted client connection", "Client connection closed"  # what llama.cpp's server prints
# A child that dies this soon without having served a client could not start (a port taken since
# it was checked, a device gone): restarting it would only fail again.
FAILED_START_S = 2.0
PROC_TCP = Path("/proc/net/tcp")
# /proc's TCP states, the likeliest client first: established, then closing, then TIME_WAIT.
PEER_STATES = ("01", "04", "05", "08", "09", "0B", "06")
FATAL = ("GGML_ASSERT", "GGML_ABORT", "terminate called")  # what llama.cpp prints as it aborts


@dataclass
class Child:
    """One run of the server, as its output tells it."""

    proc: subprocess.Popen
    started: float
    client: str | None = None  # who is connected now
    served: int = 0  # clients accepted so far
    failure: str = ""  # the assert (or error) it printed last
    readers: list[threading.Thread] = field(default_factory=list)


class Supervisor:
    def __init__(
        self,
        endpoint: str,
        cache_dir: str | None,
        threads: int,
        devices: Sequence[str],
        log: Callable[[str], None],
        silent_s: float = 10.0,
    ) -> None:
        self.endpoint, self.log = endpoint, log
        self.port = int(endpoint.rsplit(":", 1)[1])
        self.argv = [
            sys.executable,
            "-m",
            "localspec.backend.rpc_service",
            endpoint,
            cache_dir or "",
            str(threads),
            str(silent_s),
            *devices,
        ]
        self.restarts = 0
        self.stopping = threading.Event()
        self._child: Child | None = None

    def run(self) -> bool:
        """Serve until stop(); False when the server could not start (it said why)."""
        while not self.stopping.is_set():
            child = self._start()
            code = child.proc.wait()
            for reader in child.readers:
                reader.join(1.0)
            if self.stopping.is_set():
                return True
            if not child.served and time.monotonic() - child.started < FAILED_START_S:
                return False
            who = f"client {child.client}" if child.client else "a client"
            what = child.failure or f"exit status {code}"
            self.log(f"rpc-server: a message from {who} ended llama.cpp's server ({what}); listening again")
            self.restarts += 1
        return True

    def stop(self) -> None:
        self.stopping.set()
        child = self._child
        if child is not None and child.proc.poll() is None:
            child.proc.kill()  # blocked inside llama.cpp: nothing to unwind

    def _start(self) -> Child:
        env = {**os.environ, "GGML_NO_BACKTRACE": "1"}  # an assert would otherwise run gdb over the process
        proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
            errors="replace",
        )
        child = Child(proc, time.monotonic())
        quiet = self.restarts > 0  # a restarted server's banner was shown once already
        child.readers = [
            threading.Thread(target=self._read, args=(child, proc.stdout, sys.stdout, quiet), daemon=True),
            threading.Thread(target=self._read, args=(child, proc.stderr, sys.stderr, False), daemon=True),
        ]
        for reader in child.readers:
            reader.start()
        self._child = child
        return child

    def _read(self, child: Child, stream, out, quiet: bool) -> None:  # noqa: ANN001
        for line in stream:
            text = line.rstrip("\n")
            if text.startswith(ACCEPTED):
                child.served += 1
                child.client = connected_peer(self.port)
            elif text.startswith(CLOSED):
                child.client = None
            elif any(mark in text for mark in FATAL):
                child.failure = text.rsplit("/", 1)[
                    -1
                ].strip()  # the source path is the build's, of no use here
                continue
            if not quiet or text.startswith((ACCEPTED, CLOSED)):
                print(text, file=out, flush=True)


def connected_peer(port: int) -> str | None:
    """The address of the client on local `port`: llama.cpp's server listens on IPv4 and serves one
    client at a time (read from Linux's /proc; None elsewhere). A server that just died left the
    connection closing (a crafted message takes milliseconds): a closing one is taken too, and one
    in TIME_WAIT last."""
    if platform.system() != "Linux":  # a /proc of this name elsewhere is not Linux's
        return None
    try:
        rows = PROC_TCP.read_text().splitlines()[1:]
    except OSError:
        return None
    found: dict[str, str] = {}
    for row in rows:
        local, remote, state = row.split()[1:4]
        if state in PEER_STATES and int(local.split(":")[1], 16) == port:
            host, peer_port = remote.split(":")
            # /proc writes the address as a host-order word in hex.
            found[state] = f"{socket.inet_ntoa(struct.pack('=I', int(host, 16)))}:{int(peer_port, 16)}"
    return next((found[state] for state in PEER_STATES if state in found), None)


def _line_buffered_stdout() -> None:
    """llama.cpp prints "Accepted client connection" with printf: into a pipe, C's stdout is
    block-buffered, and the supervisor would learn of a client only when the buffer fills. (Windows'
    C runtime is no library of this process's own name: there the supervisor learns of clients late.)"""
    if os.name != "posix":
        return
    libc = ctypes.CDLL(None)
    for symbol in ("stdout", "__stdoutp"):  # glibc, macOS
        with contextlib.suppress(ValueError, AttributeError):
            libc.setvbuf(ctypes.c_void_p.in_dll(libc, symbol), None, 1, 0)  # _IOLBF
            return


def _child_main(argv: Sequence[str]) -> None:
    from localspec.backend import devices as ggml
    from localspec.backend.rpc import serve

    endpoint, cache_dir, threads, silent_s, *names = argv
    _line_buffered_stdout()
    served = ggml.served_devices(names)
    server = threading.Thread(
        target=serve, args=(endpoint, cache_dir or None, int(threads), served), daemon=True
    )
    server.start()
    watcher = threading.Thread(target=sys.stdin.read, daemon=True)  # EOF: the supervisor is gone
    watcher.start()
    silence = SilenceWatch(int(endpoint.rsplit(":", 1)[1]), float(silent_s))
    while server.is_alive() and watcher.is_alive():
        watcher.join(0.5)
        said = silence.check()
        if said:
            print(f"rpc-server: {said}", flush=True)
    os._exit(3 if not server.is_alive() else 0)  # could not start, or the supervisor is gone


if __name__ == "__main__":
    _child_main(sys.argv[1:])
