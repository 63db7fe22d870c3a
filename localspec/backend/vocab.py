"""Vocabularies: tokenizing, target/draft compatibility by llama.cpp's rule (common/speculative.cpp),
and a digest of what token ids mean.

Token texts are compared and digested as the GGUF files hold them (backend/gguf_file.py), in
vectorised form and before any weights load; what llama.cpp derives from them (BOS/EOS handling)
is compared on the loaded vocabularies."""

from __future__ import annotations

import ctypes
import hashlib

import llama_cpp
import numpy as np

from localspec.backend.gguf_file import GGUFInfo
from localspec.backend.gguf_strings import StringArray
from localspec.errors import LocalspecError

MAX_VOCAB_SIZE_DIFFERENCE = 128
FIRST_CHECKED_TOKEN = 5  # ids below are special tokens that families number differently


def _mismatch(target: GGUFInfo, draft: GGUFInfo) -> str:
    return f"draft {draft.path.name} does not share the vocabulary of target {target.path.name}"


def _tokens(info: GGUFInfo, what: str) -> StringArray:
    tokens = info.tokens()
    if tokens is None:
        raise LocalspecError(f"{what}: {info.path.name} holds no token list")
    return tokens


def check_token_texts(target: GGUFInfo, draft: GGUFInfo) -> None:
    """Raise LocalspecError when the draft's token ids do not mean what the target's do."""
    what = _mismatch(target, draft)
    if target.fields.get("tokenizer.ggml.model") != draft.fields.get("tokenizer.ggml.model"):
        raise LocalspecError(f"{what}: different tokenizer types")
    tt, td = _tokens(target, what), _tokens(draft, what)
    if abs(len(tt) - len(td)) > MAX_VOCAB_SIZE_DIFFERENCE:
        raise LocalspecError(
            f"{what}: vocabulary sizes {len(tt)} and {len(td)} differ by more than "
            f"{MAX_VOCAB_SIZE_DIFFERENCE}"
        )
    n = min(len(tt), len(td))
    a, b = tt.encoded(FIRST_CHECKED_TOKEN, n), td.encoded(FIRST_CHECKED_TOKEN, n)
    if a == b:
        return
    # Up to the first byte that differs both files hold the same entries: that byte's entry is the first that
    # differs.
    common = min(len(a), len(b))
    at = (
        int(np.argmax(np.frombuffer(a, np.uint8, common) != np.frombuffer(b, np.uint8, common)))
        if common
        else 0
    )
    fields = tt.starts[FIRST_CHECKED_TOKEN:n] - 8 - (tt.starts[FIRST_CHECKED_TOKEN] - 8)
    i = FIRST_CHECKED_TOKEN + int(np.searchsorted(fields, at, side="right")) - 1
    ta, tb = tt.text(i).decode("utf-8", "replace"), td.text(i).decode("utf-8", "replace")
    raise LocalspecError(f"{what}: token {i} is {ta!r} in the target but {tb!r} in the draft")


def check_special_tokens(target: GGUFInfo, draft: GGUFInfo, vt: object, vd: object) -> None:
    """The loaded vocabularies `vt`, `vd` (of `target`, `draft`) add and number BOS and EOS alike."""
    for name, flag, token in (
        ("BOS", llama_cpp.llama_vocab_get_add_bos, llama_cpp.llama_vocab_bos),
        ("EOS", llama_cpp.llama_vocab_get_add_eos, llama_cpp.llama_vocab_eos),
    ):
        if flag(vt) != flag(vd) or (flag(vt) and token(vt) != token(vd)):
            raise LocalspecError(f"{_mismatch(target, draft)}: different {name} handling")


def vocab_digest(info: GGUFInfo) -> str:
    """A digest of a vocabulary's token texts: what a model's cached token ids are valid for."""
    tokens = _tokens(info, "no digest")
    h = hashlib.sha256(str(len(tokens)).encode())
    h.update(tokens.joined(0))
    return h.hexdigest()[:24]


def _tokenized(vocab: object, text: str, add_special: bool, parse_special: bool) -> tuple[ctypes.Array, int]:
    """llama.cpp's buffer of `text`'s token ids, and how many it holds."""
    data = text.encode("utf-8")
    size = len(data) + 16
    buf = (llama_cpp.llama_token * size)()
    n = llama_cpp.llama_tokenize(vocab, data, len(data), buf, size, add_special, parse_special)
    if n < 0:
        size = -n
        buf = (llama_cpp.llama_token * size)()
        n = llama_cpp.llama_tokenize(vocab, data, len(data), buf, size, add_special, parse_special)
    return buf, n


def tokenize(vocab: object, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
    buf, n = _tokenized(vocab, text, add_special, parse_special)
    return list(buf[:n])


def tokenize_array(vocab: object, text: str) -> np.ndarray:
    """`text` as int32 token ids, no special tokens added or parsed (a file's text, not a prompt):
    read straight from llama.cpp's buffer, since a million ids as a Python list cost ~50 ms."""
    buf, n = _tokenized(vocab, text, False, False)
    return np.ctypeslib.as_array(buf)[:n].astype(np.int32)
