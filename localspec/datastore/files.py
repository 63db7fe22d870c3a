"""Which of the user's files a datastore holds, and their text.

A folder is walked for the files that match a --glob (all when none is given) and no --exclude;
hidden files and folders (.git, .venv, ...) and __pycache__ are never taken. A pattern matches a
file's path relative to the folder given, or its name. Symbolic links to folders are not followed
(no loops), nor links to files outside the folder unless asked (a link to /etc/shadow must not put it
in a datastore); only regular files are read (a named pipe would block the build forever), each whole
up to MAX_FILE_BYTES. What cannot be read, is binary (a NUL byte, or not UTF-8) or is larger is
skipped and counted, never an error."""

from __future__ import annotations

import fnmatch
import os
import stat
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from localspec.text_input import MAX_FILE_BYTES

NEVER = ("__pycache__",)


@dataclass
class Scan:
    files: list[Path] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # paths given that do not exist
    outside: int = 0  # links to files outside their folder, left out


def _matches(rel: str, patterns: Sequence[str]) -> bool:
    name = rel.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(rel, p) or fnmatch.fnmatchcase(name, p) for p in patterns)


def _walk(root: Path) -> Iterator[Path]:
    for folder, dirs, names in os.walk(root, onerror=lambda _e: None):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in NEVER)
        for name in sorted(names):
            if not name.startswith("."):
                yield Path(folder, name)


def _inside(path: Path, folder: Path) -> bool:
    try:
        return path.resolve().is_relative_to(folder.resolve())
    except (OSError, RuntimeError):  # a loop of links
        return False


def scan(
    paths: Sequence[Path], globs: Sequence[str] = (), excludes: Sequence[str] = (), follow_links: bool = False
) -> Scan:
    """The files under `paths` (files or folders) to index, each once, in a stable order; links
    out of a folder only with `follow_links` (a file given by name is taken as given)."""
    found = Scan()
    seen: set[Path] = set()
    for given in paths:
        given = given.absolute()
        if given.is_file():
            candidates: Iterator[Path] = iter([given])
        elif given.is_dir():
            candidates = _walk(given)
        else:
            found.missing.append(str(given))
            continue
        for path in candidates:
            rel = path.relative_to(given).as_posix() if path != given else path.name
            if (globs and not _matches(rel, globs)) or _matches(rel, excludes) or path in seen:
                continue
            if path != given and not follow_links and path.is_symlink() and not _inside(path, given):
                found.outside += 1
                continue
            seen.add(path)
            found.files.append(path)
    return found


@dataclass
class Skipped:
    counts: Counter = field(default_factory=Counter)  # reason -> files

    def add(self, reason: str, n: int = 1) -> None:
        if n:
            self.counts[reason] += n

    def __str__(self) -> str:
        return ", ".join(f"{n} {reason}" for reason, n in sorted(self.counts.items()))


def read_text(path: Path) -> tuple[str | None, bytes, str]:
    """(text, bytes, why skipped): text None when the file is skipped."""
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            return None, b"", "not regular files"  # pipes, devices, sockets
        with path.open("rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError:
        return None, b"", "unreadable"
    if len(data) > MAX_FILE_BYTES:
        return None, b"", "larger than 16 MB"
    if b"\0" in data[:8192]:
        return None, b"", "binary"
    try:
        return data.decode("utf-8"), data, ""
    except UnicodeDecodeError:
        return None, b"", "binary"
