"""One GGUF model with its llama.cpp context and KV cache, driven through llama-cpp-python's low-level API."""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import llama_cpp
import numpy as np

from localspec.backend.alone import Alone
from localspec.backend.assistant import Gemma4Assistant, attach_assistant
from localspec.backend.batch import SEQ, DecodeAborted, decode_synced, fill
from localspec.backend.devices import local_gpus
from localspec.backend.dflash import DFlashBlock, attach_dflash
from localspec.backend.draft_ask import ALWAYS, DraftAsk
from localspec.backend.drafter_files import ASSISTANT, DFLASH, DSPARK
from localspec.backend.eagle3 import attach_eagle3
from localspec.backend.hidden import HiddenRows
from localspec.backend.logits import LogitsReader
from localspec.backend.logs import silence_llama_logs
from localspec.backend.model_options import HeadFile, ModelOptions, flash_attn_type
from localspec.backend.mtp import MtpHead, attach_heads
from localspec.backend.rpc import PassTimer
from localspec.backend.slots import KeptSequences, common_prefix
from localspec.backend.token_text import TokenText
from localspec.backend.top_tokens import DeviceArgmax
from localspec.backend.tree_sequences import TreeSequences
from localspec.backend.weights import OutOfMemory, load_weights
from localspec.errors import LocalspecError

# What drafts from the target's state: its MTP heads or an EAGLE-3 head (MtpHead), a DFlash block
# drafter, or Gemma 4's assistant
Head = MtpHead | DFlashBlock | Gemma4Assistant

ABORTABLE_BATCH = 64  # passes this long (prompts) can be stopped mid-way by Ctrl-C
CTX_PAD = 256  # llama.cpp rounds a context up to a multiple of this
DEFAULT_CTX = 4096  # a context of 0 asks for the model's training context, but at most this


