"""Datastores on disk: the user's files as token ids, indexed for suffix drafting (REST, He et al.
2024: continue the context as the longest match of its tail in a corpus went on).

A datastore is a folder under the user data directory: meta.json (its files, their sizes, times
and hashes, the vocabulary digest of the model that tokenized them) and memory-mapped arrays,
tokens.npy (int32, files separated by -1) and per anchor length keys-N.npy (uint32 n-gram hashes,
sorted) and pos-N.npy (int32): 36 bytes per token, read by the page on lookup, never loaded whole.
It holds the text of the user's files: folder 0700, files 0600. A build is written to a fresh
folder and swapped in under a lock, so a full disk or a crash leaves the old one whole. Opening
checks the arrays against meta.json (shapes, types, the tokens' hash, positions in range, keys in
order): a damaged datastore is found before it drafts."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import platformdirs
from filelock import FileLock, Timeout

from localspec.config.defaults import DATASTORE_NAME
from localspec.datastore.meta import Damaged, Meta
from localspec.drafters.suffix_index import ANCHORS, SEPARATOR, TokenIndex
from localspec.errors import LocalspecError

KEY_TYPE, POS_TYPE = np.uint32, np.int32
LOCK_TIMEOUT_S = 30.0


def root() -> Path:
    return Path(platformdirs.user_data_dir("localspec")) / "datastores"


def check_name(name: str) -> str:
    if not DATASTORE_NAME.fullmatch(name):
        raise LocalspecError(
            f"{name!r} is not a datastore name: letters, digits, '.', '_' and '-', at most 64, starting "
            "with a letter or digit"
        )
    return name


def folder(name: str) -> Path:
    return root() / check_name(name)


def names() -> list[str]:
    base = root()
    return (
        sorted(p.name for p in base.iterdir() if p.is_dir() and DATASTORE_NAME.fullmatch(p.name))
        if base.is_dir()
        else []
    )


def read_meta(name: str) -> Meta:
    """Raises LocalspecError when there is no such datastore, Damaged when its meta.json is."""
    path = folder(name) / "meta.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        if path.parent.is_dir():
            raise Damaged("meta.json is missing") from None
        raise LocalspecError(
            f"no datastore named {name!r} (`localspec index list` shows them; `localspec index build "
            f"{name} PATH...` makes it)"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise Damaged(f"meta.json is unreadable ({getattr(e, 'strerror', None) or e})") from None
    if not isinstance(data, dict):
        raise Damaged("meta.json does not describe a datastore")
    return Meta.from_json(data)


def usable_meta(name: str) -> Meta:
    """read_meta, with a damaged meta.json said in one line as what to do about it."""
    try:
        return read_meta(name)
    except Damaged as e:
        raise LocalspecError(
            f"the datastore {name!r} is damaged ({e}): `localspec index rm {name}` and build it again"
        ) from None


def _array(base: Path, file: str, dtype: type) -> np.ndarray:
    try:
        array = np.load(base / file, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:  # an empty file: EOFError
        raise Damaged(f"{file} is unreadable ({getattr(e, 'strerror', None) or e or 'empty'})") from None
    if array.dtype != np.dtype(dtype) or array.ndim != 1:
        raise Damaged(
            f"{file} holds {array.dtype} of {array.ndim} dimensions, not a row of {np.dtype(dtype)}"
        )
    return array


def open_index(meta: Meta) -> TokenIndex:
    """The datastore's index, its arrays mapped from disk; raises Damaged when they do not agree
    with meta.json."""
    base = folder(meta.name)
    tokens = _array(base, "tokens.npy", np.int32)
    if (
        len(tokens) != meta.n_tokens + len(meta.files)
        or hashlib.sha256(tokens).hexdigest() != meta.tokens_sha256
    ):
        raise Damaged("tokens.npy is not what was indexed")
    keys, pos = {}, {}
    for n in ANCHORS:
        keys[n], pos[n] = _array(base, f"keys-{n}.npy", KEY_TYPE), _array(base, f"pos-{n}.npy", POS_TYPE)
        if len(keys[n]) != len(pos[n]) or len(keys[n]) > len(tokens):
            raise Damaged(f"keys-{n}.npy and pos-{n}.npy do not match")
        if len(pos[n]) and (
            pos[n].min() < n or pos[n].max() >= len(tokens) or np.any(keys[n][1:] < keys[n][:-1])
        ):
            raise Damaged(f"keys-{n}.npy or pos-{n}.npy is out of order or out of range")
    return TokenIndex(tokens, keys, pos)


def joined(pieces: list[np.ndarray]) -> np.ndarray:
    """The files' tokens in one array, each followed by SEPARATOR."""
    parts = [p for t in pieces for p in (np.asarray(t, np.int32), np.array([SEPARATOR], np.int32))]
    return np.concatenate(parts) if parts else np.zeros(0, np.int32)


