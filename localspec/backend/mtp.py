"""A target's own multi-token-prediction heads (NextN layers), run in a llama.cpp context of their
own (LLAMA_CONTEXT_TYPE_MTP) over the target's weights.

The head at position p takes the token there and the target's last hidden state at p - 1 (the row
llama.cpp hands out as `embeddings_nextn`), and predicts the token at p + 1, as the target at p
does. Its KV cache holds one entry per position. An entry is exact when it was made with the
target's hidden state; while drafting, a drafted token is paired with the head's own output
instead (the target has not seen it yet), so once the target has verified those tokens, the head
evaluates them again with the target's rows, as llama.cpp's draft-mtp does.

The head is what a draft model is to the drafters (DraftView and DraftModelDrafter): it knows the
vocabulary, syncs to a context and decodes one token at a time; its passes and seconds are counted
the same way."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import llama_cpp
import numpy as np
from llama_cpp import llama_cpp_ext

from localspec.backend.batch import SEQ, commit_path, decode_synced, fill, fill_tree
from localspec.backend.gguf_file import GGUFInfo
from localspec.backend.hidden import HiddenRows
from localspec.backend.logits import LogitsReader
from localspec.backend.slots import common_prefix
from localspec.errors import LocalspecError

# Architectures whose NextN layers this llama.cpp runs as an MTP graph (src/models/*.cpp building
# LLM_GRAPH_TYPE_DECODER_MTP); others (glm4, gemma4's assistant) keep theirs unused.
MTP_ARCHS = frozenset({
    "bailingmoe3", "cohere2moe", "deepseek2", "deepseek32", "deepseek4", "glm-dsa", "glm4moe", "glm5-next",
    "hy_v3", "mimo2", "nemotron_h_moe", "qwen35", "qwen35moe", "qwen3next", "step35",
})


def head_count(info: GGUFInfo) -> int:
    """How many NextN heads the file holds (0: none, or only the header's claim of them: a trunk
    shipped without its heads)."""
    arch = info.fields.get("general.architecture")
    claimed = info.fields.get(f"{arch}.nextn_predict_layers", 0)
    blocks = info.fields.get(f"{arch}.block_count", 0)
    if not isinstance(claimed, int) or not isinstance(blocks, int) or claimed <= 0:
        return 0
    names = {t.name for t in info.tensors}
    held = sum(f"blk.{i}.nextn.eh_proj.weight" in names for i in range(max(blocks - claimed, 0), blocks))
    if claimed >= blocks or 0 < held < claimed:
        raise LocalspecError(f"model file is inconsistent: {info.path} (its header gives {claimed} MTP heads of "
                             f"{blocks} layers, its tensors hold {held})")
    return held


def drafts_itself(info: GGUFInfo) -> bool:
    """Whether the target can draft with its own heads (what it does when no draft is given)."""
    return info.fields.get("general.architecture") in MTP_ARCHS and head_count(info) > 0


def check_heads(info: GGUFInfo) -> None:
    """Raise LocalspecError unless the target can draft with its own heads here."""
    arch = info.fields.get("general.architecture")
    if not head_count(info):
        raise LocalspecError(f"-d mtp needs a model with MTP heads (NextN layers): {info.path.name} ({arch}) has none")
    if arch not in MTP_ARCHS:
        raise LocalspecError(f"-d mtp: this llama.cpp runs no MTP graph for {arch} ({info.path.name}); "
                             f"it does for {', '.join(sorted(MTP_ARCHS))}")


class _Target(Protocol):
    """What of the target (backend/model.py) its heads use."""

    model: Any  # the weights, the heads' included
    ctx: Any
    path: Path
    n_vocab: int
    n_ctx: int
    n_batch: int
    n_seq_max: int
    threads: int


def attach_heads(target: _Target) -> tuple[HiddenRows, MtpHead]:
    """Make the target's passes hand out their hidden states, and its heads' context to read them."""
    llama_cpp_ext.llama_set_embeddings_nextn(target.ctx, True, False)  # unmasked: a row for every token
    hidden = HiddenRows(llama_cpp.llama_model_n_embd_out(target.model))
    return hidden, MtpHead(target, hidden)


class MtpHead:
    """The MTP context over a target loaded with its heads (ModelOptions.mtp), which the target
    makes and closes. Drafting a tree (drafters/tree.py), each branch is a sequence of the head's
    cache, as of a draft model's, and goes on from the head's own output at its newest token."""

    def __init__(self, target: _Target, hidden: HiddenRows) -> None:
        self.target, self.hidden, self.path, self.n_vocab = target, hidden, target.path, target.n_vocab
        self.heads = int(llama_cpp.llama_model_n_layer_nextn(target.model))
        self.n_embd = hidden.n_embd
        self.n_seq_max = target.n_seq_max
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = target.n_ctx
        cparams.n_batch = cparams.n_ubatch = target.n_batch
        cparams.n_seq_max = self.n_seq_max
        cparams.kv_unified = self.n_seq_max > 1
        cparams.n_threads = cparams.n_threads_batch = target.threads
        cparams.no_perf = True
        cparams.ctx_type = llama_cpp.LLAMA_CONTEXT_TYPE_MTP
        cparams.ctx_other = target.ctx
        self.ctx = llama_cpp.llama_init_from_model(target.model, cparams)
        if not self.ctx:
            raise LocalspecError(f"could not create the MTP context of {target.path.name}")
        llama_cpp_ext.llama_set_embeddings_nextn(self.ctx, True, True)  # the head's rows: output rows only
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.logits = LogitsReader(self.ctx, self.n_vocab, f"{target.path.name} (MTP)")
        self.n_batch = target.n_batch
        self._batch = llama_cpp.llama_batch_init(self.n_batch, self.n_embd, self.n_seq_max)
        # A batch made with embeddings has no token array; the MTP graph reads both.
        self._tokens = (llama_cpp.llama_token * self.n_batch)()
        self._batch.token = self._tokens
        self._embd = np.ctypeslib.as_array(self._batch.embd, shape=(self.n_batch, self.n_embd))
        self._state: dict[int, np.ndarray] = {}  # sequence -> the head's output at its newest token
        self.cached: list[int] = []
        self.exact = 0  # leading cached entries made with the target's hidden states
        self.passes = 0
        self.busy_s = 0.0

    def set_threads(self, n: int) -> None:
        llama_cpp.llama_set_n_threads(self.ctx, n, n)

    def resume(self, tokens: Sequence[int]) -> None:
        """Nothing to restore: the head keeps one sequence, and sync() reuses what of it the next
        context shares (its entries depend on the tokens alone, whichever conversation made them)."""

    def sync(self, tokens: Sequence[int]) -> np.ndarray:
        """Make the head's cache hold `tokens` (all but the last one evaluated by the target), its
        entries paired with the target's hidden states; the logits after the last token."""
        n = min(common_prefix(self.cached, tokens), self.exact, len(tokens) - 1)
        llama_cpp.llama_memory_seq_rm(self.memory, SEQ, n, -1)
        del self.cached[n:]
        rows = self.hidden.take(n - 1, len(tokens) - 1)
        for start in range(n, len(tokens), self.n_batch):
            stop = min(start + self.n_batch, len(tokens))
            self._decode(tokens[start:stop], rows[start - n : stop - n])
        self.exact = len(tokens)
        return self.logits.rows(1, first=-1)[0]

    def decode(self, tokens: Sequence[int], all_logits: bool) -> np.ndarray:
        """Append drafted tokens, each paired with the head's own last hidden state (the target's
        is not known yet): the logits after the last (a draft model's signature; one row always)."""
        for token in tokens:
            self._decode([token], self._state[SEQ][None])
        return self.logits.rows(1, first=-1)

    def _decode(self, tokens: Sequence[int], rows: np.ndarray) -> None:
        if len(self.cached) + len(tokens) > self.target.n_ctx:
            raise LocalspecError(f"context is full: {len(self.cached) + len(tokens)} tokens needed, --ctx is {self.target.n_ctx}")
        base = len(self.cached)
        n = fill(self._batch, tokens, base, every=False)
        self._embd[:n] = rows
        if (rc := self._run(n)) != 0:
            llama_cpp.llama_memory_seq_rm(self.memory, SEQ, base, -1)
            raise LocalspecError(f"llama_decode failed ({rc}) in the MTP head of {self.path.name} at position {base}")
        self.cached.extend(tokens)
        self._state = {SEQ: self._output(n - 1)}

    def _run(self, n: int) -> int:
        self.passes += 1
        rc, seconds = decode_synced(self.ctx, self._batch)
        self.busy_s += seconds
        return rc

    def _output(self, row: int) -> np.ndarray:
        return np.ctypeslib.as_array(llama_cpp_ext.llama_get_embeddings_nextn_ith(self.ctx, row), shape=(self.n_embd,)).copy()

    # --- several sequences (a draft tree) --------------------------------------------------
    def decode_tree(self, tokens: Sequence[int], positions: Sequence[int], seq_ids: Sequence[Sequence[int]]) -> np.ndarray:
        """One pass over each branch's newest token (in one sequence each), paired with the head's
        output at the token before it in that branch; logits for every token. `cached` keeps
        describing sequence 0; the caller commits a path after."""
        if max(positions) >= self.target.n_ctx:
            raise LocalspecError(f"context is full: {max(positions) + 1} tokens needed, --ctx is {self.target.n_ctx}")
        n = fill_tree(self._batch, tokens, positions, seq_ids)
        self._embd[:n] = [self._state[seqs[0]] for seqs in seq_ids]
        if (rc := self._run(n)) != 0:
            llama_cpp.llama_memory_seq_rm(self.memory, -1, min(positions), -1)
            raise LocalspecError(f"llama_decode failed ({rc}) in the MTP head of {self.path.name} for a draft tree")
        for i, seqs in enumerate(seq_ids):
            self._state[seqs[0]] = self._output(i)
        return self.logits.rows(n)

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
        if getattr(self, "ctx", None):
            self._batch.token = None  # ours, not llama_batch_init's to free
            llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(self.ctx)
            self.ctx = None
