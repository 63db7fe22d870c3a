"""`localspec index`: datastores of the user's own files, which --datastore drafts from."""

from __future__ import annotations

import datetime
import os
from pathlib import Path
from typing import Annotated

import typer

from localspec.cli.options import signals_interrupt, user_errors
from localspec.errors import LocalspecError

# POSIX modes keep the files private where they mean something; Windows ignores them (the user
# data directory's own permissions are what guard them there), so the help promises nothing there.
PRIVATE = " (readable by you alone)" if os.name == "posix" else ""
index = typer.Typer(
    help="Datastores of your files (code, notes, docs) that --datastore NAME drafts from. They hold the "
    f"files' text, as token ids, in the user data directory{PRIVATE}: `index rm` removes one.",
    no_args_is_help=True,
)

NameArg = Annotated[
    str, typer.Argument(metavar="NAME", help="The datastore's name (letters, digits, '.', '_', '-').")
]
TokenizerOpt = Annotated[
    str | None,
    typer.Option(
        "-m",
        "--model",
        metavar="FILE|ALIAS",
        help="The GGUF (or pulled alias) whose tokenizer indexes the files (default: the demo model's); "
        "models of the same vocabulary draft from it.",
    ),
]


def _tokenizer(model: str | None):
    from localspec.backend.tokenizer import Tokenizer
    from localspec.session.model_files import resolve

    files, _ = resolve(model, "none", lambda m: typer.echo(m, err=True))
    return Tokenizer.load(files.model)


def _build(meta, tokenizer, previous=None):
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from localspec.datastore import build

    console = Console(stderr=True)
    columns = (
        TextColumn("tokenizing"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("files · {task.fields[tokens]:,} tokens"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task("", total=None, tokens=0)
        report = build.build(
            meta,
            tokenizer,
            previous,
            lambda done, total, tokens: bar.update(task, completed=done, total=total, tokens=tokens),
        )
    return report


def _said(report, verb: str) -> None:
    from localspec.datastore import store

    meta = report.meta
    size = store.disk_size(meta.name)
    typer.echo(
        f"{verb} {meta.name}: {meta.n_tokens:,} tokens from {len(meta.files)} files in "
        f"{report.seconds:.1f} s "
        f"(tokenized by {Path(meta.model).name}), {size / 1e6:.1f} MB in {store.folder(meta.name)}"
    )
    changes = [
        f"{n} {what}"
        for n, what in (
            (report.added, "added"),
            (report.changed, "changed"),
            (report.removed, "removed"),
            (report.unchanged, "unchanged"),
        )
        if n
    ]
    if verb == "updated" and changes:
        typer.echo(f"files: {', '.join(changes)}")
    if report.skipped.counts:
        typer.echo(f"skipped: {report.skipped}", err=True)
    for path in report.missing:
        typer.echo(f"warning: {path} does not exist (left out)", err=True)


@index.command("build")
def build_(
    name: NameArg,
    paths: Annotated[
        list[Path],
        typer.Argument(
            metavar="PATH",
            help="Files and folders to index (folders are walked; hidden files and folders are not).",
        ),
    ],
    model: TokenizerOpt = None,
    glob: Annotated[
        list[str] | None,
        typer.Option(
            "--glob",
            metavar="PATTERN",
            help="Take only files matching this pattern, by path under the folder or by name (repeatable; "
            "e.g. '*.py').",
        ),
    ] = None,
    exclude: Annotated[
        list[str] | None,
        typer.Option(
            "--exclude",
            metavar="PATTERN",
            help="Leave out files matching this pattern (repeatable; e.g. 'tests/*').",
        ),
    ] = None,
    follow_links: Annotated[
        bool,
        typer.Option(
            "--follow-links",
            help="Take files that links in a folder point to outside it too (left out by default).",
        ),
    ] = False,
) -> None:
    """Tokenize files with a model's tokenizer into a datastore (replacing one of the same name)."""
    from localspec.datastore import build, store
    from localspec.text_input import exists

    with user_errors(), signals_interrupt():
        store.check_name(name)
        missing = [str(p) for p in paths if not exists(p, "path")]
        if missing:
            raise LocalspecError(f"no such file or folder: {missing[0]}")
        with _tokenizer(model) as tokenizer:
            report = _build(
                build.new_meta(name, tokenizer, paths, glob or (), exclude or (), follow_links), tokenizer
            )
    _said(report, "built")
    typer.echo(f'next: localspec run --datastore {name}{f" -m {model}" if model else ""} "..."', err=True)


@index.command()
def update(
    name: NameArg,
    model: Annotated[
        str | None,
        typer.Option(
            "-m",
            "--model",
            metavar="FILE|ALIAS",
            help="The model to tokenize with (default: the one that built it; its vocabulary must be the "
            "same).",
        ),
    ] = None,
) -> None:
    """Bring a datastore up to date with its files: only files changed since (by size, time and
    hash) are tokenized again."""
    from localspec.datastore import build, store

    with user_errors(), signals_interrupt():
        previous = store.usable_meta(name)
        with _tokenizer(model or previous.model) as tokenizer:
            report = _build(build.again(previous, tokenizer), tokenizer, previous)
    _said(report, "updated")


@index.command("list")
def list_(
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON list instead of a table.")] = False,
) -> None:
    """The datastores, their size and what they were built from."""
    import json

    from rich.console import Console

    from localspec.cli.views.plain import say, table
    from localspec.datastore import store

    rows = []
    for name in store.names():
        try:
            meta = store.read_meta(name)
        except store.Damaged as e:
            rows.append({"name": name, "damaged": str(e), "bytes": store.disk_size(name)})
            continue
        built = datetime.datetime.fromtimestamp(meta.built).isoformat(timespec="minutes")
        rows.append(
            {
                "name": name,
                "tokens": meta.n_tokens,
                "files": len(meta.files),
                "bytes": store.disk_size(name),
                "built": built,
                "model": meta.model,
                "paths": meta.paths,
            }
        )
    if json_out:
        typer.echo(json.dumps(rows, indent=2))
        return
    console = Console()
    if not rows:
        say(console, f"no datastores in {store.root()}: `localspec index build NAME PATH...` makes one")
        return
    cells = [
        (r["name"], "damaged: " + r["damaged"], "", f"{r['bytes'] / 1e6:.1f} MB", "", "")
        if "damaged" in r
        else (
            r["name"],
            f"{r['tokens']:,}",
            r["files"],
            f"{r['bytes'] / 1e6:.1f} MB",
            r["built"],
            ", ".join(r["paths"]),
        )
        for r in rows
    ]
    console.print(
        table(f"datastores in {store.root()}", ("name", "tokens", "files", "size", "built", "from"), cells)
    )


@index.command()
def rm(name: NameArg) -> None:
    """Remove a datastore (the text it holds goes with it)."""
    from localspec.datastore import store

    with user_errors():
        size = store.remove(name)
    typer.echo(f"removed {name} ({size / 1e6:.1f} MB)")
