"""A datastore's meta.json: what it holds (its files, their sizes, times and hashes, the vocabulary
digest of the model that tokenized them), read back with every field's type checked."""

from __future__ import annotations

from dataclasses import dataclass, field

FORMAT = 1


class Damaged(Exception):
    """A datastore on disk is not what its meta.json says (told, and left out of drafting)."""


@dataclass
class SourceFile:
    path: str
    size: int
    mtime_ns: int
    sha256: str
    start: int  # where its tokens begin in tokens.npy
    length: int


@dataclass
class Meta:
    name: str
    vocab: str  # backend/vocab.py's digest: what the token ids are valid for
    n_vocab: int
    model: str  # the file that tokenized it (update's default)
    paths: list[str]
    globs: list[str]
    excludes: list[str]
    files: list[SourceFile] = field(default_factory=list)
    n_tokens: int = 0  # of the files, separators not counted
    tokens_sha256: str = ""
    built: float = 0.0
    build_s: float = 0.0
    skipped: dict[str, int] = field(default_factory=dict)
    format: int = FORMAT
    follow_links: bool = False  # links out of a folder taken too

    @staticmethod
    def from_json(data: object) -> Meta:
        try:
            meta = Meta(**{**data, "files": [SourceFile(**f) for f in data["files"]]})  # type: ignore[arg-type, index, dict-item]
        except (TypeError, KeyError) as e:
            raise Damaged(f"meta.json does not describe a datastore ({e})") from None
        if meta.format != FORMAT:
            raise Damaged(f"meta.json is of format {meta.format!r}, not {FORMAT}")
        for record in (meta, *meta.files):
            for name, kind in FIELD_TYPES[type(record).__name__].items():
                if not _typed(getattr(record, name), kind):
                    raise Damaged(f"meta.json's {name} is {str(getattr(record, name))[:40]!r}, not {kind}")
        return meta


# What meta.json's values must be, checked as read (a damaged or edited file said in words, not
# met later as a TypeError or an OverflowError).
FIELD_TYPES = {
    "Meta": {
        "name": "text",
        "vocab": "text",
        "n_vocab": "a count",
        "model": "text",
        "paths": "a list of text",
        "globs": "a list of text",
        "excludes": "a list of text",
        "n_tokens": "a count",
        "tokens_sha256": "text",
        "built": "a time",
        "build_s": "a time",
        "skipped": "counts by reason",
        "follow_links": "true or false",
    },
    "SourceFile": {
        "path": "text",
        "size": "a count",
        "mtime_ns": "a count",
        "sha256": "text",
        "start": "a count",
        "length": "a count",
    },
}


def _typed(value: object, kind: str) -> bool:
    count = lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 63  # noqa: E731
    if kind == "text":
        return isinstance(value, str)
    if kind == "true or false":
        return isinstance(value, bool)
    if kind == "a count":
        return count(value)
    if kind == "a time":  # seconds: since 1970 or of a build
        return isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 1e11
    if kind == "a list of text":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    return isinstance(value, dict) and all(isinstance(k, str) and count(v) for k, v in value.items())
