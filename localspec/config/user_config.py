"""Defaults a user keeps: a TOML file in the user config directory and LOCALSPEC_* variables.

Both name a default model and draft (`model`, `draft`) and any setting of the settings record by
its field name (`threads`, `gpu_layers`, `draft_max`, ...; LOCALSPEC_DRAFT_MAX in the environment).
Precedence, highest first: a flag, the environment, the command's own defaults (bench's greedy
temperature), an alias's recommended settings (for the settings it names), the config file, the
built-in defaults."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import platformdirs

from localspec.config.settings import (
    FIELDS,
    KINDS,
    SettingError,
    Settings,
    of_types,
    parse,
    read_value,
    repeatable,
    value_types,
)
from localspec.errors import LocalspecError
from localspec.text_input import exists, from_arg, note, read_file

CONFIG_ENV = "LOCALSPEC_CONFIG"  # another config file than the one in the user config directory
REGISTRY_ENV = (
    "LOCALSPEC_REGISTRY"  # an alias file read after the shipped and the user's (registry/aliases.py)
)
ENV_PREFIX = "LOCALSPEC_"
MODEL_KEYS = ("model", "draft")
API_KEY_ENV = "LOCALSPEC_API_KEY"  # serve's --api-key, kept out of the process list
OTHER_ENV = {CONFIG_ENV, REGISTRY_ENV, API_KEY_ENV}  # LOCALSPEC_* variables that are not settings


@dataclass(frozen=True)
class Defaults:
    """One source of defaults: where it is, the model files it names, its settings by field name."""

    source: str
    model: str | None = None
    draft: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)


def config_path() -> Path:
    return Path(os.environ.get(CONFIG_ENV) or Path(platformdirs.user_config_dir("localspec")) / "config.toml")


def _checked(values: dict[str, Any], where: str, naming: Callable[[str], str]) -> dict[str, Any]:
    try:
        Settings().merged(values)
    except SettingError as e:
        raise LocalspecError(f"{where}{e.worded(naming)}") from None
    return values


def read_config(path: Path | None = None, notify: Callable[[str], None] = note) -> Defaults:
    """The config file's defaults (none when there is no file)."""
    path = path or config_path()
    if not exists(path, "config file"):
        return Defaults(str(path))
    try:
        data = tomllib.loads(read_file(path, "config file", notify))
    except tomllib.TOMLDecodeError as e:
        raise LocalspecError(f"config file {path} is not valid TOML: {e}") from None
    except RecursionError:
        raise LocalspecError(f"config file {path} nests too deeply") from None
    unknown = sorted(set(data) - set(FIELDS) - set(MODEL_KEYS))
    if unknown:
        raise LocalspecError(f"config file {path}: {unknown[0]!r} is not a setting (see `localspec config`)")
    for key in MODEL_KEYS:
        if key in data and not isinstance(data[key], str):
            raise LocalspecError(f"config file {path}: {key} must be a file path or an alias, in quotes")
    settings = {}
    for name in set(data) & set(FIELDS):
        value, types = data[name], value_types(name)
        if not of_types(value, types):
            raise LocalspecError(f"config file {path}: {name} must be {KINDS[types[-1]]}")
        try:
            settings[name] = tuple(value) if isinstance(value, list) else read_value(name, value)
        except LocalspecError as e:
            raise LocalspecError(f"config file {path}: {e}") from None
    return Defaults(
        str(path),
        data.get("model"),
        data.get("draft"),
        _checked(settings, f"config file {path}: ", lambda n: n),
    )


def pick(key: str, flag: str | None, env: Defaults, config: Defaults) -> tuple[str | None, str | None]:
    """`model` or `draft` by precedence, and where it came from ((None, None): nowhere)."""
    for source, value in (
        ("flag", flag),
        ("environment", getattr(env, key)),
        ("config file", getattr(config, key)),
    ):
        if value is not None:
            return value, source
    return None, None


def precedence(
    config: Defaults,
    recommended: Mapping[str, Any],
    env: Defaults,
    command: Mapping[str, Any] | None = None,
    flags: Mapping[str, Any] | None = None,
) -> list[tuple[str, Mapping[str, Any]]]:
    """The sources of settings, lowest first (the module's docstring says why in this order)."""
    sources = [
        ("config file", config.settings),
        ("alias", recommended),
        ("command", command or {}),
        ("environment", env.settings),
        ("flag", flags or {}),
    ]
    # A seed the user set (not the random one a command draws) asks for a text that repeats.
    given = {k: v for name, values in sources if name != "command" for k, v in values.items()}
    coupled = {k: v for k, v in repeatable(given).items() if k not in given}
    return [*sources, ("seed", coupled)] if coupled else sources


def layered(sources: list[tuple[str, Mapping[str, Any]]]) -> dict[str, tuple[Any, str]]:
    """Each setting's value and where it came from, `sources` given lowest first."""
    out = {name: (getattr(Settings(), name), "built-in") for name in FIELDS}
    for source, values in sources:
        out.update({name: (value, source) for name, value in values.items()})
    return out


def read_env(environ: Mapping[str, str] | None = None, notify: Callable[[str], None] = note) -> Defaults:
    """The defaults LOCALSPEC_* variables set (LOCALSPEC_MODEL, LOCALSPEC_THREADS, ...). A value
    that is not UTF-8 is read as every other text is (text_input); a model path is taken as the
    OS gives it, since file names need not be UTF-8."""
    environ = os.environ if environ is None else environ
    settings: dict[str, Any] = {}
    models: dict[str, str] = {}
    for var, text in environ.items():
        if not var.startswith(ENV_PREFIX) or var in OTHER_ENV:
            continue
        name = var.removeprefix(ENV_PREFIX).lower()
        if name in MODEL_KEYS:
            models[name] = text
        elif name in FIELDS:
            try:
                settings[name] = parse(name, from_arg(text, var, notify))
            except ValueError:
                raise LocalspecError(f"{var}={text!r}: must be {KINDS[value_types(name)[-1]]}") from None
        else:
            raise LocalspecError(
                f"{var} is not a setting (known: LOCALSPEC_MODEL, LOCALSPEC_DRAFT, LOCALSPEC_<SETTING>; "
                "see `localspec config`)"
            )
    return Defaults(
        "environment",
        models.get("model"),
        models.get("draft"),
        _checked(settings, "", lambda n: f"{ENV_PREFIX}{n.upper()}"),
    )
