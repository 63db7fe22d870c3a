"""The GGUF pre-check's own reader against the `gguf` package's, and what it refuses."""

from __future__ import annotations

import hashlib
from pathlib import Path

import gguf
import llama_cpp
import numpy as np
import pytest
from conftest import model_options
from tiny_models import TinySpec, write_tiny_llama

from localspec.backend.gguf_file import check_gguf
from localspec.backend.model import Model
from localspec.backend.vocab import vocab_digest
from localspec.errors import LocalspecError

# Texts that break the vectorised walk's runs: empty, long (a length field with a non-zero second
# byte), and zero bytes that look like a length field's.
AWKWARD = [
    "",
    "a",
    "x" * 255,
    "y" * 256,
    "z" * 300,
    "é世",
    "a\x00\x00\x00\x00\x00\x00\x00b",
    "\x05\x00\x00\x00\x00\x00\x00\x00",
    "",
]


def _write(path: Path, strings: list[str]) -> Path:
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_array("test.strings", strings)
    w.add_uint32("test.after", 7)
    w.add_tensor("t", np.arange(6, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize("seed", range(4))
def test_string_arrays_read_as_the_gguf_package_reads_them(tmp_path: Path, seed: int):
    rng = np.random.default_rng(seed)
    words = [f"w{i}" * int(rng.integers(1, 6)) for i in range(3000)]
    for i, awkward in zip(rng.choice(len(words), len(AWKWARD), replace=False), AWKWARD, strict=False):
        words[i] = awkward
    path = _write(tmp_path / "s.gguf", words)
    info = check_gguf(path)
    strings = info.fields["test.strings"]
    assert [strings.text(i).decode() for i in range(len(strings))] == words  # type: ignore[union-attr]
    assert info.fields["test.after"] == 7  # what follows the array is read from the right place
    reference = gguf.GGUFReader(str(path))
    assert [(t.name, t.data_offset, t.n_bytes) for t in reference.tensors] == [
        (t.name, t.offset, t.n_bytes) for t in info.tensors
    ]


def test_a_real_models_header_reads_as_the_gguf_package_reads_it(smollm2_q4: Path):
    info = check_gguf(smollm2_q4)
    reference = gguf.GGUFReader(str(smollm2_q4))
    assert [(t.name, t.data_offset, t.n_bytes) for t in reference.tensors] == [
        (t.name, t.offset, t.n_bytes) for t in info.tensors
    ]
    tokens = info.tokens()
    assert tokens is not None
    assert [tokens.text(i).decode() for i in range(len(tokens))] == reference.fields[
        "tokenizer.ggml.tokens"
    ].contents()
    assert info.fields["general.architecture"] == "llama"


def test_every_cut_of_the_header_is_refused_in_one_line(tmp_path: Path):
    path = _write(tmp_path / "s.gguf", [f"tok{i}" for i in range(200)])
    whole = path.read_bytes()
    end = check_gguf(path).tensors[-1]
    for cut in range(4, end.offset + end.n_bytes, 3):
        part = tmp_path / f"cut{cut}.gguf"
        part.write_bytes(whole[:cut])
        with pytest.raises(LocalspecError, match="corrupt or truncated|truncated"):
            check_gguf(part)


@pytest.mark.parametrize(
    "key",
    ["block_count", "embedding_length", "context_length", "attention.head_count", "rope.dimension_count"],
)
def test_a_header_size_of_zero_is_refused_before_llama_cpp_divides_by_it(tmp_path: Path, key: str):
    # block_count = 0 made llama.cpp abort the process; the others, a reduction over nothing.
    path = write_tiny_llama(tmp_path / "crafted.gguf", TinySpec(header=((f"llama.{key}", 0),)))
    with pytest.raises(LocalspecError, match=f"inconsistent: .* llama.{key} = 0"):
        check_gguf(path)


def test_the_digest_is_the_one_caches_were_keyed_by(smollm2_q4: Path):
    """sha256 of the vocabulary size and every token text followed by a zero byte, as llama.cpp
    reads them: a cache file written before keeps its name."""
    with Model(smollm2_q4, model_options()) as model:
        h = hashlib.sha256(str(model.n_vocab).encode())
        for i in range(model.n_vocab):
            h.update(llama_cpp.llama_vocab_get_text(model.vocab, i) + b"\0")
    assert vocab_digest(check_gguf(smollm2_q4)) == h.hexdigest()[:24]
