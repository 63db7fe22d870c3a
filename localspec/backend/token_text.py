"""What a loaded vocabulary says of tokens: text in, ids out, and the bytes and text of each id."""

from __future__ import annotations

import ctypes
from typing import Any

import llama_cpp

from localspec.backend.vocab import tokenize


class TokenText:
    """Read through `vocab` (a llama_vocab), with the pieces met so far kept in `_pieces` and
    whether they end generation in `_ends` (asked of every drafted and emitted token)."""

    vocab: Any
    _pieces: dict[int, bytes]
    _ends: dict[int, bool]

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        return tokenize(self.vocab, text, add_special, parse_special)

    def piece(self, token: int) -> bytes:
        """The bytes a token stands for in output text (special tokens render as nothing)."""
        cached = self._pieces.get(token)
        if cached is None:
            buf = ctypes.create_string_buffer(64)
            n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, 64, 0, False)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, -n, 0, False)
            cached = self._pieces[token] = buf.raw[:n]
        return cached

    def token_text(self, token: int) -> str:
        return llama_cpp.llama_vocab_get_text(self.vocab, token).decode("utf-8", "replace")

    def is_eog(self, token: int) -> bool:
        ends = self._ends.get(token)
        if ends is None:
            ends = self._ends[token] = bool(llama_cpp.llama_vocab_is_eog(self.vocab, token))
        return ends

    def bos_eos_text(self) -> tuple[str, str, bool]:
        bos = llama_cpp.llama_vocab_bos(self.vocab)
        eos = llama_cpp.llama_vocab_eos(self.vocab)
        text = lambda t: self.token_text(t) if t >= 0 else ""  # noqa: E731
        return text(bos), text(eos), bool(llama_cpp.llama_vocab_get_add_bos(self.vocab))
