"""Reading a context's logits as numpy rows, without copying them."""

from __future__ import annotations

import ctypes

import llama_cpp
import numpy as np

from localspec.errors import LocalspecError

MAX_VIEWS = 64  # views kept (one per output count and address seen)


class LogitsReader:
    def __init__(self, ctx: object, n_vocab: int, name: str) -> None:
        self.ctx, self.n_vocab, self.name = ctx, n_vocab, name
        # Making a numpy view of a ctypes pointer costs more than a small pass's Python otherwise:
        # views are kept per address and shape (whatever buffer lies there now is what they show).
        self._views: dict[tuple[int, int], np.ndarray] = {}

    def rows(self, rows: int, first: int = 0) -> np.ndarray:
        """Logits as a (rows, n_vocab) view into llama.cpp's buffer, from output `first` on (-1:
        the last), valid until the next decode."""
        ptr = llama_cpp.llama_get_logits_ith(self.ctx, first)
        if not ptr:
            raise LocalspecError(f"llama.cpp returned no logits for {self.name}")
        key = (ctypes.addressof(ptr.contents), rows)
        view = self._views.get(key)
        if view is None:
            if len(self._views) > MAX_VIEWS:
                self._views.clear()
            view = self._views[key] = np.ctypeslib.as_array(ptr, shape=(rows, self.n_vocab))
        if rows > 1:
            last = llama_cpp.llama_get_logits_ith(self.ctx, first + rows - 1)
            if ctypes.addressof(last.contents) != view[-1].ctypes.data:
                # llama.cpp reordered its outputs: gather the rows (a copy, but correct).
                return np.stack([self.rows(1, first + i)[0] for i in range(rows)])
        return view
