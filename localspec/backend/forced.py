"""What a grammar leaves no choice about next: the text it allows alone, character after character,
and that text as the model's tokens, drafted for free (no draft-model pass proposes them).

Asking the grammar whether a single token is allowed over the whole vocabulary costs a pass's worth
(10-50 ms at 49k ids), and with BPE and optional whitespace almost no position allows one token
alone. The characters tell more for less: the grammar is asked of the vocabulary's one-character
tokens only (about a hundred), and a JSON key after its opening quote, the rest of `true`, or a
schema's fixed text come out whole, however the model would split them into tokens."""

from __future__ import annotations

import llama_cpp
import numpy as np

from localspec.backend.grammar import Grammar
from localspec.backend.token_text import TokenText

CHARACTERS = [chr(c) for c in range(32, 127)] + ["\n", "\t"]
MAX_CHARS = 64  # a forced run longer than this is drafted in later steps


class ForcedText:
    def __init__(self, model: TokenText) -> None:
        self._model = model
        # The tokens that end generation, which the grammar allows where it may end.
        ends = [
            t
            for t in (llama_cpp.llama_vocab_eos(model.vocab), llama_cpp.llama_vocab_eot(model.vocab))
            if t >= 0
        ]
        ids, chars = [], []
        for c in CHARACTERS:
            tokens = self._spelled(c)
            if len(tokens) == 1:
                ids.append(tokens[0])
                chars.append(c)
        self._chars = chars
        self._ids = np.array([*ids, *ends], dtype=np.int32)

    def tokens(self, grammar: Grammar) -> list[int]:
        """The tokens of the text `grammar` forces next, all but the last (what follows a forced run
        may merge with its end into another token: the drafter drafts that one itself)."""
        text = self._text(grammar)
        tokens = self._spelled(text)[:-1] if text else []
        # The grammar judges a token by its piece, so a spelling of allowed text passes; llama.cpp
        # aborts on accepting any other token, so the draft is cut where one would not pass.
        return tokens[: grammar.allowed_prefix(tokens)]

    def _spelled(self, text: str) -> list[int]:
        """The tokens of `text` as it continues a text (empty if none spell it exactly). A tokenizer
        that marks where a text starts (SentencePiece's leading space) marks a line break before it."""
        want = text.encode()
        for lead in ("", "\n"):
            tokens = self._model.tokenize(lead + text, add_special=False, parse_special=False)
            pieces = [self._model.piece(t) for t in tokens]
            for i in range(len(tokens)):
                if b"".join(pieces[i:]) == want:
                    return tokens[i:]
        return []

    def _text(self, grammar: Grammar) -> str:
        probe, chars, n = grammar.clone(), [], len(self._chars)
        try:
            while len(chars) < MAX_CHARS:
                allowed = probe.allowed(self._ids)
                if allowed[n:].any() or allowed[:n].sum() != 1:  # it may end here, or choose
                    break
                i = int(np.flatnonzero(allowed[:n])[0])
                probe.accept(int(self._ids[i]))
                chars.append(self._chars[i])
        finally:
            probe.close()
        return "".join(chars)
