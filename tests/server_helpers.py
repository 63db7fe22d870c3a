"""A `localspec serve` process on a free loopback port, and raw HTTP calls to it."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import threading
from dataclasses import dataclass, field

import openai
from cli_helpers import CLI, localspec


@dataclass
class Served:
    proc: subprocess.Popen
    port: int
    log: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def client(self, key: str = "none") -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url, api_key=key, max_retries=0, timeout=120)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout)


def start(*args: str) -> Served:
    """A server on a free port; returns once it says where it listens."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [*CLI, "serve", "--port", "0", *args],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    assert proc.stderr is not None
    log: list[str] = []
    ready = threading.Event()
    found: list[int] = []

    def read() -> None:
        for line in proc.stderr:  # type: ignore[union-attr]
            log.append(line)
            m = re.search(r"on http://\S+:(\d+)/v1", line)
            if m and not found:
                found.append(int(m.group(1)))
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    assert ready.wait(120) and found, "".join(log)
    return Served(proc, found[0], log)


def call(
    served: Served,
    method: str,
    path: str,
    body: object = None,
    headers: dict[str, str] | None = None,
    raw: bytes | None = None,
):
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=120)
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    conn.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
    res = conn.getresponse()
    payload = res.read()
    conn.close()
    try:
        parsed = json.loads(payload)
    except ValueError:
        parsed = payload.decode()
    return res.status, parsed, dict(res.getheaders())


def assert_serves_what_run_does(models: list[str], prompt: str, drafting: str) -> None:
    """A server of `models` (-m/-d arguments) says it drafts with `drafting` and completes `prompt`
    greedily as `localspec run --raw` does."""
    run = json.loads(
        localspec("run", *models, "-p", prompt, "-n", "24", "--temp", "0", "--raw", "--json").stdout
    )
    served = start(*models)
    try:
        assert any(f"drafting: {drafting}" in line for line in served.log), served.log
        reply = served.client().completions.create(model="any", prompt=prompt, max_tokens=24, temperature=0)
        assert reply.choices[0].text == run["text"]
    finally:
        assert served.stop() == 0
