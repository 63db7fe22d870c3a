"""Checks that a file is a complete GGUF before llama.cpp sees it: a malformed file can hit a
GGML_ASSERT inside llama.cpp, which kills the process instead of raising."""

from __future__ import annotations

import re
from pathlib import Path

from localspec.errors import LocalspecError

GGUF_MAGIC = b"GGUF"
SPLIT_RE = re.compile(r"^(?P<stem>.*)-(?P<idx>\d{5})-of-(?P<total>\d{5})\.gguf$")


def check_gguf(path: Path, role: str = "model") -> None:
    """Raise LocalspecError unless `path` (and every split that belongs to it) is a readable GGUF."""
    if not path.exists():
        raise LocalspecError(f"{role} file not found: {path}")
    if not path.is_file():
        raise LocalspecError(f"{role} path is not a file: {path}")
    m = SPLIT_RE.match(path.name)
    if m and int(m["idx"]) > 1:
        first = path.with_name(f"{m['stem']}-00001-of-{m['total']}.gguf")
        raise LocalspecError(f"{path.name} is part {int(m['idx'])} of a split {role}: pass the first part, {first}")
    readers = [_check_one(part, role) for part in split_parts(path)]
    _check_blocks(readers, path, role)


def split_parts(path: Path) -> list[Path]:
    m = SPLIT_RE.match(path.name)
    if not m:
        return [path]
    total = int(m["total"])
    return [path.with_name(f"{m['stem']}-{i:05d}-of-{total:05d}.gguf") for i in range(1, total + 1)]


def _check_one(path: Path, role: str):  # -> gguf.GGUFReader
    import gguf

    if not path.exists():
        raise LocalspecError(f"{role} split file missing: {path}")
    try:
        with path.open("rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise LocalspecError(f"cannot read {role} file {path}: {e.strerror}") from None
    if magic != GGUF_MAGIC:
        raise LocalspecError(f"{role} file is not a GGUF file: {path}")
    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as e:  # the reader raises many kinds of errors on malformed files
        raise LocalspecError(f"{role} file is corrupt or truncated: {path} ({type(e).__name__})") from None
    size = path.stat().st_size
    for t in reader.tensors:
        if t.data_offset + t.n_bytes > size:
            raise LocalspecError(f"{role} file is truncated: {path} (tensor {t.name} ends past the end of file)")
    if not reader.tensors and "general.architecture" not in reader.fields:
        raise LocalspecError(f"{role} file holds no model: {path}")
    return reader


BLOCK_RE = re.compile(r"^blk\.(\d+)\.")


def _check_blocks(readers: list, path: Path, role: str) -> None:
    """llama.cpp asserts (and aborts) when the header claims layers whose tensors are missing."""
    arch = readers[0].fields.get("general.architecture")
    if arch is None:
        return
    claimed = readers[0].fields.get(f"{arch.contents()}.block_count")
    if claimed is None:
        return
    present = {int(m[1]) for r in readers for t in r.tensors if (m := BLOCK_RE.match(t.name))}
    n = int(claimed.contents())
    if present and not set(range(n)) <= present:
        raise LocalspecError(f"{role} file is inconsistent: {path} (its header says {n} layers, its tensors hold {len(present)})")
