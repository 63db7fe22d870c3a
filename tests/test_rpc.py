"""A target split over llama.cpp RPC servers: two `localspec rpc-server`s on 127.0.0.1 give the same
greedy output as the local run (and `serve --parallel` over them, requests together, each its reply
alone); a server killed mid-run, or a link that stops answering, ends the run within seconds with a
one-line error; bad servers and addresses are refused up front.

These need llama-cpp-python built with RPC (README's set-up commands build it so): without it they
fail, never skip."""

from __future__ import annotations

import json
import select
import signal
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
from cli_helpers import CLI, assert_one_line_error, localspec
from server_helpers import start
from test_parallel import PROMPTS, ask, assert_same_up_to_a_tie, passes_of

from benchmarks.harness.tcp_proxy import Proxy
from localspec.backend import rpc
from localspec.backend.devices import rpc_available
from localspec.backend.endpoints import parse_endpoints
from localspec.errors import LocalspecError

LONG_PROMPT = "Write a long story about a lighthouse keeper and the sea, chapter by chapter."


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def rpc_server(*extra: str) -> Iterator[tuple[str, subprocess.Popen]]:
    port = free_port()
    proc = subprocess.Popen(
        [*CLI, "rpc-server", "--port", str(port), "--threads", "1", *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    endpoint = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                rpc.check_server(endpoint, timeout=2)
                break
            except LocalspecError:
                assert proc.poll() is None, proc.stderr.read()
                assert time.monotonic() < deadline, "rpc-server did not come up"
                time.sleep(0.2)
        yield endpoint, proc
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def servers() -> Iterator[list[tuple[str, subprocess.Popen]]]:
    with rpc_server() as a, rpc_server() as b:
        yield [a, b]


def run_json(model: Path, *extra: str) -> dict:
    res = localspec(
        "run",
        "-m",
        str(model),
        "-p",
        "Name three rivers and where they flow.",
        "-n",
        "48",
        "--temp",
        "0",
        "--json",
        *extra,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_this_build_has_rpc():
    assert rpc_available(), "llama-cpp-python was built without -DGGML_RPC=ON (see README's set-up)"


def test_greedy_output_over_two_rpc_servers_equals_the_local_output(servers, smollm2_q4: Path):
    endpoints = ",".join(e for e, _ in servers)
    local = run_json(smollm2_q4, "-d", "none", "--no-lookup")
    remote = run_json(smollm2_q4, "-d", "none", "--no-lookup", "--rpc", endpoints)
    assert remote["tokens"] == local["tokens"]
    # Prompt lookup drafts, locally
    drafted = run_json(smollm2_q4, "--rpc", endpoints, "--tensor-split", "1,3")
    assert drafted["tokens"] == local["tokens"]


def test_a_server_over_rpc_serves_requests_together_each_as_alone(servers, smollm2_f16: Path):
    """`serve --parallel` with the target's layers on RPC servers: its lanes' passes are one
    context's, so they cross the link together; each request gets its reply alone."""
    endpoints = ",".join(e for e, _ in servers)
    served = start(
        "-m", str(smollm2_f16), "-d", "none", "--rpc", endpoints, "--parallel", "2", "--ctx", "512"
    )
    try:
        alone = [ask(served, p) for p in PROMPTS[:2]]
        with ThreadPoolExecutor(2) as pool:
            together = list(pool.map(lambda p: ask(served, p, stream=True), PROMPTS[:2]))
        for a, b in zip(alone, together, strict=True):
            assert_same_up_to_a_tie(a, b)
        assert passes_of(served, 2) > 0
    finally:
        assert served.stop() == 0, "".join(served.log)


def _long_run(model: Path, endpoints: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            *CLI,
            "run",
            "-m",
            str(model),
            "-p",
            LONG_PROMPT,
            "-n",
            "3000",
            "--ctx",
            "4096",
            "--temp",
            "0",
            "--rpc",
            endpoints,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _first_output(proc: subprocess.Popen, timeout: float = 120) -> None:
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready and proc.stdout.read1(1), proc.stderr.read().decode()


def _ends_with_one_line_error(proc: subprocess.Popen, within: float, fragment: str) -> float:
    t0 = time.monotonic()
    try:
        proc.wait(timeout=within)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"still running {within} s after the link failed")
    assert_one_line_error(
        subprocess.CompletedProcess(proc.args, proc.returncode, "", proc.stderr.read().decode()),
        fragment,
        alone=False,
    )
    return time.monotonic() - t0


def test_a_server_killed_mid_run_ends_the_run_within_seconds(servers, smollm2_q4: Path):
    proc = _long_run(smollm2_q4, ",".join(e for e, _ in servers))
    _first_output(proc)
    servers[1][1].send_signal(signal.SIGKILL)
    _ends_with_one_line_error(proc, 10, "RPC server")


def test_a_link_that_stops_answering_ends_the_run_within_seconds(servers, smollm2_q4: Path):
    host, port = servers[0][0].split(":")
    proxy = Proxy((host, int(port))).start()
    proc = _long_run(smollm2_q4, f"127.0.0.1:{proxy.port},{servers[1][0]}")
    _first_output(proc)
    proxy.freeze()
    took = _ends_with_one_line_error(proc, rpc.STALL_FLOOR_S + 15, "no answer")
    assert took >= rpc.STALL_FLOOR_S - 1


def test_servers_that_are_not_there_or_do_not_answer_are_refused_in_one_line(smollm2_q4: Path):
    port = free_port()
    res = localspec("run", "-m", str(smollm2_q4), "-p", "hi", "--rpc", f"127.0.0.1:{port}")
    assert_one_line_error(res, f"cannot reach RPC server 127.0.0.1:{port}")
    with socket.socket() as silent:  # accepts, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        res = localspec(
            "run", "-m", str(smollm2_q4), "-p", "hi", "--rpc", f"127.0.0.1:{silent.getsockname()[1]}"
        )
    assert_one_line_error(res, "did not answer within")


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("localhost", "is not HOST:PORT"),
        ("::1:50052", "is not HOST:PORT"),
        ("h:1,h:1", "given twice"),
        ("h:0", "is not HOST:PORT"),
    ],
)
def test_bad_rpc_addresses_are_refused(smollm2_q4: Path, value: str, fragment: str):
    assert_one_line_error(localspec("run", "-m", str(smollm2_q4), "-p", "hi", "--rpc", value), fragment)
    with pytest.raises(ValueError):
        parse_endpoints(value)


