"""What the settings record says of each field: its names on the command line, in chat, in a
config file and in a server request, its --help panel, when it may change and how it is checked."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from localspec.config.checks import one_of

LOAD = "load"
GENERATION = "generation"
# The panels of --help a setting's option shows in.
MODEL, SAMPLING, PERFORMANCE, DRAFTING, SERVER = "Model", "Sampling", "Performance", "Drafting", "Server"
DRAFT_POLICIES = ("sample", "greedy")
RANDOM_SEED = -1  # as in llama.cpp


@dataclass(frozen=True)
class About:
    """A field's names and nature: `flag` on the command line (its chat /set key is the flag without
    dashes), with its `short` flags, the `panel` of --help it shows in and the `metavar` its value
    shows as (default: its choices, or its type), `api` in a server request (None: not settable
    there), `phase` LOAD or GENERATION, `alias` whether models.toml may recommend it, `server_only`
    whether only `serve` takes it, `choices` the values it takes (if a fixed few), `check` its
    validation (a problem or None), `file` whether the user names a file holding the value (flag,
    /set, config file) where a request gives the value itself."""

    flag: str
    help: str
    short: tuple[str, ...] = ()
    panel: str = DRAFTING
    metavar: str | None = None
    phase: str = GENERATION
    api: str | None = None
    alias: bool = True
    server_only: bool = False
    choices: tuple[str, ...] = ()
    check: Callable[[Any, Any], str | None] = lambda _v, _s: None  # (value, settings) -> problem
    file: bool = False

    @property
    def key(self) -> str:
        return self.flag.removeprefix("--")


def described(**kw: Any) -> Any:
    """A field's metadata: its About (a choice of values is checked as such)."""
    if "choices" in kw:
        kw["check"] = one_of(kw["choices"])
    return {"about": About(**kw)}