def _write_folder(base: Path, meta: Meta, tokens: np.ndarray) -> None:
    index = TokenIndex.of(tokens, KEY_TYPE, POS_TYPE)
    arrays = {
        "tokens.npy": tokens,
        **{f"keys-{n}.npy": index.keys[n] for n in ANCHORS},
        **{f"pos-{n}.npy": index.pos[n] for n in ANCHORS},
    }
    for file, array in arrays.items():
        with open(os.open(base / file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
            np.save(f, array, allow_pickle=False)
    with open(
        os.open(base / "meta.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8"
    ) as f:
        json.dump(asdict(meta), f)


def write(meta: Meta, tokens: np.ndarray) -> None:
    """Make `meta` and `tokens` the datastore of its name, replacing any before it whole."""
    meta.tokens_sha256 = hashlib.sha256(tokens).hexdigest()
    base = root()
    target = folder(meta.name)
    try:
        base.mkdir(parents=True, exist_ok=True, mode=0o700)
        with FileLock(str(base / f".{meta.name}.lock"), timeout=LOCK_TIMEOUT_S, mode=0o600):
            # What a killed build of this name left (the lock is ours): mkdtemp's folders and the
            # old copies below, not those of a datastore whose name starts with this one's.
            leftover = re.compile(rf"\.{re.escape(meta.name)}\.([a-z0-9_]{{8}}|old-\d+-\d+)")
            for stale in base.iterdir():
                if leftover.fullmatch(stale.name) and stale.is_dir():
                    shutil.rmtree(stale, ignore_errors=True)
            fresh = Path(tempfile.mkdtemp(prefix=f".{meta.name}.", dir=base))  # mode 0700
            try:
                _write_folder(fresh, meta, tokens)
                old = base / f".{meta.name}.old-{os.getpid()}-{time.monotonic_ns()}"
                if target.exists():
                    os.replace(target, old)
                os.replace(fresh, target)
                shutil.rmtree(old, ignore_errors=True)
            except BaseException:
                shutil.rmtree(fresh, ignore_errors=True)
                raise
    except Timeout:
        raise LocalspecError(
            f"the datastore {meta.name!r} stayed locked by another process for {LOCK_TIMEOUT_S:.0f} s"
        ) from None
    except OSError as e:
        raise LocalspecError(
            f"cannot write the datastore {meta.name!r} in {base}: {e.strerror or e}"
        ) from None


def remove(name: str) -> int:
    """Delete a datastore; the bytes it held."""
    target = folder(name)
    if not target.is_dir():
        raise LocalspecError(f"no datastore named {name!r}")
    size = disk_size(name)
    try:
        shutil.rmtree(target)
    except OSError as e:
        raise LocalspecError(f"cannot remove {target}: {e.strerror or e}") from None
    return size


def disk_size(name: str) -> int:
    return sum(p.stat().st_size for p in folder(name).iterdir() if p.is_file())


class Datastore:
    """A drafter's memory (drafters/suffix.py) that is only read: its proposals are credited to the
    datastore's own kinds."""

    def __init__(self, meta: Meta, index: TokenIndex) -> None:
        self.meta, self._index = meta, index

    @property
    def name(self) -> str:
        return self.meta.name

    def index(self) -> TokenIndex:
        return self._index

    def record(self, text: object) -> None:
        return None  # outputs go to the suffix cache, never into the user's files
