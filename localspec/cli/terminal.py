"""The terminal's own echo while a reply streams."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def control_chars_unechoed() -> Iterator[None]:
    """While text streams, the terminal does not echo Ctrl-C as `^C` (ECHOCTL): the echo lands
    inside the reply, where the cursor is, and the words the step still delivers follow it. POSIX
    terminals only (Windows' console echoes nothing); stdin not a terminal: nothing to change."""
    try:
        import termios
    except ImportError:
        yield
        return
    echoctl = getattr(termios, "ECHOCTL", 0)
    try:
        fd = sys.stdin.fileno()
        before = termios.tcgetattr(fd) if echoctl and sys.stdin.isatty() else None
    except (OSError, ValueError, termios.error):
        before = None
    if before is None:
        yield
        return
    quiet = list(before)
    quiet[3] &= ~echoctl  # the local modes
    termios.tcsetattr(fd, termios.TCSANOW, quiet)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSANOW, before)
