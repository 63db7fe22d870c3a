"""The command line: the Typer app, one module per command, and views/ for every Rich rendering."""

from localspec.cli.app import main

__all__ = ["main"]
