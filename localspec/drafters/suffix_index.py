"""The cross-request half of suffix drafting: earlier outputs, bounded in tokens, oldest evicted.

A suffix tree over a million tokens would cost gigabytes as Python objects, so this index keeps
the texts in one int32 array (texts separated by -1) and, for a few anchor lengths, the sorted
hashes of every n-gram with the position that followed it. A lookup hashes the context's last n
tokens for the longest anchor that occurred, measures how far each of its most recent occurrences
really matches (up to MATCH_MAX tokens back, which also rules out hash collisions), and counts the
continuations of those that match longest into a small Trie: the same answer a suffix tree's node
for the longest match would give, at O(log n) per step and ~70 bytes per cached token."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from localspec.drafters.suffix_tree import MATCH_MAX, Trie

ANCHORS = (2, 4, 8, 16)
CANDIDATES = 32  # most recent occurrences of an anchor that are measured and counted
_PRIME, _MASK = 0x9E3779B97F4A7C15, (1 << 64) - 1
_P = np.uint64(_PRIME)
SEPARATOR = -1
# A full memory evicts down to this share of its size, so that the next rebuild is a quarter of the
# size of outputs away (a full rebuild of 262k tokens sorts a million n-grams).
KEPT_AFTER_EVICTION = 0.75


def ngram_hashes(tokens: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(hash, position) of every n-gram of `tokens` that lies within one text and is followed by a
    token of it; the position is that following token's."""
    size = len(tokens)
    if size <= n:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    h = np.zeros(size - n, np.uint64)
    valid = tokens[n:] >= 0
    for j in range(n):
        window = tokens[j : size - n + j]
        valid &= window >= 0
        h = h * _P + window.astype(np.uint64)
    return h[valid], np.arange(n, size)[valid]


def tail_hash(tokens: Sequence[int]) -> int:
    """ngram_hashes' hash of these tokens, in Python ints: a few microseconds for a context's tail,
    where a numpy pass per token costs tens."""
    h = 0
    for t in tokens:
        h = (h * _PRIME + t) & _MASK
    return h


def sorted_keys(
    tokens: np.ndarray, n: int, key_type: type = np.uint64, pos_type: type = np.int64
) -> tuple[np.ndarray, np.ndarray]:
    """The n-gram hashes of `tokens` as `key_type` (a narrower type keeps the low bits: a collision
    costs a measured non-match, never a wrong draft), sorted, with their positions; equal hashes
    stay in text order (oldest first)."""
    h, p = ngram_hashes(tokens, n)
    h = h.astype(key_type, copy=False)
    order = np.argsort(h, kind="stable")
    return h[order], p[order].astype(pos_type, copy=False)


def newest_within(texts: Sequence[np.ndarray], size: int) -> list[np.ndarray]:
    """The newest of `texts` (oldest first) that fit in `size` tokens together; the newest alone is
    cut to its last `size` tokens if it does not fit."""
    kept: list[np.ndarray] = []
    total = 0
    for t in reversed(texts):
        if total + len(t) > size:
            if not kept:
                kept.append(t[-size:])
            break
        kept.append(t)
        total += len(t)
    return kept[::-1]


@dataclass(frozen=True)
class Arrays:
    """What a lookup searches, replaced whole when texts are added: a lookup on one thread (a
    `serve --parallel` lane drafting) reads one consistent set while another adds a text."""

    tokens: np.ndarray
    keys: dict[int, np.ndarray]
    pos: dict[int, np.ndarray]


