"""A client that connects to llama.cpp's RPC server and sends nothing holds it: the server serves
one client at a time and waits on that one's first message without end, while every other client
waits behind it. Run inside the server's own process, this closes such a connection once it has
been silent for a while and another client is waiting, so the server accepts the next one.

A real client speaks at once (its first message is a hello), so only a connection that has not
sent a byte is closed (the kernel counts what arrived: TCP_INFO's bytes_received). Linux only (the
process's sockets are found through /proc); elsewhere nothing is watched."""

from __future__ import annotations

import os
import socket
import struct
import time
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
ESTABLISHED, LISTENING = "01", "0A"  # /proc/net/tcp's states
BYTES_RECEIVED = 128  # tcpi_bytes_received's offset in struct tcp_info (linux/tcp.h, since 4.1)


def _rows(port: int) -> list[list[str]]:
    """/proc/net/tcp's rows for local `port`."""
    rows = []
    for row in (PROC / "net" / "tcp").read_text().splitlines()[1:]:
        fields = row.split()
        if int(fields[1].rsplit(":", 1)[1], 16) == port:
            rows.append(fields)
    return rows


def _socket_fd(inode: str) -> int | None:
    """This process's descriptor of the socket of `inode`."""
    for fd in (PROC / "self" / "fd").iterdir():
        try:
            if os.readlink(fd) == f"socket:[{inode}]":
                return int(fd.name)
        except OSError:
            continue
    return None


@dataclass
class SilenceWatch:
    port: int
    after_s: float
    inode: str | None = None  # the connection being watched
    since: float = 0.0

    def check(self, now: float | None = None) -> str | None:
        """Close the connection if it has sent nothing for `after_s` while another client waits;
        the line to log when it did."""
        try:
            rows = _rows(self.port)
        except (OSError, ValueError, IndexError):
            return None  # not Linux, or /proc unreadable: nothing to watch
        now = time.monotonic() if now is None else now
        connected = [r for r in rows if r[3] == ESTABLISHED and r[9] != "0"]  # inode 0: not accepted yet
        inode = connected[0][9] if len(connected) == 1 else None
        if inode != self.inode:
            self.inode, self.since = inode, now
            return None
        waiting = sum(int(r[4].split(":")[1], 16) for r in rows if r[3] == LISTENING)  # the accept queue
        if inode is None or waiting == 0 or now - self.since < self.after_s:
            return None
        fd = _socket_fd(inode)
        if fd is None:
            return None
        with socket.socket(fileno=os.dup(fd)) as sock:
            received = struct.unpack_from(
                "=Q", sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256), BYTES_RECEIVED
            )[0]
            if received:
                return None  # it spoke: a client at work, however long
            sock.shutdown(socket.SHUT_RDWR)  # llama.cpp's wait on it ends; it accepts the next client
        self.inode = None
        return f"closed a connection that sent nothing for {self.after_s:g} s while another client waited"
