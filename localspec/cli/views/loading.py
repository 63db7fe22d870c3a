"""A spinner while the models load: which files, how large, at a terminal only."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from rich.console import Console

from localspec.cli.views.plain import plain

if TYPE_CHECKING:
    from localspec.session.model_files import ModelFiles


def _size(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def describe(files: ModelFiles) -> str:
    parts = []
    for role, path in (("target", files.model), ("draft", files.draft)):
        if path is not None:
            size = path.stat().st_size if path.is_file() else 0
            parts.append(f"{role} {path.name} ({_size(size)})")
    if files.mtp:
        parts.append("with its MTP heads")
    return "loading " + ", ".join(parts)


@contextlib.contextmanager
def loading(files: ModelFiles, shown: bool = True) -> Iterator[None]:
    """A spinner on stderr naming the files while the body loads them; nothing when stderr is no
    terminal (or not `shown`): what is printed meanwhile goes above it."""
    console = Console(stderr=True)
    if not shown or not console.is_terminal:
        yield
        return
    with console.status(plain(describe(files)), spinner="dots"):
        yield
