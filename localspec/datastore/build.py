"""Building a datastore from the user's files, and bringing one up to date with them."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

import numpy as np

from localspec.datastore import store
from localspec.datastore.files import Skipped, read_text, scan
from localspec.datastore.meta import Meta, SourceFile
from localspec.errors import LocalspecError


class Tokenizer(Protocol):
    path: Path
    digest: str  # backend/vocab.py's vocab_digest
    n_vocab: int

    def tokenize(self, text: str) -> np.ndarray: ...


@dataclass
class Report:
    meta: Meta
    added: int = 0
    changed: int = 0
    unchanged: int = 0
    removed: int = 0
    skipped: Skipped = field(default_factory=Skipped)
    missing: list[str] = field(default_factory=list)
    seconds: float = 0.0


Progress = Callable[[int, int, int], None]  # files done, files in all, tokens so far


def _reusable(previous: Meta | None) -> tuple[dict[str, SourceFile], np.ndarray | None]:
    """The files of `previous` and its tokens, when they can be read back."""
    if previous is None:
        return {}, None
    try:
        tokens = np.asarray(store.open_index(previous).tokens)
    except store.Damaged:
        return {}, None  # tokenized again, every file
    return {f.path: f for f in previous.files}, tokens


def build(
    meta: Meta, tokenizer: Tokenizer, previous: Meta | None = None, progress: Progress = lambda *_a: None
) -> Report:
    """Index the files `meta` names (its paths, globs and excludes) into the datastore of its name;
    a file unchanged since `previous` (same size and time, or same hash) keeps its tokens."""
    t0 = time.perf_counter()
    found = scan([Path(p) for p in meta.paths], meta.globs, meta.excludes, meta.follow_links)
    report = Report(meta, missing=found.missing)
    report.skipped.add("links out of their folder (--follow-links takes them)", found.outside)
    old, old_tokens = _reusable(previous)
    pieces: list[np.ndarray] = []
    start = 0
    for done, path in enumerate(found.files, 1):
        entry = _entry(path, old, old_tokens, tokenizer, report)
        if entry is not None:
            source, tokens = entry
            source.start = start
            meta.files.append(source)
            pieces.append(tokens)
            start += len(tokens) + 1
        progress(done, len(found.files), start - len(pieces))
    report.removed = len(set(old) - {f.path for f in meta.files})
    if not pieces:
        raise LocalspecError(
            f"nothing to index in {', '.join(meta.paths)} ({report.skipped or 'no files matched'})"
        )
    meta.n_tokens = sum(len(p) for p in pieces)
    meta.skipped = dict(report.skipped.counts)
    meta.built = time.time()
    meta.build_s = round(time.perf_counter() - t0, 3)
    store.write(meta, store.joined(pieces))
    report.seconds = time.perf_counter() - t0
    return report


def _entry(
    path: Path,
    old: dict[str, SourceFile],
    old_tokens: np.ndarray | None,
    tokenizer: Tokenizer,
    report: Report,
) -> tuple[SourceFile, np.ndarray] | None:
    """A file's record and tokens (reused where it did not change), or None when it is skipped."""
    try:
        st = path.stat()
    except OSError:
        report.skipped.add("unreadable")
        return None
    before = old.get(str(path))
    if (
        before is not None
        and old_tokens is not None
        and (before.size, before.mtime_ns) == (st.st_size, st.st_mtime_ns)
    ):
        report.unchanged += 1
        return replace(before), old_tokens[before.start : before.start + before.length]
    text, data, why = read_text(path)
    if text is None:
        report.skipped.add(why)
        return None
    digest = hashlib.sha256(data).hexdigest()
    if before is not None and old_tokens is not None and before.sha256 == digest:
        report.unchanged += 1
        tokens = old_tokens[before.start : before.start + before.length]
    else:
        tokens = tokenizer.tokenize(text)
        if not len(tokens):
            report.skipped.add("empty")
            return None
        if before is None:
            report.added += 1
        else:
            report.changed += 1
    return SourceFile(str(path), st.st_size, st.st_mtime_ns, digest, 0, len(tokens)), tokens


def new_meta(
    name: str,
    tokenizer: Tokenizer,
    paths: Sequence[Path],
    globs: Sequence[str],
    excludes: Sequence[str],
    follow_links: bool = False,
) -> Meta:
    return Meta(
        name=store.check_name(name),
        vocab=tokenizer.digest,
        n_vocab=tokenizer.n_vocab,
        model=str(tokenizer.path.absolute()),
        paths=[str(p.absolute()) for p in paths],
        globs=list(globs),
        excludes=list(excludes),
        follow_links=follow_links,
    )


def again(previous: Meta, tokenizer: Tokenizer) -> Meta:
    """A fresh record of `previous`'s sources, for an update or a rebuild."""
    if tokenizer.digest != previous.vocab:
        raise LocalspecError(
            f"the datastore {previous.name!r} was built with another vocabulary ({previous.model}); "
            f"{tokenizer.path.name} cannot add to its token ids: build it again with that model"
        )
    return Meta(
        previous.name,
        previous.vocab,
        previous.n_vocab,
        str(tokenizer.path.absolute()),
        previous.paths,
        previous.globs,
        previous.excludes,
        follow_links=previous.follow_links,
    )
