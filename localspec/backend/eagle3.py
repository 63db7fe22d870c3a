"""An EAGLE-3 head: a one-layer drafter trained for one target, in a file of its own, that reads the
target's state instead of the prompt's text alone.

Every target pass hands out the inputs of three of its layers (low, middle, high) for each token;
the head's encoder (its `fc` layer, a llama.cpp encoder pass) joins and projects them to one row
g[p] per position. The head's decoder takes a token with the row of the position before it: the
entry for the token at p is (token[p], g[p - 1]), and its output predicts the token at p + 1. That
is the pairing of the target's MTP heads (backend/mtp.py), whose drafting, rollback and trees this
head shares: while drafting, a drafted token is paired with the head's own output (its pre-norm
state) in place of g, and once the target has verified the tokens they are evaluated again with the
target's rows.

llama.cpp's own driver (common/speculative.cpp) keeps the entry for the token at p at position
p - 1 and has none for the first token; here it sits at p, and the first token (which has no row
before it) is left out of the cache. Rotary positions are relative, so every query meets every key
at the distance llama.cpp's does (a test checks the logits against its way).

The head borrows the target's token embeddings and output projection where it has none of its own
(through the context's `ctx_other`), so its context lives on the target's."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np
from llama_cpp import llama_cpp_ext

from localspec.backend.batch import SEQ
from localspec.backend.head_cache import HeadCache, Target, head_context
from localspec.backend.layer_inputs import LayerInputs, hand_out_layer_inputs
from localspec.backend.logits import LogitsReader
from localspec.backend.model_options import HeadFile
from localspec.backend.mtp import MtpHead
from localspec.backend.weights import load_weights
from localspec.errors import LocalspecError


class TargetFeatures(LayerInputs):
    """The rows an EAGLE-3 head reads, by position: each of the target's passes' tokens' inputs to
    `layers`, joined and projected by the head's encoder (`encode`, set once the head exists)."""

    def __init__(self, layers: Sequence[int], n_embd_target: int, n_embd: int) -> None:
        super().__init__(layers, n_embd_target)
        self.n_embd = n_embd  # the rows kept are the encoder's, not the joined inputs
        self.encode: Callable[[np.ndarray], np.ndarray] | None = None

    def _rows(self, ctx: Any, n: int) -> np.ndarray:
        assert self.encode is not None
        return self.encode(super()._rows(ctx, n))


class Eagle3Head(MtpHead):
    kind = "eagle3"

    def __init__(self, target: Target, path: Path, weights: Any, features: TargetFeatures) -> None:
        self.head_path, self.weights = path, weights
        self._encoder = None
        try:
            super().__init__(target, features)
        except BaseException:
            self.close()  # the weights too
            raise
        width = len(features.layers) * features.n_embd_target
        self._encoder = llama_cpp.llama_batch_init(self.n_batch, width, 1)
        self._encoder_rows = np.ctypeslib.as_array(self._encoder.embd, shape=(self.n_batch, width))
        features.encode = self._encode

    def _head_count(self) -> int:
        return 1

    def _make_cache(self, offset: int, n_seq_max: int) -> HeadCache:
        ctx = head_context(self.target, self.weights, n_seq_max, llama_cpp.LLAMA_CONTEXT_TYPE_DEFAULT)
        if not ctx:
            raise LocalspecError(f"could not create a context for the EAGLE-3 head {self.head_path.name}")
        llama_cpp_ext.llama_set_embeddings_nextn(ctx, True, True)  # its pre-norm state, output rows only
        return HeadCache(
            ctx, llama_cpp.llama_get_memory(ctx), LogitsReader(ctx, self.n_vocab, self.head_path.name)
        )

    def _encode(self, joined: np.ndarray) -> np.ndarray:
        """g rows for the joined layer inputs `joined` (one encoder pass per batch of them)."""
        out = np.empty((len(joined), self.n_embd), dtype=np.float32)
        first = llama_cpp.llama_memory_seq_pos_max(self.memory, SEQ) + 1  # unused by the encoder
        for start in range(0, len(joined), self.n_batch):
            n = min(self.n_batch, len(joined) - start)
            self._encoder_rows[:n] = joined[start : start + n]
            for i in range(n):
                self._encoder.pos[i], self._encoder.n_seq_id[i] = first + i, 1
                self._encoder.seq_id[i][0], self._encoder.logits[i] = SEQ, True
            self._encoder.n_tokens = n
            if (rc := llama_cpp.llama_encode(self.ctx, self._encoder)) != 0:
                raise LocalspecError(f"llama_encode failed ({rc}) in the EAGLE-3 head {self.head_path.name}")
            out[start : start + n] = np.ctypeslib.as_array(
                llama_cpp_ext.llama_get_embeddings_nextn(self.ctx), shape=(n, self.n_embd)
            )
        return out

    def _catch_up(
        self,
        cache: HeadCache,
        context: Sequence[int],
        drafted: Sequence[int] = (),
        outputs: Sequence[np.ndarray] = (),
    ) -> np.ndarray:
        """As the MTP heads', but the first token is held without an entry (no row precedes it)."""
        if cache.cached and (not context or cache.cached[0] != context[0]):
            llama_cpp.llama_memory_seq_rm(cache.memory, SEQ, 0, -1)
            cache.cached.clear()
            cache.exact = 0
        if not cache.cached and len(context) > 1:
            cache.cached.append(context[0])
            cache.exact = 1
        return super()._catch_up(cache, context, drafted, outputs)

    def _decode(self, cache: HeadCache, tokens: Sequence[int], rows: np.ndarray) -> np.ndarray:
        """As the MTP heads', in two passes: llama.cpp's EAGLE-3 graph computes every row's logits
        and state, and where a pass asks for fewer it hands out those of its first rows, so the
        tokens before the last are decoded without outputs and the last on its own (as llama.cpp's
        driver decodes a verified batch, then drafts from one token)."""
        if len(tokens) > 1:
            self._pass(cache, tokens[:-1], rows[:-1], output=False)
        self._pass(cache, tokens[-1:], rows[-1:], output=True)
        return self._output(cache.ctx, 0)

    def close(self) -> None:
        if getattr(self, "_encoder", None) is not None:
            llama_cpp.llama_batch_free(self._encoder)
            self._encoder = None
        super().close()
        if getattr(self, "weights", None) is not None:
            llama_cpp.llama_model_free(self.weights)
            self.weights = None


def attach_eagle3(target: Target, head: HeadFile) -> tuple[TargetFeatures, Eagle3Head]:
    """Load the head of `head` over the loaded target, and make the target's passes hand out the
    inputs of the layers it reads."""
    path, layers = head.path, head.layers
    weights = load_weights(path, head.n_gpu_layers, False)
    n_embd = llama_cpp.llama_model_n_embd(weights)
    features = TargetFeatures(layers, llama_cpp.llama_model_n_embd(target.model), n_embd)
    hand_out_layer_inputs(target.ctx, layers)
    return features, Eagle3Head(target, path, weights, features)
