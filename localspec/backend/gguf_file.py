"""Checks that a file is a complete GGUF before llama.cpp sees it: a malformed file can hit a
GGML_ASSERT inside llama.cpp, which kills the process instead of raising.

Only what the checks need is read, from a memory map: the header, every key with its value
(arrays skipped over by their length), the tensor infos. A vocabulary is a string array of up to
262k entries, each prefixed by its length, and walking it entry by entry in Python is what made
loading a wide-vocabulary model take minutes (`gguf.GGUFReader` builds a numpy view per entry), so
string arrays are walked in vectorised form (`_string_array`)."""

from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from localspec.backend.gguf_hparams import hparams_problem
from localspec.backend.gguf_strings import Corrupt, StringArray, string_array
from localspec.errors import LocalspecError
from localspec.text_input import exists

GGUF_MAGIC = b"GGUF"
SPLIT_RE = re.compile(r"^(?P<stem>.*)-(?P<idx>\d{5})-of-(?P<total>\d{5})\.gguf$")
BLOCK_RE = re.compile(r"^blk\.(\d+)\.")
DEFAULT_ALIGNMENT = 32

# GGUF value types: the struct format of each fixed-size one (8: string, 9: array).
_SCALARS = {
    k: struct.Struct(f)
    for k, f in {
        0: "<B",
        1: "<b",
        2: "<H",
        3: "<h",
        4: "<I",
        5: "<i",
        6: "<f",
        7: "<?",
        10: "<Q",
        11: "<q",
        12: "<d",
    }.items()
}
_U32, _U64 = _SCALARS[4], _SCALARS[10]
_STRING, _ARRAY = 8, 9
_SHORT_ARRAY = 64  # arrays up to this long are decoded (hyper-parameters per layer); longer ones only located


@dataclass(frozen=True)
class TensorInfo:
    name: str
    offset: int  # from the file's start
    n_bytes: int


@dataclass
class GGUFInfo:
    path: Path
    fields: dict[
        str, object
    ]  # scalars, strings and short arrays decoded; long arrays: a StringArray or their length
    tensors: list[TensorInfo]

    def tokens(self) -> StringArray | None:
        tokens = self.fields.get("tokenizer.ggml.tokens")
        return tokens if isinstance(tokens, StringArray) else None

    @property
    def arch(self) -> str:
        """general.architecture ("" where the file does not say)."""
        arch = self.fields.get("general.architecture")
        return arch if isinstance(arch, str) else ""

    def arch_int(self, key: str) -> int | None:
        """The architecture's integer `key` (`{arch}.{key}`); None where absent or not an integer."""
        value = self.fields.get(f"{self.arch}.{key}")
        return value if isinstance(value, int) and not isinstance(value, bool) else None


def check_exists(path: Path, role: str = "model") -> None:
    """Raise LocalspecError unless `path` is a file (before any file is parsed, so that a mistyped
    path is told at once)."""
    if not exists(path, f"{role} file"):
        raise LocalspecError(f"{role} file not found: {path}")
    if not path.is_file():
        raise LocalspecError(f"{role} path is not a file: {path}")


def check_gguf(path: Path, role: str = "model") -> GGUFInfo:
    """Raise LocalspecError unless `path` (and every split that belongs to it) is a readable GGUF;
    return what the first part says."""
    check_exists(path, role)
    m = SPLIT_RE.match(path.name)
    if m and int(m["idx"]) > 1:
        first = path.with_name(f"{m['stem']}-00001-of-{m['total']}.gguf")
        raise LocalspecError(
            f"{path.name} is part {int(m['idx'])} of a split {role}: pass the first part, {first}"
        )
    parts = [_check_one(part, role) for part in split_parts(path)]
    _check_header(parts, path, role)
    return parts[0]


def split_parts(path: Path) -> list[Path]:
    m = SPLIT_RE.match(path.name)
    if not m:
        return [path]
    total = int(m["total"])
    return [path.with_name(f"{m['stem']}-{i:05d}-of-{total:05d}.gguf") for i in range(1, total + 1)]


def _check_one(path: Path, role: str) -> GGUFInfo:
    if not path.exists():
        raise LocalspecError(f"{role} split file missing: {path}")
    try:
        with path.open("rb") as f:
            magic = f.read(4)
        if magic != GGUF_MAGIC:
            raise LocalspecError(f"{role} file is not a GGUF file: {path}")
        data = np.memmap(path, dtype=np.uint8, mode="r")
    except OSError as e:
        raise LocalspecError(f"cannot read {role} file {path}: {e.strerror}") from None
    try:
        info = _Reader(data).read(path)
    except (Corrupt, struct.error, ValueError, KeyError, OverflowError, UnicodeDecodeError, RecursionError):
        raise LocalspecError(f"{role} file is corrupt or truncated: {path}") from None
    for t in info.tensors:
        if t.offset + t.n_bytes > len(data):
            raise LocalspecError(
                f"{role} file is truncated: {path} (tensor {t.name} ends past the end of file)"
            )
    if not info.tensors and "general.architecture" not in info.fields:
        raise LocalspecError(f"{role} file holds no model: {path}")
    return info


