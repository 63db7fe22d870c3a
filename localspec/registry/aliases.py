"""Model aliases: target + draft GGUF pairs on the Hugging Face Hub, from models.toml files.

Read in order, later files replacing earlier aliases whole: the shipped models.toml, the user's
`<config dir>/models.toml`, then the file named by LOCALSPEC_REGISTRY."""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import platformdirs

from localspec.config.settings import (
    ALIAS_KEYS,
    SettingError,
    Settings,
    of_types,
    value_types,
)
from localspec.config.user_config import REGISTRY_ENV
from localspec.errors import LocalspecError
from localspec.text_input import exists, read_file

APP_NAME = "localspec"
# Alias names become file names (pulled records): no path separators, no "..", nothing hidden.
ALIAS_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
# The Hub's rule for a repository id (huggingface_hub's validate_repo_id), checked as the file is read.
HUB_REPO = re.compile(r"[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}", re.ASCII)
FACTS: dict[str, type | tuple[type, ...]] = {"license": str, "gated": bool, "memory_gb": (int, float)}


@dataclass(frozen=True)
class FileSpec:
    repo: str  # "" for a local file
    quant: str | None = None
    file: str | None = None
    revision: str | None = None
    path: str | None = None  # a GGUF on this machine, instead of a repo

    @property
    def local(self) -> Path | None:
        return Path(self.path) if self.path else None


@dataclass(frozen=True)
class Alias:
    name: str
    description: str
    target: FileSpec
    draft: FileSpec | None
    settings: dict[str, Any] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)

    def local_files(self, with_draft: bool = True) -> list[Path]:
        """The files this alias names on this machine (`path = ...`); an error if one is missing."""
        specs = (self.target, self.draft if with_draft else None)
        paths = [spec.local for spec in specs if spec is not None and spec.local is not None]
        for path in paths:
            if not exists(path, f"{self.name}'s file"):
                raise LocalspecError(f"{self.name} names {path}, which does not exist")
        return paths


@dataclass
class Registry:
    aliases: dict[str, Alias] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # alias -> what is wrong with its entry

    def get(self, name: str) -> Alias:
        if name in self.aliases:
            return self.aliases[name]
        if name in self.errors:
            raise LocalspecError(self.errors[name])
        close = difflib.get_close_matches(name, list(self.aliases), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else "; `localspec models` lists them"
        raise LocalspecError(f"unknown model alias {name!r}{hint}")


def user_registry_path() -> Path:
    return Path(platformdirs.user_config_dir(APP_NAME)) / "models.toml"


def load_registry() -> Registry:
    registry = Registry()
    shipped = resources.files("localspec").joinpath("models.toml").read_text(encoding="utf-8")
    _merge(registry, shipped, "shipped models.toml")
    sources = [user_registry_path()]
    if os.environ.get(REGISTRY_ENV):
        sources.append(Path(os.environ[REGISTRY_ENV]).expanduser())
    for path in sources:
        if path.is_file():
            text = read_file(path, "registry")
            _merge(registry, text, str(path))
        elif path != sources[0]:
            raise LocalspecError(f"{REGISTRY_ENV} names a file that does not exist: {path}")
    return registry


def _merge(registry: Registry, text: str, source: str) -> None:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise LocalspecError(f"{source} is not valid TOML: {e}") from None
    except RecursionError:
        raise LocalspecError(f"{source} nests too deeply") from None
    for name, entry in data.items():
        registry.aliases.pop(name, None)
        registry.errors.pop(name, None)
        try:
            check_alias_name(name)
            registry.aliases[name] = parse_alias(name, entry)
        except ValueError as e:
            registry.errors[name] = f"{source}: alias {name!r}: {e}"


def check_alias_name(name: str) -> None:
    if not ALIAS_NAME.fullmatch(name) or ".." in name:
        raise ValueError(
            "an alias name is letters, digits, '.', '_', '-' and ':' (no path separators, no '..')"
        )


def _file_spec(value: Any, key: str) -> FileSpec:
    if not isinstance(value, dict):
        raise ValueError(f'{key} must be a table like {{ repo = "owner/name", quant = "Q4_K_M" }}')
    if "path" in value:
        path, others = value["path"], sorted(set(value) - {"path"})
        if others:
            raise ValueError(f"{key}.path names a local file: it goes without {key}.{others[0]}")
        if (
            not isinstance(path, str)
            or not path.endswith(".gguf")
            or not Path(path).expanduser().is_absolute()
        ):
            raise ValueError(f"{key}.path must be the absolute path of a .gguf file")
        return FileSpec("", path=str(Path(path).expanduser()))
    unknown = set(value) - {"repo", "quant", "file", "revision"}
    if unknown:
        raise ValueError(f"{key}.{sorted(unknown)[0]} is not a known field")
    repo = value.get("repo")
    if (
        not isinstance(repo, str)
        or not HUB_REPO.fullmatch(repo)
        or ".." in repo
        or "--" in repo
        or repo.endswith(".git")
    ):
        raise ValueError(
            f"{key}.repo must be 'owner/name' as the Hub spells them (letters, digits, '-', '_', '.'): not "
            f"{str(repo)[:60]!r}"
        )
    quant, file = value.get("quant"), value.get("file")
    if (quant is None) == (file is None):
        raise ValueError(f"{key} needs exactly one of quant or file")
    for sub in ("quant", "file", "revision"):
        if value.get(sub) is not None and not isinstance(value[sub], str):
            raise ValueError(f"{key}.{sub} must be a string")
    if file is not None and not file.endswith(".gguf"):
        raise ValueError(f"{key}.file must name a .gguf file")
    return FileSpec(repo, quant, file, value.get("revision"))


def parse_alias(name: str, entry: Any) -> Alias:
    if not isinstance(entry, dict):
        raise ValueError("must be a table")
    if "target" not in entry:
        raise ValueError("target is missing")
    kinds = {**{k: value_types(k) for k in ALIAS_KEYS}, **FACTS}
    known = {"description", "target", "draft", *kinds}
    unknown = sorted(set(entry) - known)
    if unknown:
        raise ValueError(f"{unknown[0]} is not a known field")
    description = entry.get("description", "")
    if not isinstance(description, str):
        raise ValueError("description must be a string")
    values = {}
    for key, types in kinds.items():
        if key in entry:
            value = entry[key]
            types = types if isinstance(types, tuple) else (types,)
            if not of_types(value, types):
                raise ValueError(f"{key} has the wrong type")
            values[key] = value
    settings = {k: v for k, v in values.items() if k in ALIAS_KEYS}
    try:
        Settings().merged(settings)
    except SettingError as e:
        raise ValueError(e.worded(lambda n: n)) from None
    return Alias(
        name=name,
        description=description,
        target=_file_spec(entry["target"], "target"),
        draft=_file_spec(entry["draft"], "draft") if "draft" in entry else None,
        settings=settings,
        facts={k: v for k, v in values.items() if k in FACTS},
    )
