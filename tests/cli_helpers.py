"""The command line as the tests run it: one way to start it, and one check of a one-line error."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping

import pexpect
from typer.testing import CliRunner, Result

from localspec.cli.app import app

CLI = [sys.executable, "-m", "localspec"]  # what every test process runs (a pty, a server, a run)


def localspec(
    *args: str, input: str | None = None, timeout: float = 120, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess:
    """`localspec ARGS` in a process of its own, to its end; `env` replaces the environment."""
    env = {**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [*CLI, *args], input=input, capture_output=True, text=True, timeout=timeout, env=env
    )


def in_terminal(*args: str, env: Mapping[str, str]) -> pexpect.spawn:
    """`localspec ARGS` in a pseudo-terminal of 40x120, for what a person types and sees."""
    return pexpect.spawn(
        CLI[0],
        [*CLI[1:], *args],
        env=dict(env),
        encoding="utf-8",
        codec_errors="replace",
        timeout=120,
        dimensions=(40, 120),
    )


def in_process(*args: str, env: Mapping[str, str] | None = None, catch_exceptions: bool = True) -> Result:
    """`localspec ARGS` inside this process: for the property tests' hundreds of runs, and for
    tests that patch a function inside the command."""
    return CliRunner().invoke(app, list(args), env=dict(env or {}), catch_exceptions=catch_exceptions)


def assert_one_line_error(res: subprocess.CompletedProcess, fragment: str = "", alone: bool = True) -> str:
    """The run failed with one `error: ...` line holding `fragment`, last on stderr and no traceback
    (`alone`: and nothing else on stderr); that line is returned."""
    assert res.returncode != 0, res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], res.stderr
    assert not alone or len(lines) == 1, res.stderr
    assert fragment in errors[0], errors[0]
    return errors[0]


def in_tmux(
    *args: str, width: int, height: int = 40, env: Mapping[str, str] | None = None, timeout: float = 300
) -> str:
    """The screen's text (scrollback included, wrapped rows joined as tmux joins them) after
    `localspec ARGS` ran to its end in a tmux pane of width x height: a real terminal, which, unlike
    an emulator library, forgets a pending wrap when the cursor is restored."""
    assert shutil.which("tmux"), "these tests need tmux (the system package: apt-get install tmux)"
    server = f"localspec-test-{os.getpid()}-{time.monotonic_ns()}"
    tmux = ["tmux", "-L", server]
    with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as conf:
        conf.write("set -g remain-on-exit on\nset -g history-limit 50000\nset -g status off\n")
    env = {**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1"}
    try:
        command = shlex.join([*CLI, *args])
        subprocess.run(
            [*tmux, "-f", conf.name, "new-session", "-d", "-x", str(width), "-y", str(height), command],
            env=env,
            check=True,
            timeout=30,
        )
        deadline = time.monotonic() + timeout
        while (
            subprocess.run(
                [*tmux, "list-panes", "-F", "#{pane_dead}"], capture_output=True, text=True
            ).stdout.strip()
            != "1"
        ):
            assert time.monotonic() < deadline, f"still running after {timeout} s: {command}"
            time.sleep(0.2)
        screen = subprocess.run(
            [*tmux, "capture-pane", "-p", "-J", "-S", "-", "-E", "-"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
        os.unlink(conf.name)
    lines = [line.rstrip() for line in screen.splitlines() if not line.startswith("Pane is dead")]
    return "\n".join(lines).strip("\n")
