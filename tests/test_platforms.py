"""Every desktop: nothing Linux-only at import or on the common path. Windows is stood in for by
this Python with what only Linux (or only POSIX) has taken away: signals Windows lacks, os
functions it lacks, POSIX-only modules, and platform.system() saying Windows, so that /proc and
the like are not read where a real Windows has none."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

from cli_helpers import assert_one_line_error

import localspec

# The libraries localspec depends on choose their branch by sys.platform, which stays "linux" here
# (their Windows branch would fail on what this machine lacks): they are loaded before the names go,
# as a real Windows loads them on their own branch. What is left to fail is localspec's own code.
POSIX_ONLY = """
import llama_cpp, numpy, platformdirs, filelock, rich.console, typer, huggingface_hub, gguf
import starlette.applications, uvicorn, prometheus_client
import os, platform, signal, sys
for name in ("SIGHUP", "SIGKILL", "SIGPIPE", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGCHLD",
             "SIGWINCH", "SIGTSTP", "SIGCONT", "setitimer", "alarm", "pause", "pthread_kill",
             "pthread_sigmask", "siginterrupt", "getitimer"):
    if hasattr(signal, name):
        delattr(signal, name)
for name in ("sched_getaffinity", "sched_setaffinity", "sysconf", "getuid", "geteuid", "getgid",
             "fork", "killpg", "setsid", "getpgid", "getloadavg", "uname", "mkfifo", "statvfs",
             "nice", "wait3", "wait4", "getppid"):
    if hasattr(os, name):
        delattr(os, name)
for name in ("fcntl", "termios", "resource", "pwd", "grp", "tty", "pty", "readline"):
    sys.modules[name] = None  # import fails, as it does on Windows
platform.system = lambda: "Windows"
"""
MODULES = sorted(
    m.name for m in pkgutil.walk_packages(localspec.__path__, "localspec.") if m.name != "localspec.__main__"
)


def windows_like(
    code: str, *args: str, env: dict | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", POSIX_ONLY + code, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def cli_windows_like(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return windows_like("sys.argv[0] = 'localspec'\nfrom localspec.cli import main\nmain()", *args, env=env)


def test_the_stand_in_takes_away_what_windows_lacks():
    res = windows_like(
        "import signal, os\nassert not hasattr(signal, 'SIGHUP') and not hasattr(os, 'sysconf')\nimport "
        "termios"
    )
    assert res.returncode != 0 and "termios" in res.stderr  # the stand-in is no stand-in if it fails open


def test_every_module_imports_without_linux_only_names():
    res = windows_like(
        f"import importlib\nfor name in {MODULES!r}:\n    "
        f"importlib.import_module(name)\nprint(len({MODULES!r}))"
    )
    assert res.returncode == 0, res.stderr
    assert int(res.stdout) == len(MODULES) > 80


def test_help_run_and_chat_help_without_linux_only_names(tiny, tmp_path):
    import os

    env = {
        **os.environ,
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
    }
    helped = cli_windows_like("--help", env=env)
    assert helped.returncode == 0 and "run" in helped.stdout, helped.stderr
    chat_help = cli_windows_like("chat", "--help", env=env)
    assert chat_help.returncode == 0 and "--system" in chat_help.stdout, chat_help.stderr
    ran = cli_windows_like(
        "run",
        "-m",
        str(tiny.target),
        "-d",
        str(tiny.close),
        "-n",
        "8",
        "--temp",
        "0",
        "-p",
        "the cat",
        env=env,
    )
    assert ran.returncode == 0, ran.stderr
    assert "8 tokens in" in ran.stderr and "Traceback" not in ran.stderr
    assert_one_line_error(
        cli_windows_like("run", "-m", str(tmp_path / "missing.gguf"), "-p", "x", env=env), "missing.gguf"
    )