def test_bad_tensor_split_is_refused(smollm2_q4: Path):
    assert_one_line_error(
        localspec("run", "-m", str(smollm2_q4), "-p", "hi", "--tensor-split", "1,x"), "--tensor-split must be"
    )


def test_rpc_server_refuses_a_busy_port_warns_when_exposed_and_stops_on_sigterm():
    with rpc_server() as (endpoint, proc):
        res = localspec("rpc-server", "--port", endpoint.split(":")[1])
        assert_one_line_error(res, "the port is in use")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 128 + signal.SIGTERM
    exposed = subprocess.Popen(
        [*CLI, "rpc-server", "--host", "0.0.0.0", "--port", str(free_port())],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert "without authentication" in exposed.stderr.readline()
    finally:
        exposed.kill()
        exposed.wait()
    assert_one_line_error(localspec("rpc-server", "--host", "my-laptop"), "give an IPv4 address")
    assert_one_line_error(localspec("rpc-server", "--device", "NOPE"), "no device 'NOPE'")


def _send(sock: socket.socket, command: int, payload: bytes) -> bytes:
    sock.sendall(bytes([command]) + struct.pack("<Q", len(payload)) + payload)
    size = struct.unpack("<Q", rpc._recv(sock, 8))[0]
    return rpc._recv(sock, size)


def assert_on_a_tensor_outside_its_buffer(endpoint: str) -> None:
    """What llama.cpp's server asserts on (ggml-rpc.cpp's deserialize_tensor): a buffer allocated,
    then INIT_TENSOR naming a tensor in it whose data lies a terabyte past its end."""
    alloc_buffer, init_tensor = 0, 12  # RPC_CMD_*
    with rpc._connect(endpoint, 10) as sock:
        _send(sock, rpc.HELLO, bytes(rpc.CAPS_SIZE))
        buffer, _size = struct.unpack("<QQ", _send(sock, alloc_buffer, struct.pack("<IQ", 0, 4096)))
        # rpc_tensor: id, type (f32), buffer, ne[4], nb[4], op, op_params[16], flags, src[10], view_src,
        # view_offs, data, name
        tensor = struct.pack(
            "<QIQ4I4II16iI10QQQQ64s4x",
            1,
            0,
            buffer,
            1024,
            1,
            1,
            1,
            4,
            4096,
            4096,
            4096,
            0,
            *[0] * 16,
            0,
            *[0] * 10,
            0,
            0,
            buffer + 2**40,
            b"x",
        )
        with pytest.raises((EOFError, OSError)):
            _send(sock, init_tensor, tensor)  # the server dies with the connection


def test_a_message_that_makes_llama_cpp_assert_costs_its_sender_the_connection_not_the_service(
    smollm2_q4: Path,
):
    local = run_json(smollm2_q4, "-d", "none", "--no-lookup")
    with rpc_server() as (endpoint, proc):
        for _ in range(2):
            assert_on_a_tensor_outside_its_buffer(endpoint)
            deadline = time.monotonic() + 30
            while True:  # listening again within moments
                try:
                    rpc.check_server(endpoint, timeout=2)
                    break
                except LocalspecError:
                    assert time.monotonic() < deadline and proc.poll() is None
                    time.sleep(0.1)
        remote = run_json(smollm2_q4, "-d", "none", "--no-lookup", "--rpc", endpoint)
        assert remote["tokens"] == local["tokens"]
        assert proc.poll() is None
    log = proc.stderr.read()
    ended = [line for line in log.splitlines() if "ended llama.cpp's server" in line]
    assert len(ended) == 2 and all(
        "client 127.0.0.1:" in line and "GGML_ASSERT(tensor->data >= buffer_start" in line for line in ended
    ), log
    # One line each, no backtrace
    assert "Traceback" not in log and "#0 " not in log and "gdb" not in log, log


REGISTERED = """
import sys
from localspec.backend import rpc
from localspec.backend.devices import add_rpc_servers, device_list, local_gpus
assert device_list(None) is None  # nothing registered yet: llama.cpp's own choice
devices = rpc.connect([sys.argv[1]])
assert devices and add_rpc_servers([sys.argv[1]]) == devices  # registered once
listed = device_list(None)  # a load that names no devices (the draft's): this machine's GPUs only
assert listed is not None and list(listed)[-1] is None and len(listed) == 1 + len(local_gpus())
"""


def test_once_servers_are_registered_a_load_that_names_no_devices_stays_here():
    # In a process of its own: registered RPC devices stay registered for the process's life.
    with rpc_server() as (endpoint, _proc):
        res = subprocess.run([CLI[0], "-c", REGISTERED, endpoint], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr


def test_the_watchdog_gives_up_on_a_pass_far_past_what_its_size_took():
    timer, stalls = rpc.PassTimer(), []
    with timer(1):
        time.sleep(0.01)
    assert timer.per_token >= 0.01
    timer.since, timer.tokens = time.monotonic() - 1.0, 1
    assert timer.overdue(time.monotonic()) is None  # slow, but under the floor
    timer.since = time.monotonic() - rpc.STALL_FLOOR_S - 1
    assert timer.overdue(time.monotonic()) > rpc.STALL_FLOOR_S
    timer.tokens = 10_000  # a long prompt's pass may take longer
    assert timer.overdue(time.monotonic()) is None
    timer.tokens = 1
    done = threading.Event()
    rpc.watch(timer, ["h:1"], lambda message: (stalls.append(message), done.set()))
    assert done.wait(5) and "no answer from the RPC server(s) h:1" in stalls[0]


def test_a_client_that_sends_nothing_does_not_hold_the_server_from_the_next():
    """llama.cpp's server serves one client at a time: one that connects and stays silent held it
    from everyone. Once another waits, the silent one's connection is closed after --silent-timeout."""
    with rpc_server("--silent-timeout", "1") as (endpoint, proc):
        host, port = endpoint.split(":")
        with socket.create_connection((host, int(port))) as silent:
            time.sleep(0.3)  # accepted: the server waits on its first message
            rpc.check_server(endpoint, timeout=20)  # served once the silent one is closed
            silent.settimeout(5)
            assert silent.recv(1) == b""  # closed by the server
        with socket.create_connection((host, int(port))) as speaking:  # one that spoke is never closed
            speaking.sendall(bytes([rpc.HELLO]) + struct.pack("<Q", rpc.CAPS_SIZE) + bytes(rpc.CAPS_SIZE))
            speaking.settimeout(5)
            assert speaking.recv(8)
            with pytest.raises(LocalspecError, match="did not answer within"):
                rpc.check_server(endpoint, timeout=3)