def context_tokens(asked: int, train_ctx: int) -> int:
    """The context a sequence gets for `asked` tokens (0: the model's training context `train_ctx`,
    at most DEFAULT_CTX). llama.cpp pads the context to a multiple of 256 but caps the batch at the
    size asked for: asking for the padded size keeps a tiny --ctx from a batch of one token (which
    aborts llama.cpp outright with several sequences)."""
    requested = asked if asked > 0 else min(DEFAULT_CTX, train_ctx)
    return -(-requested // CTX_PAD) * CTX_PAD


class Model(Alone, TokenText, TreeSequences):
    """Weights, one context and the exact list of tokens its KV cache holds (`cached`)."""

    def __init__(self, path: Path, options: ModelOptions, cancel: threading.Event | None = None) -> None:
        silence_llama_logs(options.verbose)
        llama_cpp.llama_backend_init()
        self.path = path
        self.options = options
        self._cancel = cancel or threading.Event()
        self.model = load_weights(
            path, options.n_gpu_layers, False, options.devices, options.tensor_split, options.mtp
        )
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        self.recurrent = bool(
            llama_cpp.llama_model_is_recurrent(self.model) or llama_cpp.llama_model_is_hybrid(self.model)
        )
        # The callback object must outlive the context, so it lives on the instance.
        self._abort_cb = llama_cpp.ggml_abort_callback(lambda _data: self._cancel.is_set())
        cparams = llama_cpp.llama_context_default_params()
        train_ctx = llama_cpp.llama_model_n_ctx_train(self.model)
        cparams.n_ctx = context_tokens(options.n_ctx, train_ctx) * options.lanes
        cparams.n_batch = options.n_batch
        cparams.n_ubatch = options.n_batch
        cparams.n_seq_max = options.n_seq_max
        # Sequences that share cells (a draft tree's common prefix) need one unified KV cache.
        cparams.kv_unified = options.n_seq_max > 1
        # A verification pass's rows, for DeviceArgmax (1 by default)
        cparams.n_outputs_max_per_seq = options.n_batch
        cparams.n_threads = options.n_threads
        cparams.n_threads_batch = options.n_threads_batch
        cparams.no_perf = True
        self.flash_attn_type = cparams.flash_attn_type = flash_attn_type(options.flash_attn)
        cparams.abort_callback = self._abort_cb
        self._watching = True
        self.passes = 0  # llama_decode calls so far: what a drafter's call is costed by
        self.busy_s = 0.0  # seconds inside them, to their outputs (a GPU's pass is done when they are)
        self.timer = PassTimer()  # passes up to their logits, for the RPC watchdog
        if self.recurrent:
            cparams.n_rs_seq = options.rollback_snapshots
        self.ctx = llama_cpp.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            llama_cpp.llama_model_free(self.model)
            self.model = None
            what = f"could not create a context of {cparams.n_ctx} tokens for {path}"
            raise OutOfMemory(what) if options.n_gpu_layers else LocalspecError(what)
        self.n_ctx = llama_cpp.llama_n_ctx(self.ctx)
        self.n_batch = llama_cpp.llama_n_batch(self.ctx)  # llama.cpp caps it at n_ctx
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.logits = LogitsReader(self.ctx, self.n_vocab, path.name)
        # A target with MTP heads keeps to logits: its passes' hidden states are read too.
        self.argmax = (
            DeviceArgmax(self.ctx)
            if options.device_argmax and not (options.mtp or options.head_file) and self._output_offloaded()
            else None
        )
        self.hidden: HiddenRows | None = None
        self.head: Head | None = None
        self.cached: list[int] = []
        # None: a recurrent state cannot be cut back to a shared prefix
        self.kept = KeptSequences(self, 0 if self.recurrent else options.slots)
        self._batch = llama_cpp.llama_batch_init(options.n_batch, 0, options.n_seq_max)
        self._pieces, self._ends = {}, {}  # TokenText's: each token's bytes and whether it ends generation
        self.threads = options.n_threads
        self.n_seq_max = options.n_seq_max
        self.head_load_s = 0.0  # of the load, the head's in a file of its own (not the target's)
        if options.mtp or options.head_file:
            started = time.perf_counter()
            try:
                self.hidden, self.head = _attach(self, options.head_file)
            except BaseException:
                self.close()
                raise
            if options.head_file:
                self.head_load_s = time.perf_counter() - started

    def _output_offloaded(self) -> bool:
        # Every layer, the output's too, on a GPU or RPC servers (an RPC build alone offloads nothing).
        gpu, devices = self.options.n_gpu_layers, self.options.devices
        return (gpu < 0 or gpu > llama_cpp.llama_model_n_layer(self.model)) and bool(devices or local_gpus())

    def _want(self, top_only: bool | None) -> None:
        """top_only: rows read for their top tokens only (TopTokens where the device takes them, else
        logits: read with top_of); False: logits; None: nothing read (a prompt), so graphs stay."""
        if top_only is not None and self.argmax is not None:
            self.argmax.use(top_only)

    def _rows(self, rows: int, first: int = 0) -> np.ndarray:
        if self.argmax is not None and self.argmax.on:
            return self.argmax.rows(rows, first)
        return self.logits.rows(rows, first)

    def set_threads(self, n: int) -> None:
        """Run later passes (generation and prompt alike) on n threads, the heads' too."""
        llama_cpp.llama_set_n_threads(self.ctx, n, n)
        self.threads = n
        if self.head is not None:
            self.head.set_threads(n)

    # --- tokens and text (the rest in TokenText) ----------------------------------------------
    def chat_template(self) -> str | None:
        tmpl = llama_cpp.llama_model_chat_template(self.model, None)
        return self.options.chat_template or (tmpl.decode("utf-8") if tmpl else None)

    # --- KV cache ---------------------------------------------------------------------------
    def truncate(self, n: int) -> bool:
        """Keep the first n cached tokens. Returns False when the model could not drop a partial
        sequence (recurrent state without snapshots): the cache is then cleared and `cached` is empty."""
        if n >= len(self.cached):
            return True
        if llama_cpp.llama_memory_seq_rm(self.memory, SEQ, n, -1):
            del self.cached[n:]
            return True
        llama_cpp.llama_memory_clear(self.memory, True)
        self.cached.clear()
        return False

    def decode(
        self, tokens: Sequence[int], all_logits: bool, top_only: bool | None = False, ask: DraftAsk = ALWAYS
    ) -> np.ndarray | None:
        """Append tokens to the cache in one pass (chunked by n_batch for long prompts).

        Returns logits as a (rows, n_vocab) view into llama.cpp's buffer, valid until the next decode:
        one row per token when all_logits, else only the last token's row (see _want for top_only).
        `ask`: what a drafter's pass asks beyond that (backend/draft_ask.py): a model of its own
        runs it as any other."""
        if not tokens:
            return None
        self._want(top_only)
        with self.timer(len(tokens)):
            return self._decode(tokens, all_logits)

    def _decode(self, tokens: Sequence[int], all_logits: bool) -> np.ndarray:
        if len(self.cached) + len(tokens) > self.n_ctx:
            raise LocalspecError(
                f"context is full: {len(self.cached) + len(tokens)} tokens needed, --ctx is {self.n_ctx}"
            )
        step = self.n_batch
        if all_logits and len(tokens) > step:
            raise ValueError("a decode with logits for every token must fit one batch")
        for start in range(0, len(tokens), step):
            chunk = tokens[start : start + step]
            self._decode_chunk(chunk, all_logits, want_last=start + step >= len(tokens))
        if all_logits:
            return self._rows(len(tokens))
        return self._rows(1, first=-1)

    def _decode_chunk(self, chunk: Sequence[int], all_logits: bool, want_last: bool) -> None:
        batch = self._batch
        base = len(self.cached)
        n = fill(batch, chunk, base, all_logits, want_last)
        rc = self._llama_decode(n)
        if rc == -1 and self.argmax is not None and self.argmax.on:
            # Refused before the cache was touched (the sampled outputs' check): given up for good.
            self.argmax.close()
            self.argmax = None
            rc = self._llama_decode(n)
        if rc == 2:
            # An aborted decode may leave part of the batch in the cache: drop it so `cached` stays exact.
            llama_cpp.llama_memory_seq_rm(self.memory, SEQ, base, -1)
            raise DecodeAborted()
        if rc != 0:
            raise LocalspecError(f"llama_decode failed ({rc}) on {self.path.name} at position {base}")
        self.cached.extend(chunk)
        if self.hidden is not None:
            self.hidden.read(self.ctx, base, n)

    def _llama_decode(self, n_tokens: int) -> int:
        # llama.cpp calls the abort callback for every graph node, a Python call each time: about 2%
        # of a short pass. Only long passes (prompts) need to stop mid-way; the generation loop
        # checks for Ctrl-C between its short ones.
        self.passes += 1
        self.watch(n_tokens >= ABORTABLE_BATCH)
        rc, seconds = decode_synced(self.ctx, self._batch)
        self.busy_s += seconds
        return rc

    def watch(self, on: bool) -> None:
        """Whether the next passes watch the cancel event (a Python call for every graph node)."""
        if on != self._watching:
            cb = self._abort_cb if on else ctypes.cast(None, llama_cpp.ggml_abort_callback)
            llama_cpp.llama_set_abort_callback(self.ctx, cb, None)
            self._watching = on

    def prefill(
        self, tokens: Sequence[int], reevaluate_last: bool = False, top_only: bool | None = None
    ) -> int:
        """Make the cache hold exactly `tokens`, evaluating only what is not cached yet; return how
        many were reused. reevaluate_last: evaluate the last token even if cached, for its logits."""
        n = common_prefix(self.cached, tokens)
        if reevaluate_last and n == len(tokens):
            n -= 1
        if not self.truncate(n):
            n = 0
        self.decode(tokens[n:], all_logits=False, top_only=top_only)
        return n

    def resume(self, tokens: Sequence[int]) -> None:
        """A generation over `tokens` starts from the kept sequence sharing most of them (slots.py)."""
        self.kept.switch(tokens)

    def sync(self, tokens: Sequence[int], top_only: bool | None = False) -> np.ndarray:
        """prefill(), then the logits after the last token (see _want for top_only)."""
        self.prefill(tokens, reevaluate_last=True, top_only=top_only)
        return self._rows(1, first=-1)[0]

    def close(self) -> None:
        if getattr(self, "head", None):
            self.head.close()  # type: ignore[union-attr]
            self.head = None
        if getattr(self, "argmax", None):
            self.argmax.close()  # type: ignore[union-attr]
            self.argmax = None
        if getattr(self, "ctx", None):
            llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(self.ctx)
            self.ctx = None
        if getattr(self, "model", None):
            llama_cpp.llama_model_free(self.model)
            self.model = None

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _attach(target: Model, head: HeadFile | None) -> tuple[HiddenRows, Head]:
    """The drafter that reads the target's state: its own MTP heads, or one in a file of its own."""
    if head is None:
        return attach_heads(target)
    attach = {DFLASH: attach_dflash, DSPARK: attach_dflash, ASSISTANT: attach_assistant}.get(
        head.kind, attach_eagle3
    )
    return attach(target, head)
