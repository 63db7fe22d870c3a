"""Vocabularies: tokenizing, target/draft compatibility by llama.cpp's rule (common/speculative.cpp),
and a digest of what token ids mean."""

from __future__ import annotations

import hashlib
from pathlib import Path

import llama_cpp

from localspec.backend.logs import silence_llama_logs
from localspec.backend.weights import load_weights
from localspec.errors import LocalspecError

MAX_VOCAB_SIZE_DIFFERENCE = 128
FIRST_CHECKED_TOKEN = 5  # ids below are special tokens that families number differently


class VocabModel:
    """A model loaded with vocab_only=True: the tokenizer without any weights."""

    def __init__(self, path: Path, verbose: bool = False) -> None:
        silence_llama_logs(verbose)
        llama_cpp.llama_backend_init()
        self.path = path
        self.model = load_weights(path, 0, vocab_only=True)
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)

    def close(self) -> None:
        if self.model:
            llama_cpp.llama_model_free(self.model)
            self.model = None

    def __enter__(self) -> VocabModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_compatible(target: VocabModel, draft: VocabModel) -> None:
    """Raise LocalspecError when draft tokens cannot be fed to the target as they are."""
    vt, vd = target.vocab, draft.vocab
    what = f"draft {draft.path.name} does not share the vocabulary of target {target.path.name}"
    if llama_cpp.llama_vocab_type(vt) != llama_cpp.llama_vocab_type(vd):
        raise LocalspecError(f"{what}: different tokenizer types")
    for name, flag, token in (
        ("BOS", llama_cpp.llama_vocab_get_add_bos, llama_cpp.llama_vocab_bos),
        ("EOS", llama_cpp.llama_vocab_get_add_eos, llama_cpp.llama_vocab_eos),
    ):
        if flag(vt) != flag(vd) or (flag(vt) and token(vt) != token(vd)):
            raise LocalspecError(f"{what}: different {name} handling")
    n_t, n_d = llama_cpp.llama_vocab_n_tokens(vt), llama_cpp.llama_vocab_n_tokens(vd)
    if abs(n_t - n_d) > MAX_VOCAB_SIZE_DIFFERENCE:
        raise LocalspecError(f"{what}: vocabulary sizes {n_t} and {n_d} differ by more than {MAX_VOCAB_SIZE_DIFFERENCE}")
    for i in range(FIRST_CHECKED_TOKEN, min(n_t, n_d)):
        a, b = llama_cpp.llama_vocab_get_text(vt, i), llama_cpp.llama_vocab_get_text(vd, i)
        if a != b:
            ta, tb = a.decode("utf-8", "replace"), b.decode("utf-8", "replace")
            raise LocalspecError(f"{what}: token {i} is {ta!r} in the target but {tb!r} in the draft")


def vocab_digest(vocab: object, n_vocab: int) -> str:
    """A digest of a vocabulary's token texts: what a model's cached token ids are valid for."""
    h = hashlib.sha256(str(n_vocab).encode())
    for i in range(n_vocab):
        h.update(llama_cpp.llama_vocab_get_text(vocab, i) + b"\0")
    return h.hexdigest()[:24]


def tokenize(vocab: object, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
    data = text.encode("utf-8")
    size = len(data) + 16
    buf = (llama_cpp.llama_token * size)()
    n = llama_cpp.llama_tokenize(vocab, data, len(data), buf, size, add_special, parse_special)
    if n < 0:
        size = -n
        buf = (llama_cpp.llama_token * size)()
        n = llama_cpp.llama_tokenize(vocab, data, len(data), buf, size, add_special, parse_special)
    return list(buf[:n])
