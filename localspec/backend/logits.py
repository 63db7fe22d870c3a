"""Reading a context's logits as numpy rows, without copying them."""

from __future__ import annotations

import ctypes

import llama_cpp
import numpy as np

from localspec.errors import LocalspecError

MAX_VIEWS = 64  # views kept (one per output count and address seen)

# llama_get_logits_ith answering a plain address: the bindings' version makes a pointer object,
# which then needs .contents and addressof, after every pass.
_logits_at = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32)(
    ctypes.cast(llama_cpp.llama_get_logits_ith, ctypes.c_void_p).value
)


class LogitsReader:
    def __init__(self, ctx: object, n_vocab: int, name: str) -> None:
        self.ctx, self.n_vocab, self.name = ctx, n_vocab, name
        # Making a numpy view of a ctypes pointer costs more than a small pass's Python otherwise:
        # views are kept per address and shape (whatever buffer lies there now is what they show).
        self._views: dict[tuple[int, int], np.ndarray] = {}

    def rows(self, rows: int, first: int = 0) -> np.ndarray:
        """Logits as a (rows, n_vocab) view into llama.cpp's buffer, from output `first` on (-1:
        the last), valid until the next decode."""
        at = _logits_at(self.ctx, first)
        if not at:
            raise LocalspecError(f"llama.cpp returned no logits for {self.name}")
        view = self._views.get((at, rows))
        if view is None:
            if len(self._views) > MAX_VIEWS:
                self._views.clear()
            pointer = ctypes.cast(at, ctypes.POINTER(ctypes.c_float))
            view = self._views[(at, rows)] = np.ctypeslib.as_array(pointer, shape=(rows, self.n_vocab))
        if rows > 1 and _logits_at(self.ctx, first + rows - 1) != at + (rows - 1) * view.strides[0]:
            # llama.cpp reordered its outputs: gather the rows (a copy, but correct).
            return np.stack([self.rows(1, first + i)[0] for i in range(rows)])
        return view
