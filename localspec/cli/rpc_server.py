"""`localspec rpc-server`: lend this machine's devices to a target split over several machines."""

from __future__ import annotations

import errno
import ipaddress
import signal
import socket
from pathlib import Path
from typing import Annotated

import typer

from localspec.backend.endpoints import is_loopback
from localspec.cli.options import STOP_SIGNALS, fail, user_errors

DEFAULT_PORT = 50052  # llama.cpp's rpc-server's


def rpc_server(
    host: Annotated[
        str,
        typer.Option(
            "--host",
            help="Address to listen on. The protocol has no authentication: anything but loopback lets "
            "anyone who can reach this port use this machine (and read what it computes).",
        ),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="Port to listen on.")] = DEFAULT_PORT,
    threads: Annotated[
        int | None,
        typer.Option(
            "--threads", "-t", min=1, help="CPU threads (default: physical cores).", show_default=False
        ),
    ] = None,
    device: Annotated[
        str | None,
        typer.Option(
            "--device",
            metavar="DEV,...",
            help="Devices to serve, by llama.cpp's names (default: the GPUs, else the CPU); `--device "
            "list` lists them.",
            show_default=False,
        ),
    ] = None,
    cache_dir: Annotated[
        Path | None,
        typer.Option(
            "--cache-dir",
            metavar="DIR",
            help="Keep the tensors clients send here, by hash, so a large model crosses the network once, "
            "not every run.",
            show_default=False,
        ),
    ] = None,
    silent_timeout: Annotated[
        float,
        typer.Option(
            "--silent-timeout",
            metavar="S",
            min=0.1,
            help="Close a connection that has sent nothing for S seconds while another client waits (the "
            "server serves one at a time; Linux).",
        ),
    ] = 10.0,
) -> None:
    """Lend this machine's devices to `--rpc` on another machine.

    llama.cpp's RPC server, of the client's own build; one client at a time, until Ctrl-C or SIGTERM.
    A message that makes llama.cpp's server abort ends that client's connection; the server
    listens again at once."""
    from localspec.backend import devices as ggml
    from localspec.backend.hardware import physical_cores
    from localspec.backend.rpc_service import Supervisor

    if not ggml.rpc_available():
        raise fail(ggml.NO_RPC)
    if device == "list":
        for dev in ggml.all_devices():
            typer.echo(f"{ggml.name(dev)}\t{ggml.description(dev)}")
        return
    with user_errors():
        served = ggml.served_devices([d.strip() for d in device.split(",") if d.strip()] if device else [])
    if cache_dir is not None:
        try:
            cache_dir.expanduser().mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise fail(f"cannot use --cache-dir {cache_dir}: {e.strerror}") from None
    host = _listen_address(host)
    _check_port(host, port)
    if not is_loopback(host):
        typer.echo(
            f"warning: serving on {host}:{port} without authentication: anyone who can reach it can run "
            "computations here and read them; use it only on a network you trust",
            err=True,
        )
    endpoint = f"{host}:{port}"
    names = ", ".join(ggml.name(d) for d in served)
    typer.echo(f"localspec rpc-server on {endpoint} serving {names}; stop it with Ctrl-C", err=True)
    cache = str(cache_dir.expanduser()) if cache_dir else None
    log = lambda m: typer.echo(m, err=True)  # noqa: E731
    supervisor = Supervisor(
        endpoint, cache, threads or physical_cores(), [ggml.name(d) for d in served], log, silent_timeout
    )
    got: list[int] = []

    def on_signal(sig: int, _frame: object) -> None:
        got.append(sig)
        supervisor.stop()

    for sig in STOP_SIGNALS:
        signal.signal(sig, on_signal)
    supervisor.run()
    if got:
        typer.echo("rpc-server stopped", err=True)
        raise typer.Exit(128 + got[0])
    raise fail(f"the RPC server on {endpoint} stopped (see above)")


def _listen_address(host: str) -> str:
    """llama.cpp's RPC server binds an IPv4 address given as such."""
    if host == "localhost":
        return "127.0.0.1"
    try:
        return str(ipaddress.IPv4Address(host))
    except ValueError:
        raise fail(
            f"--host {host}: give an IPv4 address (0.0.0.0 for every interface); llama.cpp's RPC server "
            "takes no names or IPv6"
        ) from None


def _check_port(host: str, port: int) -> None:
    """Whether host:port can be listened on, asked before llama.cpp tries (it only says it failed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as e:
            why = "the port is in use" if e.errno == errno.EADDRINUSE else e.strerror
            raise fail(f"cannot listen on {host}:{port}: {why}") from None