class _Reader:
    def __init__(self, data: np.ndarray) -> None:
        self.data = data
        self.pos = 4

    def _take(self, kind: struct.Struct) -> int:
        if self.pos + kind.size > len(self.data):
            raise Corrupt
        (value,) = kind.unpack_from(self.data, self.pos)
        self.pos += kind.size
        return value

    def _string(self) -> str:
        n = self._take(_U64)
        if self.pos + n > len(self.data):
            raise Corrupt
        text = self.data[self.pos : self.pos + n].tobytes().decode("utf-8")
        self.pos += n
        return text

    def _value(self, kind: int) -> object:
        if kind == _STRING:
            return self._string()
        if kind == _ARRAY:
            return self._array()
        if kind not in _SCALARS:
            raise Corrupt
        return self._take(_SCALARS[kind])

    def _array(self) -> object:
        kind, n = self._take(_U32), self._take(_U64)
        if n <= _SHORT_ARRAY:
            return [self._value(kind) for _ in range(n)]
        if kind == _STRING:
            strings, self.pos = string_array(self.data, self.pos, n)
            return strings
        if kind not in _SCALARS:
            raise Corrupt  # arrays of arrays: no model has a long one
        self.pos += n * _SCALARS[kind].size
        if self.pos > len(self.data):
            raise Corrupt
        return n

    def read(self, path: Path) -> GGUFInfo:
        from gguf.constants import GGML_QUANT_SIZES

        sizes = {int(kind): size for kind, size in GGML_QUANT_SIZES.items()}  # type -> (block, bytes)
        if self._take(_U32) not in (2, 3):
            raise Corrupt
        n_tensors, n_kv = self._take(_U64), self._take(_U64)
        if n_tensors > len(self.data) or n_kv > len(self.data):
            raise Corrupt
        fields: dict[str, object] = {}
        for _ in range(n_kv):
            key = self._string()
            fields[key] = self._value(self._take(_U32))
        infos = []
        for _ in range(n_tensors):
            name = self._string()
            n_dims = self._take(_U32)
            if n_dims > 8:
                raise Corrupt
            elements = math.prod(self._take(_U64) for _ in range(n_dims))
            block, size = sizes[self._take(_U32)]
            infos.append((name, self._take(_U64), elements // block * size))
        alignment = fields.get("general.alignment", DEFAULT_ALIGNMENT)
        if not isinstance(alignment, int) or alignment <= 0:
            raise Corrupt
        start = -(-self.pos // alignment) * alignment
        return GGUFInfo(
            path, fields, [TensorInfo(name, start + offset, n_bytes) for name, offset, n_bytes in infos]
        )


def _check_header(parts: list[GGUFInfo], path: Path, role: str) -> None:
    """llama.cpp asserts (and aborts) when the header claims layers whose tensors are missing, or
    none at all; and it divides by or reduces over the sizes below, so a zero is told here."""
    fields = parts[0].fields
    arch = fields.get("general.architecture")
    if not isinstance(arch, str):
        return
    for key in (
        "block_count",
        "embedding_length",
        "context_length",
        "attention.head_count",
        "rope.dimension_count",
    ):
        value = fields.get(f"{arch}.{key}")
        # Per-layer arrays may hold zeros (layers without attention), never only zeros.
        if value == 0 or (isinstance(value, list) and value and not any(value)):
            raise LocalspecError(f"{role} file is inconsistent: {path} (its header gives {arch}.{key} = 0)")
    problem = hparams_problem(fields, arch)
    if problem:
        raise LocalspecError(f"{role} file is inconsistent: {path} (its header gives {problem})")
    tokens = fields.get("tokenizer.ggml.tokens")
    if tokens is not None and not (isinstance(tokens, (list, StringArray)) and len(tokens)):
        raise LocalspecError(f"{role} file is inconsistent: {path} (its vocabulary is empty)")
    claimed = fields.get(f"{arch}.block_count")
    if not isinstance(claimed, int):
        return
    present = {int(m[1]) for part in parts for t in part.tensors if (m := BLOCK_RE.match(t.name))}
    if present and not set(range(claimed)) <= present:
        raise LocalspecError(
            f"{role} file is inconsistent: {path} (its header says {claimed} layers, its tensors hold "
            f"{len(present)})"
        )
