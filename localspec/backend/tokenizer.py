"""A GGUF's tokenizer alone: its vocabulary loaded without the weights (index builds)."""

from __future__ import annotations

from pathlib import Path

import llama_cpp
import numpy as np

from localspec.backend.gguf_file import check_gguf
from localspec.backend.logs import silence_llama_logs
from localspec.backend.vocab import tokenize_array, vocab_digest
from localspec.backend.weights import load_weights


class Tokenizer:
    def __init__(self, path: Path, verbose: bool = False) -> None:
        info = check_gguf(path)
        self.path = path
        self.digest = vocab_digest(info)
        silence_llama_logs(verbose)
        self.model = load_weights(path, 0, vocab_only=True)
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(self.vocab))

    def tokenize(self, text: str) -> np.ndarray:
        return tokenize_array(self.vocab, text)

    def close(self) -> None:
        if self.model:
            llama_cpp.llama_model_free(self.model)
            self.model = None

    def __enter__(self) -> Tokenizer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
