"""A DFlash block drafter: a few layers trained for one target that draft a whole block of tokens
in one pass, from the target's state.

Its KV cache holds, for every position the target has verified, keys and values made from the
target's own layer inputs there (joined, projected by its `fc` and normalised: llama.cpp does that
inside a decode of an embeddings batch), taken in as each target pass ends: a verification pass's
rejected tokens too, cut at the next sync. To draft after the context, one pass decodes the block
[last token, mask, mask, ...] at the positions that follow, its attention over the cache and,
non-causal, within the block; the logits at the i-th mask give the i-th drafted token. The block's
own entries are dropped at once: the cache holds the target's rows alone, so rollback after a
rejection is cutting it back, and each drafted token's distribution depends on the context only,
never on the tokens drafted before it (so sampling each from its row is exact under the rejection
rule, as a draft model's chain is).

The block's length is fixed by its training (`dflash.block_size`): at most block_size - 1 tokens a
pass. The drafter borrows the target's token embeddings and output projection where it has none of
its own (through the context's `ctx_other`).

A DSpark drafter is a DFlash one with a Markov head: inside the same pass, each position's logits
are biased by the token before it, the last token's for the first and the previous position's
argmax after that (llama.cpp's graph chains them greedily), and with its anchor-first layout the
last token's own row drafts the first token, so a block drafts block_size tokens. Each row still
depends on the context alone, never on the tokens drafted (sampled) before it. DFlash2's selector
lattice and the DeepSeek-V4 stages are other graphs, not run here (backend/drafter_files.py
refuses them)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np

from localspec.backend.batch import SEQ, decode_synced, fill
from localspec.backend.draft_ask import ALWAYS, DraftAsk
from localspec.backend.head_cache import Target, free_context, head_context
from localspec.backend.layer_inputs import LayerInputs, hand_out_layer_inputs
from localspec.backend.logits import LogitsReader
from localspec.backend.model_options import HeadFile
from localspec.backend.slots import common_prefix
from localspec.backend.weights import load_weights, metadata
from localspec.errors import LocalspecError

DEFAULT_BLOCK = 16  # llama.cpp's, for a file that does not say


class InjectedInputs(LayerInputs):
    """The target's layer inputs, handed to the block drafter's cache as each target pass ends (as
    llama.cpp's driver does): a long prompt's are never all held at once (five layers of a 5,120-wide
    target are 100 KB a token). A verification pass's rejected tokens go in too, and the next sync
    cuts them. Rows that do not continue the cache (a tree pass's path, picked after the pass) are
    kept for the next sync instead."""

    def __init__(self, layers: Sequence[int], n_embd_target: int) -> None:
        super().__init__(layers, n_embd_target)
        self.take_in: Callable[[int, np.ndarray], bool] | None = None  # set once the block exists

    def _keep(self, start: int, rows: np.ndarray) -> None:
        if self.take_in is not None and self.take_in(start, rows):
            self.cut(start)  # whatever was kept from there on is stale
        else:
            self.put(start, rows)


class DFlashBlock:
    """What a draft model is to the drafters (DraftView, drafters/block.py): it syncs to a context,
    then hands out the block's rows one drafted token at a time; its passes and seconds are counted
    the same way."""

    def __init__(
        self, target: Target, path: Path, weights: Any, inputs: InjectedInputs, kind: str = "dflash"
    ) -> None:
        self.target, self.path, self.weights, self.inputs, self.kind = target, path, weights, inputs, kind
        self.n_vocab, self.n_batch = target.n_vocab, target.n_batch
        self.block = int(metadata(weights, "dflash.block_size") or DEFAULT_BLOCK)
        # DSpark's anchor-first layout drafts from the last token's own row too (llama.cpp's default
        # where the file does not say); DFlash's from the masks after it.
        self.first = (
            0 if kind == "dspark" and metadata(weights, "dflash.sample_from_anchor") != "false" else 1
        )
        self.most = self.block - self.first  # tokens one pass drafts
        self.mask = llama_cpp.llama_vocab_mask(llama_cpp.llama_model_get_vocab(weights))
        self.ctx, self._inject, self._noise = None, None, None
        if self.mask < 0 or self.most < 1:
            self.close()
            raise LocalspecError(
                f"draft file is inconsistent: {path} (a DFlash drafter needs a mask token and blocks of 2)"
            )
        self.ctx = head_context(target, weights, 1, llama_cpp.LLAMA_CONTEXT_TYPE_DEFAULT)
        if not self.ctx:
            self.close()
            raise LocalspecError(f"could not create a context for the DFlash drafter {path.name}")
        # Within the block every token sees every other, unless the file was trained causal.
        llama_cpp.llama_set_causal_attn(self.ctx, metadata(weights, "dflash.attention.causal") == "true")
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.logits = LogitsReader(self.ctx, self.n_vocab, path.name)
        self._inject = llama_cpp.llama_batch_init(self.n_batch, inputs.n_embd, 1)
        self._inject_rows = np.ctypeslib.as_array(self._inject.embd, shape=(self.n_batch, inputs.n_embd))
        self._noise = llama_cpp.llama_batch_init(self.block, 0, 1)
        self._held: list[int] = []  # the tokens whose target rows the cache holds, by position
        self._block: list[int] = []  # the last token and those drafted from the block after it
        self._block_at = 0  # the last token's position
        self._rows: np.ndarray = np.empty((0, self.n_vocab), np.float32)
        self._next = 0  # the row of the block the next drafted token comes from
        self.passes = 0
        self.busy_s = 0.0
        self.block_s = 0.0  # the last block pass's seconds (a sync's drafting, not its catching up)
        inputs.take_in = self._take_rows

    @property
    def cached(self) -> list[int]:
        """What the drafter has taken in, as a draft model's cache would hold it (DraftView counts
        what a sync must read by it): the tokens it holds the target's rows of, then the block's past
        them (their rows come with the target's next pass, as a draft model evaluates the last token
        it drafted)."""
        return [*self._held, *self._block[max(len(self._held) - self._block_at, 0) :]]

    def set_threads(self, n: int) -> None:
        llama_cpp.llama_set_n_threads(self.ctx, n, n)

    def resume(self, tokens: Sequence[int]) -> None:
        """A generation begins: nothing to restore (sync keeps what the cache shares with it)."""

    def sync(self, tokens: Sequence[int], top_only: bool | None = False) -> np.ndarray:
        """Make the cache hold the target's rows for `tokens` but the last (all the target has
        verified), then draft the block after them: its first row (none where `top_only` is None:
        a prompt read at the start of a generation, drafted from later)."""
        n = min(common_prefix(self._held, tokens), len(tokens) - 1)
        llama_cpp.llama_memory_seq_rm(self.memory, SEQ, n, -1)
        del self._held[n:]
        self._block = []
        verified = tokens[n:-1]
        rows = self.inputs.take(n, len(tokens) - 1)
        for start in range(0, len(verified), self.n_batch):
            self._take_in(verified[start : start + self.n_batch], rows[start : start + self.n_batch])
        self.inputs.release(len(tokens) - 1)
        if top_only is None:
            return self._rows[:0]
        self._draft(tokens[-1])
        return self._rows[0]

    def decode(
        self, tokens: Sequence[int], all_logits: bool, top_only: bool | None = False, ask: DraftAsk = ALWAYS
    ) -> np.ndarray:
        """After drafted `tokens`: the block's row for the token that follows them (no pass: the
        block drafted it already, whatever came before)."""
        self._block.extend(tokens)
        self._next += len(tokens)
        if self._next >= len(self._rows):
            raise LocalspecError(f"a DFlash block drafts at most {self.most} tokens a pass")
        return self._rows[self._next : self._next + 1]

    def _take_rows(self, start: int, rows: np.ndarray) -> bool:
        """A target pass's rows from position `start` on, straight into the cache where they
        continue it (what the cache held from there on goes); False where they leave a gap."""
        if start > len(self._held) or start + len(rows) > len(self.target.cached):
            return False
        if common_prefix(self._held, self.target.cached) < start:
            return False  # another text's rows precede them (a conversation the target restored)
        llama_cpp.llama_memory_seq_rm(self.memory, SEQ, start, -1)
        del self._held[start:]
        tokens = self.target.cached[start : start + len(rows)]
        for at in range(0, len(rows), self.n_batch):
            self._take_in(tokens[at : at + self.n_batch], rows[at : at + self.n_batch])
        return True

    def _take_in(self, tokens: Sequence[int], rows: np.ndarray) -> None:
        """Append the target's rows of `tokens` (the positions after those held) to the cache."""
        base, n = len(self._held), len(tokens)
        batch = self._inject
        for i in range(n):
            batch.pos[i], batch.n_seq_id[i], batch.seq_id[i][0], batch.logits[i] = base + i, 1, SEQ, False
        self._inject_rows[:n] = rows
        batch.n_tokens = n
        if (rc := self._run(batch)) != 0:
            llama_cpp.llama_memory_seq_rm(self.memory, SEQ, base, -1)
            raise LocalspecError(
                f"llama_decode failed ({rc}) in the DFlash drafter {self.path.name} at {base}"
            )
        self._held.extend(tokens)

    def _draft(self, last: int) -> None:
        """One pass over the block after the held tokens; its entries are dropped at once."""
        base = len(self._held)
        if base + self.block > self.target.n_ctx:
            raise LocalspecError(
                f"context is full: {base + self.block} tokens needed, --ctx is {self.target.n_ctx}"
            )
        fill(self._noise, [last, *[self.mask] * (self.block - 1)], base, every=True)
        busy = self.busy_s
        rc = self._run(self._noise)
        self.block_s = self.busy_s - busy
        llama_cpp.llama_memory_seq_rm(self.memory, SEQ, base, -1)
        if rc != 0:
            raise LocalspecError(
                f"llama_decode failed ({rc}) in the DFlash drafter {self.path.name} at {base}"
            )
        # A view of llama.cpp's buffer: read before this context's next pass (the drafter's call)
        self._rows, self._next, self._block, self._block_at = (
            self.logits.rows(self.most, first=self.first),
            0,
            [last],
            base,
        )

    def _run(self, batch: Any) -> int:
        self.passes += 1
        rc, seconds = decode_synced(self.ctx, batch)
        self.busy_s += seconds
        return rc

    def close(self) -> None:
        for name in ("_inject", "_noise"):
            if getattr(self, name, None) is not None:
                llama_cpp.llama_batch_free(getattr(self, name))
                setattr(self, name, None)
        free_context(getattr(self, "ctx", None), getattr(self, "weights", None))
        self.ctx = self.weights = None


def attach_dflash(target: Target, head: HeadFile) -> tuple[InjectedInputs, DFlashBlock]:
    """Load the DFlash drafter of `head` over the loaded target, and make the target's passes hand
    out the inputs of the layers it reads."""
    weights = load_weights(head.path, head.n_gpu_layers, False)
    inputs = InjectedInputs(head.layers, llama_cpp.llama_model_n_embd(target.model))
    hand_out_layer_inputs(target.ctx, head.layers)
    return inputs, DFlashBlock(target, head.path, weights, inputs, head.kind)
