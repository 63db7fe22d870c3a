"""Token sequences a model keeps after their generation: a server's conversations.

Only the sequence being generated lives in the KV cache (sequence 0, which the engine and the
drafters drive). The others are kept as llama.cpp state in host memory and restored when a request
continues one: kept in the cache itself, their cells would widen every later attention pass (the
range llama.cpp attends over is that of all cells in use), which measurably slowed generation.
Clients interleave conversations (a chat UI asks for a title or tags between turns), so a
generation starts from the kept sequence sharing the longest prefix with its prompt and is kept in
the slot it continues, or else in the least recently used one."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import llama_cpp

ACTIVE = 0  # the sequence being generated


@dataclass
class _Slot:
    tokens: list[int] = field(default_factory=list)
    state: Any = None  # llama.cpp's bytes for those tokens (a ctypes array)
    used: int = -1  # when it last served a generation (-1: never)


class _Cache(Protocol):
    """What of a model (backend/model.py) the kept sequences use."""

    ctx: Any
    cached: list[int]

    def drop_seq(self, seq: int, p0: int = -1, p1: int = -1) -> None: ...


class KeptSequences:
    def __init__(self, model: _Cache, count: int) -> None:
        self.model = model
        self.slots = [_Slot() for _ in range(count)]
        self._home: _Slot | None = None  # where the sequence being generated will be kept

    def switch(self, tokens: Sequence[int]) -> None:
        """Before the cache is made to hold `tokens`: keep what it holds now (unless `tokens`
        continue it), and start from the kept sequence sharing the longest prefix with them."""
        model = self.model
        if not self.slots:
            return
        have = common_prefix(model.cached, tokens)
        if model.cached and have < len(model.cached):
            self._keep()
        n, _, best = max(
            ((common_prefix(s.tokens, tokens), s.used, s) for s in self.slots), key=lambda t: t[:2]
        )
        if n > have:
            self._restore(best)
        # A short request between two turns shares little more than the system prompt with the
        # conversation: it must not take the conversation's slot.
        others = [s for s in self.slots if s is not best]
        home = (
            best if (n > 0 and 2 * n >= len(best.tokens)) or not others else min(others, key=lambda s: s.used)
        )
        self._home = home
        home.used = max(s.used for s in self.slots) + 1

    def _keep(self) -> None:
        model = self.model
        home = self._home or min(self.slots, key=lambda s: s.used)
        size = llama_cpp.llama_state_seq_get_size(model.ctx, ACTIVE)
        state = (ctypes.c_uint8 * size)()
        if llama_cpp.llama_state_seq_get_data(model.ctx, state, size, ACTIVE) != size:
            home.tokens, home.state = [], None  # not kept: a later request evaluates it again
            return
        home.tokens, home.state = list(model.cached), state

    def _restore(self, slot: _Slot) -> None:
        model = self.model
        model.drop_seq(ACTIVE)
        model.cached = []
        if llama_cpp.llama_state_seq_set_data(model.ctx, slot.state, len(slot.state), ACTIVE) == 0:
            model.drop_seq(ACTIVE)  # whatever part of it got in
            slot.tokens, slot.state = [], None
            return
        model.cached = list(slot.tokens)


PREFIX_BLOCK = 32


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens a and b share. Asked every step of a context thousands of tokens
    long, which mostly parts from the cache in its last few tokens if at all: compared in C, the
    whole, then all but the last block, then block by block; token by token only where they part."""
    n = min(len(a), len(b))
    a, b = (x if isinstance(x, list) else list(x) for x in (a, b))  # a list never equals a tuple
    if a[:n] == b[:n]:
        return n
    tail = max(n - PREFIX_BLOCK, 0)
    starts = [tail] if a[:tail] == b[:tail] else range(0, tail, PREFIX_BLOCK)
    for start in starts:
        end = min(start + PREFIX_BLOCK, n)
        if a[start:end] != b[start:end]:
            return next(i for i in range(start, end) if a[i] != b[i])
    raise AssertionError("unreachable: the heads differ")
