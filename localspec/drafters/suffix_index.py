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

import numpy as np

from localspec.drafters.suffix_tree import MATCH_MAX, Trie

ANCHORS = (2, 4, 8, 16)
CANDIDATES = 32  # most recent occurrences of an anchor that are measured and counted
_P = np.uint64(0x9E3779B97F4A7C15)
SEPARATOR = -1


def _hashes(tokens: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
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


class SuffixIndex:
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
        self.tokens = np.concatenate(parts) if parts else np.zeros(0, np.int32)
        self.keys: dict[int, np.ndarray] = {}
        self.pos: dict[int, np.ndarray] = {}
        for n in ANCHORS:
            h, p = _hashes(self.tokens, n)
            order = np.argsort(h, kind="stable")  # equal hashes stay oldest first
            self.keys[n], self.pos[n] = h[order], p[order]

    def add(self, text: Sequence[int]) -> None:
        """Index one more text (evicting the oldest past the size)."""
        text = np.asarray(text, np.int32)
        if not len(text):
            return
        self.texts.append(text)
        if self.n_tokens > self.size:
            self.texts = newest_within(self.texts, self.size)
            self._rebuild()
            return
        offset = len(self.tokens)
        ended = np.append(text, SEPARATOR).astype(np.int32)
        self.tokens = np.concatenate([self.tokens, ended])
        for n in ANCHORS:
            h, p = _hashes(ended, n)
            order = np.argsort(h, kind="stable")
            h, p = h[order], p[order] + offset
            at = np.searchsorted(self.keys[n], h, side="right")  # after equal, older ones
            self.keys[n] = np.insert(self.keys[n], at, h)
            self.pos[n] = np.insert(self.pos[n], at, p)

    def match(self, context: Sequence[int], min_len: int, depth: int) -> tuple[int, Trie | None]:
        """(m, trie): the longest m >= min_len such that the context's last m tokens occurred in an
        earlier text, and the counted continuations (up to `depth` tokens) of the most recent of
        those occurrences; (0, None) when none."""
        tail = np.asarray(context[-MATCH_MAX:], np.int32)
        tokens = self.tokens
        for n in reversed(ANCHORS):
            if n > len(tail) or self.keys[n].size == 0:
                continue
            h, _ = _hashes(np.append(tail[-n:], 0).astype(np.int32), n)
            lo, hi = np.searchsorted(self.keys[n], h[0], "left"), np.searchsorted(self.keys[n], h[0], "right")
            if lo == hi:
                continue
            starts = self.pos[n][lo:hi][-CANDIDATES:]
            lengths = np.zeros(len(starts), np.int64)
            alive = np.ones(len(starts), bool)
            for j in range(1, len(tail) + 1):
                at = starts - j
                alive &= at >= 0
                alive[alive] = tokens[at[alive]] == tail[-j]
                if not alive.any():
                    break
                lengths[alive] = j
            m = int(lengths.max())
            if m < max(n, min_len):
                continue  # a hash collision, not a match
            trie = Trie()
            for s in starts[lengths == m]:
                run = tokens[s : s + depth]
                end = np.flatnonzero(run < 0)
                trie.add_path((run[: end[0]] if end.size else run).tolist())
            return m, trie
        return 0, None
