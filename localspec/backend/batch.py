"""The batches the target and its MTP heads both run: a run of sequence 0's tokens, or a draft
tree's tokens in several sequences; and what is kept of a tree."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Protocol

import llama_cpp

SEQ = 0  # every model here decodes a single sequence


class DecodeAborted(Exception):
    """llama_decode stopped early because the cancel event was set (Ctrl-C)."""


def fill(batch: Any, tokens: Sequence[int], base: int, every: bool, last: bool = True) -> int:
    """Put `tokens` at positions base.. of SEQ into `batch`, with logits for every token or (`last`)
    for the last one; returns their number."""
    n = len(tokens)
    # A pointer object each
    token, pos, n_seq_id, seq_id, logits = (
        batch.token,
        batch.pos,
        batch.n_seq_id,
        batch.seq_id,
        batch.logits,
    )
    for i, tok in enumerate(tokens):
        token[i] = tok
        pos[i] = base + i
        n_seq_id[i] = 1
        seq_id[i][0] = SEQ
        logits[i] = every
    if last:
        logits[n - 1] = True
    batch.n_tokens = n
    return n


def fill_tree(
    batch: Any,
    tokens: Sequence[int],
    positions: Sequence[int],
    seq_ids: Sequence[Sequence[int]],
    outputs: Sequence[bool] | None = None,
) -> int:
    """Put each token at its position in its sequences into `batch`, with logits for every token
    (`outputs`: for those it marks)."""
    for i, (tok, pos, seqs) in enumerate(zip(tokens, positions, seq_ids, strict=False)):
        batch.token[i] = tok
        batch.pos[i] = pos
        batch.n_seq_id[i] = len(seqs)
        for j, s in enumerate(seqs):
            batch.seq_id[i][j] = s
        batch.logits[i] = True if outputs is None else outputs[i]
    batch.n_tokens = len(tokens)
    return len(tokens)


class _Sequences(Protocol):
    cached: list[int]

    def copy_seq(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None: ...

    def drop_seq(self, seq: int, p0: int = -1, p1: int = -1) -> None: ...


def commit_path(owner: _Sequences, seq: int, path: Sequence[int], n_seqs: int) -> None:
    """After a tree pass: make sequence 0 hold `cached` + `path` (the tokens of sequence `seq`
    right after the cached ones) and free every other sequence's cells."""
    base = len(owner.cached)
    if seq != SEQ:
        owner.drop_seq(SEQ, base, -1)
        owner.copy_seq(seq, SEQ, base, base + len(path))
    else:
        owner.drop_seq(SEQ, base + len(path), -1)
    for s in range(1, n_seqs):
        owner.drop_seq(s)
    owner.cached.extend(path)


def decode_synced(ctx: Any, batch: Any) -> tuple[int, float]:
    """llama_decode's code and the seconds to its outputs (a GPU's pass is done when they are)."""
    start = time.perf_counter()
    rc = llama_cpp.llama_decode(ctx, batch)
    llama_cpp.llama_synchronize(ctx)
    return rc, time.perf_counter() - start
