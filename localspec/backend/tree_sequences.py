"""A model's cache as several sequences: a draft tree's branches evaluated in one pass, each in
its own sequence of one unified cache, and the accepted path committed to sequence 0 after."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import llama_cpp
import numpy as np

from localspec.backend.batch import DecodeAborted, commit_path, fill_tree
from localspec.errors import LocalspecError


class TreeSequences:
    """Model's tree passes (backend/model.py holds the context, batch and readers they use)."""

    # Model's, which these methods use.
    ctx: Any
    memory: Any
    path: Any
    n_batch: int
    cached: list[int]
    hidden: Any
    logits: Any
    _batch: Any
    timer: Any
    _want: Callable[[bool | None], None]
    _llama_decode: Callable[[int], int]

    def decode_tree(
        self, tokens: Sequence[int], positions: Sequence[int], seq_ids: Sequence[Sequence[int]]
    ) -> np.ndarray:
        """One pass over tokens at explicit positions, each in the given sequences, with logits for
        every token. `cached` keeps describing sequence 0 only; the caller commits a path after."""
        if len(tokens) > self.n_batch:
            raise ValueError("a tree must fit one batch")
        with self.timer(len(tokens)):
            return self._decode_tree(tokens, positions, seq_ids)

    def _decode_tree(
        self, tokens: Sequence[int], positions: Sequence[int], seq_ids: Sequence[Sequence[int]]
    ) -> np.ndarray:
        self._want(False)  # branches in other sequences have no sampler: a tree is judged on logits
        rc = self._llama_decode(fill_tree(self._batch, tokens, positions, seq_ids))
        if rc == 2:
            # As in _decode_chunk: drop whatever part of the batch reached the cache, in every sequence.
            llama_cpp.llama_memory_seq_rm(self.memory, -1, min(positions), -1)
            raise DecodeAborted()
        if rc != 0:
            raise LocalspecError(f"llama_decode failed ({rc}) on {self.path.name} for a draft tree")
        if self.hidden is not None:
            self.hidden.cut(min(positions))
        return self.logits.rows(len(tokens))

    def copy_seq(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None:
        llama_cpp.llama_memory_seq_cp(self.memory, src, dst, p0, p1)

    def drop_seq(self, seq: int, p0: int = -1, p1: int = -1) -> None:
        llama_cpp.llama_memory_seq_rm(self.memory, seq, p0, p1)

    def commit_path(self, seq: int, path: Sequence[int], n_seqs: int, rows: Sequence[int] = ()) -> None:
        """After a tree pass: make sequence 0 hold `cached` + `path` (the tokens of sequence `seq`
        right after the cached ones) and free every other sequence's cells. `rows`: the tree
        pass's rows of path's tokens, whose hidden states the MTP heads are to take in."""
        if self.hidden is not None and rows:
            self.hidden.pick(self.ctx, len(self.cached), rows)
        commit_path(self, seq, path, n_seqs)
