"""One pass over a run of sequence 0's tokens, as the target and its MTP heads both run them."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import llama_cpp

SEQ = 0  # every model here decodes a single sequence


def fill(batch: Any, tokens: Sequence[int], base: int, every: bool, last: bool = True) -> int:
    """Put `tokens` at positions base.. of SEQ into `batch`, with logits for every token or (`last`)
    for the last one; returns their number."""
    n = len(tokens)
    for i, tok in enumerate(tokens):
        batch.token[i] = tok
        batch.pos[i] = base + i
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = SEQ
        batch.logits[i] = every
    if last:
        batch.logits[n - 1] = True
    batch.n_tokens = n
    return n


def decode_synced(ctx: Any, batch: Any) -> tuple[int, float]:
    """llama_decode's code and the seconds to its outputs (a GPU's pass is done when they are)."""
    start = time.perf_counter()
    rc = llama_cpp.llama_decode(ctx, batch)
    llama_cpp.llama_synchronize(ctx)
    return rc, time.perf_counter() - start
