"""`localspec pull`, `models` and `rm`: the registry's aliases on this machine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from localspec.cli.options import user_errors


def pull(
    alias: Annotated[str, typer.Argument(help="Model alias from models.toml (see `localspec models`).")],
    dir: Annotated[Path | None, typer.Option("--dir", help="Download into this folder instead of the Hugging Face cache.")] = None,
    check: Annotated[bool, typer.Option("--check", help="Hash files pulled before too, and fetch again any that changed.")] = False,
) -> None:
    """Download an alias's target and draft GGUF files, with progress, resume and sha256 checks."""
    from huggingface_hub import constants

    from localspec.cli.views.pull_view import PullProgress
    from localspec.models.pulled import check_space, fetch, plan_pull
    from localspec.models.registry import load_registry

    with user_errors():
        entry = load_registry().get(alias)
        offline = bool(constants.HF_HUB_OFFLINE)
        plan = plan_pull(entry, offline)
        dest = dir or Path(constants.HF_HUB_CACHE)
        for warning in check_space(plan, dest, dir):
            typer.echo(f"warning: {warning}", err=True)
        with PullProgress(plan.total_bytes) as progress:
            manifest = fetch(entry, plan, progress, local_dir=dir, check=check)
    facts = ", ".join(f"{k} {v}" for k, v in entry.facts.items())
    typer.echo(f"pulled {alias}: {manifest.size_bytes() / 1e9:.2f} GB" + (f" ({facts})" if facts else ""), err=True)
    if entry.draft is None:
        typer.echo(f"{alias} has no draft model: `run` drafts with n-gram prompt lookup", err=True)


def models(
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON list instead of a table.")] = False,
) -> None:
    """List the aliases, what is pulled, and its size on disk."""
    from rich.console import Console
    from rich.table import Table

    from localspec.models.pulled import DamagedRecord, read_manifest
    from localspec.models.registry import load_registry

    with user_errors():
        registry = load_registry()
        rows = []
        for name, entry in registry.aliases.items():
            try:
                manifest, damaged = read_manifest(name), False
            except DamagedRecord:
                manifest, damaged = None, True
            pulled = bool(manifest and manifest.local_path("target"))
            rows.append({
                "alias": name,
                "description": entry.description,
                "pulled": pulled,
                "damaged": damaged,
                "target_files": [f.local for f in manifest.files.get("target", [])] if manifest else [],
                "draft_files": [f.local for f in manifest.files.get("draft", [])] if manifest else [],
                "size_bytes": manifest.size_bytes() if manifest else 0,
            })
    if json_out:
        typer.echo(json.dumps(rows))
        return
    table = Table(title="localspec models")
    for col in ("alias", "description", "pulled", "size"):
        table.add_column(col)
    for row in rows:
        size = f"{row['size_bytes'] / 1e9:.2f} GB" if row["pulled"] else "-"
        state = "damaged record: pull again" if row["damaged"] else "yes" if row["pulled"] else "no"
        table.add_row(row["alias"], row["description"], state, size)
    console = Console()
    console.print(table)
    for name, error in registry.errors.items():
        console.print(f"[yellow]skipped[/yellow] {error}")


def rm(alias: Annotated[str, typer.Argument(help="A pulled alias.")]) -> None:
    """Delete an alias's downloaded files (those another pulled alias uses stay)."""
    from localspec.models.pulled import remove_alias

    with user_errors():
        freed, kept = remove_alias(alias)
    typer.echo(f"removed {alias}: freed {freed / 1e9:.2f} GB", err=True)
    if kept:
        typer.echo(f"kept (used by another pulled alias): {', '.join(kept)}", err=True)
