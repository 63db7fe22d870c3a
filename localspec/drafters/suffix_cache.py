"""The suffix cache on disk: earlier outputs that suffix drafting continues from, shared by later
processes (`run`, `chat`, `serve`) of the same vocabulary.

One file per vocabulary (a digest of its token texts, so a model with another tokenizer never
reads it) and, for a server with an API key, per key. It holds generated text: mode 0600, and
`localspec cache clear` removes it. Writers take a lock, re-read the file, append, evict the oldest
texts past the size and replace the file atomically, so concurrent processes never corrupt it and
keep each other's texts. A file that fails its checksum is ignored, with a one-line notice, and
rewritten at the next save. Loading runs in the background (and `load` waits for it at most
LOAD_WAIT_S): drafting uses the cache as soon as it is there, never waiting on it."""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import platformdirs
from filelock import FileLock, Timeout

from localspec.drafters.suffix_index import SEPARATOR, SuffixIndex, newest_within

MAGIC = b"LSSUFX01"
_HEADER = struct.Struct("<8sIQ32s")  # magic, vocabulary size, tokens, sha256 of the tokens
LOCK_TIMEOUT_S = 10.0
LOAD_WAIT_S = 1.0


class Damaged(Exception):
    pass


def cache_dir() -> Path:
    return Path(platformdirs.user_cache_dir("localspec"))


def cache_file(key: str, scope: str | None = None) -> Path:
    """The file of the vocabulary of digest `key` (backend/vocab.py); `scope` (a server's API key)
    gets a file of its own."""
    suffix = f"-{hashlib.sha256(scope.encode()).hexdigest()[:16]}" if scope else ""
    return cache_dir() / "suffix" / f"{key}{suffix}.bin"


def read_texts(path: Path, n_vocab: int) -> list[np.ndarray]:
    """The texts in `path` (none if it does not exist); raises Damaged."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    if len(data) < _HEADER.size:
        raise Damaged("truncated")
    magic, vocab, count, digest = _HEADER.unpack_from(data)
    payload = data[_HEADER.size :]
    if (
        magic != MAGIC
        or vocab != n_vocab
        or len(payload) != 4 * count
        or hashlib.sha256(payload).digest() != digest
    ):
        raise Damaged("not a suffix cache of this vocabulary, or damaged")
    tokens = np.frombuffer(payload, "<i4").astype(np.int32)
    if tokens.size and (tokens.max() >= n_vocab or tokens.min() < SEPARATOR):
        raise Damaged("token ids out of range")
    pieces = [t[t != SEPARATOR] for t in np.split(tokens, np.flatnonzero(tokens == SEPARATOR) + 1)]
    return [t for t in pieces if t.size]


def write_texts(path: Path, texts: Sequence[np.ndarray], n_vocab: int) -> None:
    parts = [p for t in texts for p in (np.asarray(t, "<i4"), np.array([SEPARATOR], "<i4"))]
    payload = np.concatenate(parts).tobytes() if parts else b""
    header = _HEADER.pack(MAGIC, n_vocab, len(payload) // 4, hashlib.sha256(payload).digest())
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(header + payload)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class SuffixCache:
    """Earlier outputs for suffix drafting: loaded from `path` in the background (None: this process
    only), grown by `record`, each record saved to the file at once."""

    def __init__(self, path: Path | None, n_vocab: int, size: int, notify: Callable[[str], None]) -> None:
        self.path, self.n_vocab, self.size, self.notify = path, n_vocab, size, notify
        self._index: SuffixIndex | None = None
        self._pending: list[list[int]] = []  # recorded before the index was loaded
        self._lock = threading.Lock()
        self._loaded = threading.Event()
        threading.Thread(target=self._load, name="suffix-cache", daemon=True).start()

    def _load(self) -> None:
        texts: list[np.ndarray] = []
        if self.path is not None:
            try:
                texts = read_texts(self.path, self.n_vocab)
            except Damaged as e:
                self.notify(f"the suffix cache {self.path} is unreadable ({e}): it starts anew")
            except OSError as e:
                self.notify(
                    f"cannot read the suffix cache {self.path}: {e.strerror or e}; outputs are kept in "
                    "memory only"
                )
                self.path = None
        index = SuffixIndex(texts, self.size)
        with self._lock:
            for text in self._pending:
                index.add(text)
            self._index, self._pending = index, []
        self._loaded.set()

    def wait(self, timeout: float) -> bool:
        return self._loaded.wait(timeout)

    def index(self) -> SuffixIndex | None:
        """The index, or None while it is still loading."""
        return self._index

    def record(self, text: Sequence[int]) -> None:
        """Add a text to the index and to the file."""
        text = list(text)
        with self._lock:
            if self._index is None:
                self._pending.append(text)
            else:
                self._index.add(text)
        if self.path is not None:
            self._save(self.path, text)

    def _save(self, path: Path, text: list[int]) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with FileLock(f"{path}.lock", timeout=LOCK_TIMEOUT_S, mode=0o600):
                try:
                    texts = read_texts(path, self.n_vocab)
                except Damaged:
                    texts = []  # its notice was given at load, or it is the other process's to give
                texts.append(np.asarray(text, np.int32))
                write_texts(path, newest_within(texts, self.size), self.n_vocab)
        except Timeout:
            self.notify(f"the suffix cache {path} stayed locked by another process: this output is not kept")
        except OSError as e:
            # Said once: later outputs stay in this process's memory only.
            self.notify(
                f"cannot write the suffix cache {path}: {e.strerror or e}; outputs are kept in memory only"
            )
            self.path = None


def cached_files() -> list[Path]:
    """Every file in the cache directory (the suffix caches, their locks, older tools' files)."""
    root = cache_dir()
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def clear() -> tuple[int, int]:
    """Remove every cached file; (files, bytes) removed."""
    root = cache_dir()
    files = cached_files()
    size = sum(p.stat().st_size for p in files)
    if root.exists():
        shutil.rmtree(root)
    return len(files), size
