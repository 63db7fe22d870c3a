"""Gemma 4's assistant: an MTP drafter shipped in a file of its own (`mtp-gemma-4-31B-it.gguf`,
about 0.5 GB beside the 17 GB target) that reads the target's state instead of keeping one.

It has no KV cache of its own: its attention reads the target's cache (the last sliding-window
layer's and the last full layer's, llama.cpp shares them), which holds every verified token. To
draft after a context it decodes the last token with the target's last hidden state before it
(the row llama.cpp hands out as `embeddings_nextn`), at the last token's position; each further
token goes in at the same position, paired with the assistant's own output state (its
`h_nextn`), as Gemma 4's reference code and llama.cpp's driver do. Since the target's cache is
all it reads, rollback is the target's own: nothing of the assistant's is kept between steps.

The assistant has token embeddings and an output projection of its own; its inputs are the
target's embeddings, which it reads through the context's `ctx_other`. Its context is made as the
target loads, before the target's first pass: llama.cpp shares the target's cache with a context
made then, and one made after a pass reads none of it (a test holds this)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np
from llama_cpp import llama_cpp_ext

from localspec.backend.batch import SEQ, decode_synced
from localspec.backend.draft_ask import ALWAYS, DraftAsk
from localspec.backend.head_cache import Target, free_context, head_context
from localspec.backend.hidden import HiddenRows
from localspec.backend.logits import LogitsReader
from localspec.backend.model_options import HeadFile
from localspec.backend.weights import load_weights
from localspec.errors import LocalspecError


class Gemma4Assistant:
    """What a draft model is to the drafters (DraftView, drafters/mtp.py): it syncs to a context
    and decodes one drafted token at a time; its passes and seconds are counted the same way."""

    kind = "gemma4-assistant"

    def __init__(self, target: Target, path: Path, weights: Any, hidden: HiddenRows) -> None:
        self.target, self.path, self.weights, self.hidden = target, path, weights, hidden
        self.n_vocab, self.n_embd = target.n_vocab, hidden.n_embd
        self.ctx, self._batch = None, None
        self.ctx = head_context(target, weights, 1, llama_cpp.LLAMA_CONTEXT_TYPE_MTP)
        if not self.ctx:
            self.close()
            raise LocalspecError(f"could not create a context for the Gemma 4 assistant {path.name}")
        llama_cpp_ext.llama_set_embeddings_nextn(self.ctx, True, True)  # its state: output rows only
        self.logits = LogitsReader(self.ctx, self.n_vocab, path.name)
        self._batch = llama_cpp.llama_batch_init(1, self.n_embd, 1)
        # A batch made with embeddings has no token array; the assistant's graph reads both.
        self._token = (llama_cpp.llama_token * 1)()
        self._batch.token = self._token
        self._embd = np.ctypeslib.as_array(self._batch.embd, shape=(1, self.n_embd))
        self._context: list[int] = []  # the context of the chain drafted last, and its tokens
        self._drafted: list[int] = []
        self._state = np.zeros(self.n_embd, np.float32)  # the assistant's output at its last token
        self.passes = 0
        self.busy_s = 0.0

    @property
    def cached(self) -> list[int]:
        """What the drafter has taken in, as a draft model's cache would hold it (DraftView counts
        what a sync must read by it): all it read is the target's, so nothing is ever behind."""
        return [*self._context, *self._drafted]

    def set_threads(self, n: int) -> None:
        llama_cpp.llama_set_n_threads(self.ctx, n, n)

    def resume(self, tokens: Sequence[int]) -> None:
        """A generation begins: nothing to restore (the target's cache is all it reads)."""

    def sync(self, tokens: Sequence[int], top_only: bool | None = False) -> np.ndarray:
        """The logits after `tokens` (the target has verified all but the last): the last token with
        the target's state before it (none where `top_only` is None: a prompt, drafted from later)."""
        self._context, self._drafted = list(tokens), []
        self.hidden.release(len(tokens) - 2)
        if top_only is None:
            return np.empty((0, self.n_vocab), np.float32)
        return self._decode(tokens[-1], self.hidden.take(len(tokens) - 2, len(tokens) - 1)[0])

    def decode(
        self, tokens: Sequence[int], all_logits: bool, top_only: bool | None = False, ask: DraftAsk = ALWAYS
    ) -> np.ndarray:
        """Drafted `tokens`, each with the assistant's state after the one before: the logits after
        the last (a draft model's signature; one row)."""
        for token in tokens:
            self._drafted.append(token)
            row = self._decode(token, self._state)
        return row[None]

    def _decode(self, token: int, state: np.ndarray) -> np.ndarray:
        """One pass: `token` with `state`, at the position of the context's last token."""
        position = len(self._context) - 1
        if position >= self.target.n_ctx:
            raise LocalspecError(
                f"context is full: {position + 1} tokens needed, --ctx is {self.target.n_ctx}"
            )
        batch = self._batch
        self._token[0], self._embd[0] = token, state
        batch.pos[0], batch.n_seq_id[0], batch.seq_id[0][0], batch.logits[0] = position, 1, SEQ, True
        batch.n_tokens = 1
        self.passes += 1
        rc, seconds = decode_synced(self.ctx, batch)
        self.busy_s += seconds
        if rc != 0:
            raise LocalspecError(f"llama_decode failed ({rc}) in the Gemma 4 assistant {self.path.name}")
        self._state = np.ctypeslib.as_array(
            llama_cpp_ext.llama_get_embeddings_nextn_ith(self.ctx, 0), shape=(self.n_embd,)
        ).copy()
        return self.logits.rows(1)[0]

    def close(self) -> None:
        if getattr(self, "_batch", None) is not None:
            self._batch.token = None  # ours, not llama_batch_init's to free
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
        free_context(getattr(self, "ctx", None), getattr(self, "weights", None))
        self.ctx = self.weights = None


def attach_assistant(target: Target, head: HeadFile) -> tuple[HiddenRows, Gemma4Assistant]:
    """Load the assistant of `head` over the loaded Gemma 4 target, and make the target's passes
    hand out their hidden states."""
    weights = load_weights(head.path, head.n_gpu_layers, False)
    llama_cpp_ext.llama_set_embeddings_nextn(target.ctx, True, False)  # unmasked: a row for every token
    hidden = HiddenRows(llama_cpp.llama_model_n_embd_out(target.model))
    return hidden, Gemma4Assistant(target, head.path, weights, hidden)