class TokenIndex:
    """Texts in one token array (separated by SEPARATOR) and, per anchor length, the sorted hashes
    of their n-grams with the positions that followed: what a lookup searches. The arrays may be
    memory-mapped from disk (drafters/datastore.py)."""

    def __init__(self, tokens: np.ndarray, keys: dict[int, np.ndarray], pos: dict[int, np.ndarray]) -> None:
        self.arrays = Arrays(tokens, keys, pos)

    @property
    def tokens(self) -> np.ndarray:
        return self.arrays.tokens

    @property
    def keys(self) -> dict[int, np.ndarray]:
        return self.arrays.keys

    @property
    def pos(self) -> dict[int, np.ndarray]:
        return self.arrays.pos

    @staticmethod
    def of(tokens: np.ndarray, key_type: type = np.uint64, pos_type: type = np.int64) -> TokenIndex:
        keys, pos = {}, {}
        for n in ANCHORS:
            keys[n], pos[n] = sorted_keys(tokens, n, key_type, pos_type)
        return TokenIndex(tokens, keys, pos)

    def match(self, context: Sequence[int], min_len: int, depth: int) -> tuple[int, Trie | None]:
        """(m, trie): the longest m >= min_len such that the context's last m tokens occurred in an
        indexed text, and the counted continuations (up to `depth` tokens) of the most recent of
        those occurrences; (0, None) when none. Vectorised over the occurrences: a lookup in a
        datastore of a million tokens stays well under a millisecond."""
        tail = np.asarray(context[-MATCH_MAX:], np.int64)
        back = tail[::-1]
        arrays = self.arrays  # once: an add on another thread replaces them whole
        tokens = arrays.tokens
        for n in reversed(ANCHORS):
            keys = arrays.keys[n]
            if n > len(tail) or keys.size == 0:
                continue
            h = keys.dtype.type(tail_hash(tail[-n:].tolist()) & int(np.iinfo(keys.dtype).max))
            lo, hi = np.searchsorted(keys, h, "left"), np.searchsorted(keys, h, "right")
            if lo == hi:
                if n <= min_len:
                    break  # no n-gram occurred, so no longer match did, and shorter ones are too short
                continue
            starts = np.asarray(arrays.pos[n][max(lo, hi - CANDIDATES) : hi], np.int64)
            at = starts[:, None] - np.arange(1, len(tail) + 1)
            same = (at >= 0) & (tokens[np.maximum(at, 0)] == back)
            lengths = np.where(same.all(1), len(tail), same.argmin(1))
            m = int(lengths.max())
            if m < max(n, min_len):
                continue  # a hash collision, not a match
            return m, continuations(tokens, starts[lengths == m], depth)
        return 0, None


def continuations(tokens: np.ndarray, starts: np.ndarray, depth: int) -> Trie:
    """What followed each of `starts` in `tokens`, up to `depth` tokens or its text's end, counted;
    equal runs added once with their count, in the order they first occur (a dict keeps it)."""
    last = len(tokens) - 1  # always a SEPARATOR: a run cut there ends
    runs = tokens[np.minimum(starts[:, None] + np.arange(depth), last)].tolist()
    counted: dict[tuple[int, ...], int] = {}
    for run in map(tuple, runs):
        counted[run] = counted.get(run, 0) + 1
    trie = Trie()
    for run, times in counted.items():
        trie.add_path(run[: run.index(SEPARATOR)] if SEPARATOR in run else run, times)
    return trie


class SuffixIndex(TokenIndex):
    """Also a drafter's memory (drafters/suffix.py) that is always loaded: bench and the tests
    hand one to SuffixDrafter as it is."""

    def __init__(self, texts: Sequence[Sequence[int]] = (), size: int = 1 << 18) -> None:
        self.size = size  # the most tokens kept
        self.texts = newest_within([np.asarray(t, np.int32) for t in texts if len(t)], size)
        self._rebuild()

    @property
    def n_tokens(self) -> int:
        return sum(len(t) for t in self.texts)

    def index(self) -> SuffixIndex:
        return self

    def record(self, text: Sequence[int]) -> None:
        self.add(text)

    def _rebuild(self) -> None:
        parts = [p for t in self.texts for p in (t, np.array([SEPARATOR], np.int32))]
        self.arrays = TokenIndex.of(np.concatenate(parts) if parts else np.zeros(0, np.int32)).arrays

    def add(self, text: Sequence[int]) -> None:
        """Index one more text. Past the size the oldest go, down to KEPT_AFTER_EVICTION of it: the
        index is then rebuilt whole (sorting every n-gram), once per quarter of the size added
        rather than at every text once the memory is full."""
        text = np.asarray(text, np.int32)
        if not len(text):
            return
        self.texts.append(text)
        if self.n_tokens > self.size:
            # The new text stays whole if it fits the size alone.
            keep = max(int(self.size * KEPT_AFTER_EVICTION), min(len(text), self.size))
            self.texts = newest_within(self.texts, keep)
            self._rebuild()
            return
        old = self.arrays
        ended = np.append(text, SEPARATOR).astype(np.int32)
        keys, pos = {}, {}
        for n in ANCHORS:
            h, p = sorted_keys(ended, n)
            at = np.searchsorted(old.keys[n], h, side="right")  # after equal, older ones
            keys[n] = np.insert(old.keys[n], at, h)
            pos[n] = np.insert(old.pos[n], at, p + len(old.tokens))
        self.arrays = Arrays(np.concatenate([old.tokens, ended]), keys, pos)
