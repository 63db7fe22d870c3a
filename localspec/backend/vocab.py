"""Target/draft vocabulary compatibility, by llama.cpp's rule (common/speculative.cpp)."""

from __future__ import annotations

import llama_cpp

from localspec.backend.model import VocabModel
from localspec.errors import LocalspecError

MAX_VOCAB_SIZE_DIFFERENCE = 128
FIRST_CHECKED_TOKEN = 5  # ids below are special tokens that families number differently


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
