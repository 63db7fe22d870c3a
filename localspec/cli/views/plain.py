"""The one way the CLI prints text through Rich: as text, never as markup.

Rich reads `[...]` in a string as markup, and what the CLI prints is full of text it did not
write: values (`[/INST]` is a real stop string, and raised MarkupError), paths, alias names and
descriptions, file names from the Hub, prompt ids, model output. Our own styling is a `style`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.console import Console
from rich.progress import TextColumn
from rich.table import Table
from rich.text import Text


def plain(value: object, style: str = "") -> Text:
    return Text(str(value), style=style)


def say(console: Console, *parts: object | tuple[object, str]) -> None:
    """One line of parts, each a value or a (value, style) pair; soft-wrapped: the terminal wraps
    what it shows, and piped output keeps its lines whole."""
    console.print(
        Text.assemble(*(part if isinstance(part, tuple) else str(part) for part in parts)),
        highlight=False,
        soft_wrap=True,
    )


def table(title: str, columns: Sequence[str], rows: Iterable[Sequence[object]]) -> Table:
    out = Table(title=plain(title))
    for column in columns:
        out.add_column(plain(column))
    for row in rows:
        out.add_row(*(plain(cell) for cell in row))
    return out


def description_column() -> TextColumn:
    """A progress bar's description (a file's name, a prompt's id), shown as it is."""
    return TextColumn("{task.description}", markup=False)
