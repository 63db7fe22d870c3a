"""A GGUF's tokenizer alone: its vocabulary loaded without the weights (index builds), or a loaded
model's, borrowed (a damaged datastore rebuilt with the target's)."""

from __future__ import annotations

from pathlib import Path

import llama_cpp
import numpy as np

from localspec.backend.gguf_file import check_gguf
from localspec.backend.logs import silence_llama_logs
from localspec.backend.model import Model
from localspec.backend.vocab import tokenize_array, vocab_digest
from localspec.backend.weights import load_weights


class Tokenizer:
    def __init__(self, path: Path, digest: str, vocab: object, owned: object = None) -> None:
        self.path, self.digest, self.vocab = path, digest, vocab
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(vocab))
        self._owned = owned  # the vocabulary-only model to free, when this loaded one

    @staticmethod
    def load(path: Path, verbose: bool = False) -> Tokenizer:
        digest = vocab_digest(check_gguf(path))
        silence_llama_logs(verbose)
        model = load_weights(path, 0, vocab_only=True)
        return Tokenizer(path, digest, llama_cpp.llama_model_get_vocab(model), model)

    @staticmethod
    def of(model: Model, digest: str) -> Tokenizer:
        return Tokenizer(model.path, digest, model.vocab)

    def tokenize(self, text: str) -> np.ndarray:
        return tokenize_array(self.vocab, text)

    def close(self) -> None:
        if self._owned:
            llama_cpp.llama_model_free(self._owned)
            self._owned = None

    def __enter__(self) -> Tokenizer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
