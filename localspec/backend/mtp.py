"""A target's own multi-token-prediction heads (NextN layers), run in a llama.cpp context of their
own (LLAMA_CONTEXT_TYPE_MTP) over the target's weights.

The head at position p takes the token there and the target's last hidden state at p - 1 (the row
llama.cpp hands out as `embeddings_nextn`), and predicts the token at p + 1, as the target at p
does. Its KV cache holds one entry per position. An entry is exact when it was made with the
target's hidden state; while drafting, a drafted token is paired with the head's own output
instead (the target has not seen it yet), so once the target has verified those tokens, the head
evaluates them again with the target's rows, as llama.cpp's draft-mtp does.

A target with several heads, each trained for its own depth (step35, mimo2, hy_v3), drafts a chain
with them in turn: the k-th drafted token comes from head k - 1 (the last head goes on after), each
head in a context of its own with llama.cpp's NextN layer offset set to it. A head's cache must
hold every position it attends to, so a deeper head evaluates again, in one pass, the tokens
verified since it last ran (with the target's states) and the chain drafted so far (each paired
with the output of the head before it), as llama.cpp's chained draft-mtp does.

The head is what a draft model is to the drafters (DraftView and DraftModelDrafter): it knows the
vocabulary, syncs to a context and decodes one token at a time; its passes and seconds are counted
the same way."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import llama_cpp
import numpy as np
from llama_cpp import llama_cpp_ext

from localspec.backend.batch import SEQ, commit_path, decode_synced, fill, fill_tree
from localspec.backend.draft_ask import ALWAYS, DraftAsk
from localspec.backend.head_cache import HeadCache, Target, head_context
from localspec.backend.hidden import HiddenRows
from localspec.backend.logits import LogitsReader
from localspec.backend.mtp_archs import CHAINED_ARCHS
from localspec.backend.slots import common_prefix
from localspec.backend.weights import metadata
from localspec.errors import LocalspecError


def attach_heads(target: Target) -> tuple[HiddenRows, MtpHead]:
    """Make the target's passes hand out their hidden states, and its heads' contexts to read them."""
    llama_cpp_ext.llama_set_embeddings_nextn(target.ctx, True, False)  # unmasked: a row for every token
    hidden = HiddenRows(llama_cpp.llama_model_n_embd_out(target.model))
    return hidden, MtpHead(target, hidden)


def _head_cache(target: Target, offset: int, n_seq_max: int) -> HeadCache:
    ctx = head_context(target, target.model, n_seq_max, llama_cpp.LLAMA_CONTEXT_TYPE_MTP)
    if not ctx:
        raise LocalspecError(f"could not create the MTP context of {target.path.name}")
    llama_cpp_ext.llama_set_embeddings_nextn(ctx, True, True)  # the head's rows: output rows only
    if offset:
        llama_cpp_ext.llama_set_nextn_layer_offset(ctx, offset)
    name = f"{target.path.name} (MTP{f' head {offset + 1}' if offset else ''})"
    return HeadCache(ctx, llama_cpp.llama_get_memory(ctx), LogitsReader(ctx, target.n_vocab, name))


def _arch(model: Any) -> str:
    return metadata(model, "general.architecture") or ""


class MtpHead:
    """The MTP contexts over a target loaded with its heads (ModelOptions.mtp), which the target
    makes and closes. Drafting a tree (drafters/tree.py), each branch is a sequence of the first
    head's cache, as of a draft model's, and goes on from the head's own output at its newest token
    (trees are drafted by the first head alone)."""

    # A deeper head that chains seldom (drafts rarely reach its depth) is caught up once it lags by
    # this much, so that the target's states kept for it stay few.
    MAX_LAG = 256

    kind = "mtp"  # what the drafters built over it are called

    def __init__(self, target: Target, hidden: HiddenRows) -> None:
        self.target, self.hidden, self.path, self.n_vocab = target, hidden, target.path, target.n_vocab
        self.heads = self._head_count()
        self.n_embd = hidden.n_embd
        self.n_seq_max = target.n_seq_max
        self.n_batch = target.n_batch
        self._batch = llama_cpp.llama_batch_init(self.n_batch, self.n_embd, self.n_seq_max)
        # A batch made with embeddings has no token array; the MTP graph reads both.
        self._tokens = (llama_cpp.llama_token * self.n_batch)()
        self._batch.token = self._tokens
        self._embd = np.ctypeslib.as_array(self._batch.embd, shape=(self.n_batch, self.n_embd))
        self._caches: list[HeadCache] = []
        try:
            for k in range(self.heads):  # the first head's context holds a tree's branches too
                self._caches.append(self._make_cache(k, self.n_seq_max if k == 0 else 1))
        except LocalspecError:
            self.close()
            raise
        self.ctx, self.memory = self._caches[0].ctx, self._caches[0].memory
        self._state: dict[int, np.ndarray] = {}  # sequence -> the first head's output at its newest token
        # The chain drafted since the last sync: the context it continues, its tokens, and the
        # output of the head that drafted each next one (the first head's after the context).
        self._context: list[int] = []
        self._drafted: list[int] = []
        self._outputs: list[np.ndarray] = []
        self._beginning = False
        self.passes = 0
        self.busy_s = 0.0

    def _head_count(self) -> int:
        heads = int(llama_cpp.llama_model_n_layer_nextn(self.target.model))
        if heads > 1 and _arch(self.target.model) not in CHAINED_ARCHS:
            raise LocalspecError(
                f"this llama.cpp runs one MTP head for {_arch(self.target.model)}, and "
                f"{self.target.path.name} holds {heads}"
            )
        return heads

    def _make_cache(self, offset: int, n_seq_max: int) -> HeadCache:
        return _head_cache(self.target, offset, n_seq_max)

    @property
    def cached(self) -> list[int]:
        """What the first head's sequence 0 holds (a tree's committed path is appended to it)."""
        return self._caches[0].cached

    @property
    def exact(self) -> int:
        return self._caches[0].exact

    @exact.setter
    def exact(self, n: int) -> None:
        self._caches[0].exact = n

    def set_threads(self, n: int) -> None:
        for cache in self._caches:
            llama_cpp.llama_set_n_threads(cache.ctx, n, n)

    def resume(self, tokens: Sequence[int]) -> None:
        """A generation begins (its prompt comes next in sync, untimed as drafting): every head
        takes it in then, so that a deeper head's first draft is not charged with the prompt.
        Nothing else to restore: the heads keep one sequence, and sync() reuses what of it the
        next context shares (its entries depend on the tokens alone, whichever conversation made
        them)."""
        self._beginning = True

    def sync(self, tokens: Sequence[int], top_only: bool | None = False) -> np.ndarray:
        """Make the first head's cache hold `tokens` (all but the last one evaluated by the target),
        its entries paired with the target's hidden states; the logits after the last token (always
        logits: top_only, a draft model's signature, asks for nothing a head does otherwise)."""
        first = self._caches[0]
        self._state = {SEQ: self._catch_up(first, tokens)}
        self._context, self._drafted, self._outputs = list(tokens), [], [self._state[SEQ]]
        for cache in self._caches[1:]:
            if self._beginning or len(tokens) - cache.exact > self.MAX_LAG:
                self._catch_up(cache, tokens)
        self._beginning = False
        self.hidden.release(min([len(tokens) - 2, *(c.exact - 1 for c in self._caches[1:])]))
        return first.logits.rows(1, first=-1)[0]

    def decode(
        self, tokens: Sequence[int], all_logits: bool, top_only: bool | None = False, ask: DraftAsk = ALWAYS
    ) -> np.ndarray:
        """Append drafted tokens, each paired with the output of the head before it (the target's
        state is not known yet): the logits after the last (a draft model's signature; one row)."""
        for token in tokens:
            self._drafted.append(token)
            depth = len(self._drafted)
            if depth < self.heads:  # this head's first token in the chain
                output = self._catch_up(self._caches[depth], self._context, self._drafted, self._outputs)
            else:
                output = self._decode(self._caches[-1], [token], self._outputs[-1][None])
            self._outputs.append(output)
        return self._caches[min(len(self._drafted), self.heads - 1)].logits.rows(1, first=-1)

    def _catch_up(
        self,
        cache: HeadCache,
        context: Sequence[int],
        drafted: Sequence[int] = (),
        outputs: Sequence[np.ndarray] = (),
    ) -> np.ndarray:
        """Make `cache` hold `context` paired with the target's states, then `drafted`, each paired
        with the output before it; its output at the last token."""
        n = min(common_prefix(cache.cached, context), cache.exact, len(context) - 1)
        llama_cpp.llama_memory_seq_rm(cache.memory, SEQ, n, -1)
        del cache.cached[n:]
        tokens = [*context[n:], *drafted]
        rows = self.hidden.take(n - 1, len(context) - 1)
        if drafted:
            rows = np.concatenate([rows, np.stack(outputs[: len(drafted)])])
        for start in range(0, len(tokens), self.n_batch):
            output = self._decode(
                cache, tokens[start : start + self.n_batch], rows[start : start + self.n_batch]
            )
        cache.exact = len(context)
        return output

    def _decode(self, cache: HeadCache, tokens: Sequence[int], rows: np.ndarray) -> np.ndarray:
        """Append `tokens` paired with `rows`; the head's output at the last."""
        n = self._pass(cache, tokens, rows, output=True)
        return self._output(cache.ctx, n - 1)

    def _pass(self, cache: HeadCache, tokens: Sequence[int], rows: np.ndarray, output: bool) -> int:
        """One pass appending `tokens` paired with `rows`, with outputs for the last (`output`) or
        none; returns the number of tokens."""
        if len(cache.cached) + len(tokens) > self.target.n_ctx:
            raise LocalspecError(
                f"context is full: {len(cache.cached) + len(tokens)} tokens needed, --ctx is "
                f"{self.target.n_ctx}"
            )
        base = len(cache.cached)
        n = fill(self._batch, tokens, base, every=False, last=output)
        self._embd[:n] = rows
        if (rc := self._run(cache.ctx, n)) != 0:
            llama_cpp.llama_memory_seq_rm(cache.memory, SEQ, base, -1)
            raise LocalspecError(
                f"llama_decode failed ({rc}) in the MTP head of {self.path.name} at position {base}"
            )
        cache.cached.extend(tokens)
        return n

    def _run(self, ctx: Any, n: int) -> int:
        self.passes += 1
        rc, seconds = decode_synced(ctx, self._batch)
        self.busy_s += seconds
        return rc

    def _output(self, ctx: Any, row: int) -> np.ndarray:
        return np.ctypeslib.as_array(
            llama_cpp_ext.llama_get_embeddings_nextn_ith(ctx, row), shape=(self.n_embd,)
        ).copy()

    # --- several sequences of the first head (a draft tree) -------------------------------
    def decode_tree(
        self, tokens: Sequence[int], positions: Sequence[int], seq_ids: Sequence[Sequence[int]]
    ) -> np.ndarray:
        """One pass over each branch's newest token (in one sequence each), paired with the head's
        output at the token before it in that branch; logits for every token. `cached` keeps
        describing sequence 0; the caller commits a path after."""
        if max(positions) >= self.target.n_ctx:
            raise LocalspecError(
                f"context is full: {max(positions) + 1} tokens needed, --ctx is {self.target.n_ctx}"
            )
        n = fill_tree(self._batch, tokens, positions, seq_ids)
        self._embd[:n] = [self._state[seqs[0]] for seqs in seq_ids]
        if (rc := self._run(self.ctx, n)) != 0:
            llama_cpp.llama_memory_seq_rm(self.memory, -1, min(positions), -1)
            raise LocalspecError(
                f"llama_decode failed ({rc}) in the MTP head of {self.path.name} for a draft tree"
            )
        for i, seqs in enumerate(seq_ids):
            self._state[seqs[0]] = self._output(self.ctx, i)
        return self._caches[0].logits.rows(n)

    def copy_seq(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None:
        llama_cpp.llama_memory_seq_cp(self.memory, src, dst, p0, p1)
        self._state[dst] = self._state[src]

    def drop_seq(self, seq: int, p0: int = -1, p1: int = -1) -> None:
        llama_cpp.llama_memory_seq_rm(self.memory, seq, p0, p1)

    def commit_path(self, seq: int, path: Sequence[int], n_seqs: int) -> None:
        """As the target's: sequence 0 holds `cached` + `path`, the head's own entries (inexact:
        the next sync makes them again with the target's states)."""
        self._state = {SEQ: self._state[seq]}
        commit_path(self, seq, path, n_seqs)

    def close(self) -> None:
        if getattr(self, "_batch", None) is not None:
            self._batch.token = None  # ours, not llama_batch_init's to free
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
        for cache in getattr(self, "_caches", ()):
            llama_cpp.llama_free(cache.ctx)
        self._caches, self.ctx = [], None
