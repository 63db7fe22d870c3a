"""The one record of user settings: every field once, with its default, its validation, when it may
change, and the name each front end knows it by.

Precedence: a command-line flag (or chat's /set, or a request's field) over an alias's recommended
setting from models.toml over the built-in default. Fields fixed at load size what is loaded
(contexts, threads, GPU layers, the sequences a draft tree needs, which drafters exist); the others
may change between generations (chat's /set, a server's per-request overrides)."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from localspec.backend.grammar import schema_grammar
from localspec.config.about import GENERATION, RANDOM_SEED, About
from localspec.config.checks import literal
from localspec.config.drafting_settings import DraftingSettings
from localspec.config.load_settings import LoadSettings
from localspec.config.sampling_settings import SamplingSettings
from localspec.errors import LocalspecError
from localspec.text_input import read_bytes


@dataclass(frozen=True)
class Settings(DraftingSettings, LoadSettings, SamplingSettings):
    """Every setting: sampling's, then loading's, then drafting's fields (dataclasses order a
    subclass's fields from its last base's first)."""

    @property
    def constraint(self) -> str | None:
        """The GBNF the output must match (None: none)."""
        return schema_grammar(self.json_schema) if self.json_schema is not None else self.grammar

    @property
    def lookup_via(self) -> str:
        """The prompt-lookup method in use: suffix lookup whenever a datastore is given."""
        return "suffix" if self.datastore else self.lookup_method

    @property
    def rng_seed(self) -> int | None:
        """The seed a random generator starts from (None: fresh entropy)."""
        return None if self.seed == RANDOM_SEED else self.seed

    @staticmethod
    def about(name: str) -> About:
        return FIELDS[name]

    def validate(self) -> None:
        """Raise SettingError for the first field whose value is out of bounds."""
        for name, about in FIELDS.items():
            problem = about.check(getattr(self, name), self)
            if problem:
                raise SettingError(name, problem)

    def merged(self, values: Mapping[str, Any]) -> Settings:
        """These settings with `values` (field name -> value) over them, validated."""
        unknown = set(values) - set(FIELDS)
        if unknown:
            raise LocalspecError(f"unknown setting {sorted(unknown)[0]!r}")
        out = replace(
            self, **{k: tuple(v) if _TYPES[k].startswith("tuple") else v for k, v in values.items()}
        )
        out.validate()
        return out


FIELDS: dict[str, About] = {f.name: f.metadata["about"] for f in fields(Settings)}
_TYPES = {f.name: str(f.type) for f in fields(Settings)}


def value_types(name: str) -> tuple[type, ...]:
    """The Python types a value of this field may have (as TOML or JSON give it)."""
    kinds: tuple[tuple[str, tuple[type, ...]], ...] = (
        ("bool", (bool,)),
        ("int", (int,)),
        ("float", (int, float)),
        ("tuple", (list, tuple)),
    )
    return next((types for prefix, types in kinds if _TYPES[name].startswith(prefix)), (str,))


# What a value of each of those types is called in an error.
KINDS = {bool: "true or false", int: "an integer", float: "a number", tuple: "a list of texts", str: "text"}


def of_types(value: Any, types: tuple[type, ...]) -> bool:
    """Whether `value` (as TOML or JSON give it) is of one of `types`; a bool is no number there,
    and a list (a repeatable setting's) holds text alone."""
    if isinstance(value, list | tuple) and not all(isinstance(v, str) for v in value):
        return False
    return isinstance(value, types) and (bool in types or not isinstance(value, bool))


def typed(value: Any) -> str:
    """A setting's value as a user would type it (`localspec config`, chat's /set)."""
    if value is None:
        return "default"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return " ".join(shlex.quote(v) for v in value) if value else "none"
    if isinstance(value, str) and ("\n" in value or len(value) > 80):
        return f"({len(value)} characters)"  # a file's text (--grammar, --json-schema)
    return shlex.quote(value) if isinstance(value, str) else str(value)


def read_value(name: str, value: Any) -> Any:
    """A value as the user gave it (flag, /set, config file): for a file field, the file's text."""
    if value is None or not FIELDS[name].file:
        return value
    try:
        return read_bytes(Path(value).expanduser(), "file").decode("utf-8")
    except UnicodeDecodeError:
        raise SettingError(name, literal(f"file {value} is not UTF-8 text") or "") from None
    except LocalspecError as e:
        raise SettingError(name, literal(str(e)) or "") from None


def parse(name: str, text: str) -> Any:
    """A value typed as text (chat's /set), for field `name`."""
    kind = value_types(name)[-1]
    if kind is bool:
        if text.lower() not in ("true", "false", "on", "off", "1", "0"):
            raise ValueError(text)
        return text.lower() in ("true", "on", "1")
    if kind is tuple:
        return (text,) if text else ()
    if FIELDS[name].file:
        return read_value(name, text) if text not in ("", "none") else None
    return kind(text)


def repeatable(values: Mapping[str, Any]) -> dict[str, Any]:
    """What the user set (`values`), with coupled verification where they set a seed and no verify:
    standard verification's text depends on how far each step drafted, which auto decides from
    timings, so only coupled verification makes a seed repeat."""
    if values.get("seed") not in (None, RANDOM_SEED) and "verify" not in values:
        return {**values, "verify": "coupled"}
    return dict(values)


# What models.toml may recommend for an alias (and the types its values must have).
ALIAS_KEYS = [name for name, about in FIELDS.items() if about.alias]
PER_GENERATION = [name for name, about in FIELDS.items() if about.phase == GENERATION]


class SettingError(LocalspecError):
    """A setting out of bounds. Each front end words it with its own name for the field (and for
    the fields the problem refers to, written {field_name} in it)."""

    def __init__(self, name: str, problem: str) -> None:
        self.name, self.problem = name, problem
        super().__init__(self.worded(lambda n: FIELDS[n].flag))

    def worded(self, naming: Callable[[str], str]) -> str:
        return f"{naming(self.name)} {self.problem.format(**{n: naming(n) for n in FIELDS})}"
