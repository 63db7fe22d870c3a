"""`localspec` as people run it: a separate process per generation with an empty cache directory
(XDG_CACHE_HOME), timed from its start to its exit; a server process; another process keeping a
core busy."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

CLI = [sys.executable, "-m", "localspec"]
TIMEOUT_S = 3600


@dataclass
class Finished:
    """A `run --json` process: its stats, tokens and text, and the seconds to its exit."""

    stats: dict
    tokens: list[int]
    text: str
    wall_s: float


def run_cli(args: Sequence[str], cache_dir: Path | None = None) -> Finished:
    """`localspec run ARGS --json` in a process of its own, with `cache_dir` as its cache (None: an
    empty one, removed after). A failed run ends the benchmark with its last words."""
    with tempfile.TemporaryDirectory() as fresh:
        env = {**os.environ, "XDG_CACHE_HOME": str(cache_dir or fresh)}
        cmd = [*CLI, "run", *map(str, args), "--json"]
        t0 = time.perf_counter()
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=TIMEOUT_S)
        wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[2:10])} ... failed: {res.stderr.strip()[-500:]}")
    out = json.loads(res.stdout)
    return Finished(out["stats"], out["tokens"], out["text"], wall)


def _spin() -> None:
    while True:
        pass


@contextmanager
def busy_core(on: bool = True) -> Iterator[None]:
    """Another process keeps one core busy meanwhile (as a build on a laptop), if `on`."""
    proc = multiprocessing.Process(target=_spin, daemon=True) if on else None
    if proc:
        proc.start()
    try:
        yield
    finally:
        if proc:
            proc.terminate()
            proc.join()


@contextmanager
def server(args: Sequence[str]) -> Iterator[int]:
    """`localspec serve ARGS` on a free port until the block ends; yields the port."""
    proc = subprocess.Popen(
        [*CLI, "serve", "--port", "0", *map(str, args)],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        for line in proc.stderr:  # type: ignore[union-attr]
            if m := re.search(r"on http://127\.0\.0\.1:(\d+)/v1", line):
                break
        else:
            raise SystemExit(f"the server did not start (exit {proc.wait()})")
        # Its later lines (a log line per request) are read, so that the pipe never fills and stalls it.
        threading.Thread(target=proc.stderr.read, daemon=True).start()  # type: ignore[union-attr]
        yield int(m.group(1))
    finally:
        proc.terminate()
        proc.wait(60)
