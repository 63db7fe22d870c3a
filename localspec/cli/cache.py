"""`localspec cache`: what the user cache directory holds (the suffix caches), and emptying it."""

from __future__ import annotations

import typer

cache = typer.Typer(
    help="The cached files: earlier outputs kept for --lookup-method suffix.", no_args_is_help=True
)


@cache.command()
def show() -> None:
    """List the cached files and their sizes."""
    from localspec.drafters.suffix_cache import cache_dir, cached_files

    files = cached_files()
    for p in files:
        typer.echo(f"{p.stat().st_size:>12,} B  {p}")
    typer.echo(f"{len(files)} files, {sum(p.stat().st_size for p in files):,} bytes in {cache_dir()}")


@cache.command()
def clear() -> None:
    """Remove every cached file (the suffix caches hold generated text)."""
    from localspec.drafters.suffix_cache import cache_dir
    from localspec.drafters.suffix_cache import clear as remove

    try:
        n, size = remove()
    except OSError as e:
        typer.echo(f"error: cannot empty {cache_dir()}: {e.strerror or e}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"removed {n} files ({size:,} bytes) from {cache_dir()}")
