"""Network addresses as the user gives them: --rpc's HOST:PORT list, and whether a host is loopback."""

from __future__ import annotations

import contextlib
import ipaddress

MAX_SERVERS = 16  # GGML_RPC_MAX_SERVERS


def parse_endpoints(text: str) -> list[str]:
    """`HOST:PORT[,HOST:PORT...]` as a list of distinct endpoints; ValueError says what is wrong.
    llama.cpp's RPC client splits an endpoint at its first colon: no IPv6 literals."""
    out: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        host, sep, port = part.partition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{part!r} is not HOST:PORT (an IPv6 address needs a host name)")
        endpoint = f"{host}:{int(port)}"
        if endpoint in out:
            raise ValueError(f"{endpoint} is given twice")
        out.append(endpoint)
    if len(out) > MAX_SERVERS:
        raise ValueError(f"at most {MAX_SERVERS} servers")
    return out


def host_port(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.partition(":")
    return host, int(port)


def is_loopback(host: str) -> bool:
    with contextlib.suppress(ValueError):
        return ipaddress.ip_address(host).is_loopback
    return host == "localhost"
