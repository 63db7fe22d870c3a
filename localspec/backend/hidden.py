"""A target's last hidden states by position (llama.cpp's `embeddings_nextn` rows), kept from its
passes until its MTP heads (backend/mtp.py) have taken them in."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from llama_cpp import llama_cpp_ext


class HiddenRows:
    def __init__(self, n_embd: int) -> None:
        self.n_embd = n_embd
        # Seconds spent reading the target's passes' rows (and whatever a drafter does with them
        # there): a drafter's work inside the target's passes, not the target's own.
        self.read_s = 0.0
        # One copied block per pass, in order of position, none overlapping: a step appends one
        # without copying what is kept (the head may sit out many steps).
        self.blocks: list[tuple[int, np.ndarray]] = []

    @property
    def first(self) -> int:
        """The first position kept."""
        return self.blocks[0][0] if self.blocks else 0

    @property
    def end(self) -> int:
        return self.blocks[-1][0] + len(self.blocks[-1][1]) if self.blocks else 0

    def read(self, ctx: Any, start: int, n: int) -> None:
        """The rows of the pass `ctx` just ran over n tokens from position `start`."""
        started = time.perf_counter()
        self._keep(start, self._rows(ctx, n))
        self.read_s += time.perf_counter() - started

    def _keep(self, start: int, rows: np.ndarray) -> None:
        self.put(start, rows)

    def pick(self, ctx: Any, start: int, rows: Sequence[int]) -> None:
        """Some `rows` of the tree pass `ctx` just ran (an accepted path, in order), kept as
        positions start.. on."""
        self.put(start, self._rows(ctx, max(rows) + 1)[list(rows)])

    def _rows(self, ctx: Any, n: int) -> np.ndarray:
        """A view of the first n rows of the last pass: put() copies what it keeps."""
        return np.ctypeslib.as_array(llama_cpp_ext.llama_get_embeddings_nextn(ctx), shape=(n, self.n_embd))

    def put(self, start: int, rows: np.ndarray) -> None:
        """A pass's rows from position `start` on: what was kept from there on is stale."""
        if start > self.end:
            self.blocks.clear()  # a gap: nothing kept is next to them
        self.cut(start)
        self.blocks.append((start, rows.copy()))

    def cut(self, start: int) -> None:
        """Rows from `start` on are unknown (rejected, or a tree pass wrote several sequences there)."""
        while self.blocks and self.blocks[-1][0] >= start:
            self.blocks.pop()
        if self.blocks and self.end > start:
            at, rows = self.blocks[-1]
            self.blocks[-1] = (at, rows[: start - at])

    def take(self, start: int, stop: int) -> np.ndarray:
        """Rows start..stop-1, zeros where unknown (before the first position, or not kept)."""
        out = np.zeros((stop - start, self.n_embd), dtype=np.float32)
        for at, rows in self.blocks:
            lo, hi = max(start, at), min(stop, at + len(rows))
            if lo < hi:
                out[lo - start : hi - start] = rows[lo - at : hi - at]
        return out

    def release(self, keep: int) -> None:
        """Rows before `keep` are dropped: no head will take them in again."""
        while self.blocks and self.blocks[0][0] + len(self.blocks[0][1]) <= keep:
            self.blocks.pop(0)
        if self.blocks and self.blocks[0][0] < keep:
            at, rows = self.blocks[0]
            self.blocks[0] = (keep, rows[keep - at :])
