"""Greedy passes whose argmax is taken inside llama.cpp's graph, on the device that computed the
logits (llama.cpp's backend sampling): only each row's top token comes back. On a GPU this spares
copying a vocabulary-wide row of logits to the host and scanning it in numpy for every verified
position and drafted token (1 MB a row at 262k ids). On a CPU ggml's argmax is a scalar loop,
slower than numpy's, so it is used only where the output layer is offloaded."""

from __future__ import annotations

import llama_cpp
import numpy as np

from localspec.backend.batch import SEQ


class TopTokens(np.ndarray):
    """Rows of a pass that hold each row's top token (shape (rows, 1)) in place of its logits."""


def top_of(row: np.ndarray) -> int:
    """The top token of one output row: chosen on the device, or the argmax of its logits (the
    lowest id among equal logits)."""
    return int(row[0]) if isinstance(row, TopTokens) else int(row.argmax())


def top_rows(rows: np.ndarray) -> list[int]:
    """The top token of each row, as top_of."""
    return (rows[:, 0] if isinstance(rows, TopTokens) else rows.argmax(axis=1)).tolist()


class DeviceArgmax:
    """A greedy sampler attached to SEQ of one context while `on`, detached otherwise (a change
    makes llama.cpp reserve its graphs again: callers keep to one mode while they can)."""

    def __init__(self, ctx: object) -> None:
        self.ctx = ctx
        self._chain = None  # attached, while on: llama.cpp sets a chain up for the device once
        self._out = np.zeros((0, 1), dtype=np.int32)

    @property
    def on(self) -> bool:
        return self._chain is not None

    def use(self, on: bool) -> bool:
        """Take the argmax on the device from the next pass on (or stop); whether it is taken there."""
        if on and self._chain is None:
            chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_greedy())
            if llama_cpp.llama_set_sampler(self.ctx, SEQ, chain):
                self._chain = chain
            else:
                llama_cpp.llama_sampler_free(chain)
        elif not on and self._chain is not None:
            llama_cpp.llama_set_sampler(self.ctx, SEQ, None)
            llama_cpp.llama_sampler_free(self._chain)
            self._chain = None
        return self.on

    def rows(self, rows: int, first: int) -> TopTokens:
        """The top tokens of `rows` outputs from output `first` on (-1: the last), valid until the
        next pass."""
        if len(self._out) < rows:
            self._out = np.zeros((rows, 1), dtype=np.int32)
        out = self._out[:rows].view(TopTokens)
        for i in range(rows):
            out[i, 0] = llama_cpp.llama_get_sampled_token_ith(self.ctx, first if first < 0 else first + i)
        return out

    def close(self) -> None:
        self.use(False)
