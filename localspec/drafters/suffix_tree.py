"""Token tries with occurrence counts: what suffix drafting looks continuations up in.

`SuffixTree` holds every suffix of one growing text, each cut to `depth` tokens, so any stretch of
up to `depth` tokens that occurred is a path from the root, and a node's children count how often
each token followed it. A new token extends the `depth` suffixes that end at the text's end: O(depth)
work per token and no rescans. The node of the text's last m tokens is at hand after every token,
so matching the context costs nothing more."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

DEPTH = 32  # matches up to MATCH_MAX tokens leave at least DEPTH - MATCH_MAX tokens of continuation
MATCH_MAX = 16


class Trie:
    """Token paths from node 0 (the root); count[node]: how many inserted paths pass through it."""

    def __init__(self) -> None:
        self.kids: list[dict[int, int] | None] = [None]
        self.count: list[int] = [0]

    def __len__(self) -> int:
        return len(self.count)

    def step(self, node: int, token: int) -> int:
        """The child of `node` for `token` (created if new), counted once more."""
        kids = self.kids[node]
        if kids is None:
            kids = self.kids[node] = {}
        child = kids.get(token)
        if child is None:
            child = kids[token] = len(self.count)
            self.kids.append(None)
            self.count.append(0)
        self.count[child] += 1
        return child

    def add_path(self, tokens: Iterable[int], times: int = 1) -> None:
        node = 0
        for t in tokens:
            node = self.step(node, t)
            self.count[node] += times - 1

    def children(self, node: int) -> list[tuple[int, int, float]]:
        """(token, child, frequency) of what followed `node`, most frequent first; the frequency is
        the share of the node's continuations that went on with that token, counting one more
        that went elsewhere: what followed once is a guess, what followed every time of ten is not."""
        kids = self.kids[node]
        if not kids:
            return []
        total = sum(self.count[c] for c in kids.values()) + 1
        out = [(t, c, self.count[c] / total) for t, c in kids.items()]
        out.sort(key=lambda x: -x[2])
        return out


class SuffixTree:
    """The depth-limited suffix tree of one text (a prompt and what follows it)."""

    def __init__(self, depth: int = DEPTH) -> None:
        self.depth = depth
        self.trie = Trie()
        self.tokens: list[int] = []
        self._ends = [0]  # _ends[m]: the node of the text's last m tokens, m < depth

    def extend(self, tokens: Sequence[int]) -> None:
        trie = self.trie
        for t in tokens:
            ends = [0]
            for node in self._ends:
                ends.append(trie.step(node, t))
            if len(ends) > self.depth:
                ends.pop()  # a suffix `depth` long grows no further
            self._ends = ends
            self.tokens.append(t)

    def sync(self, context: Sequence[int]) -> None:
        """Index what `context` added since the last call; start over if it is another text."""
        known = len(self.tokens)
        if len(context) < known or (known and context[known - 1] != self.tokens[-1]):
            self.__init__(self.depth)  # type: ignore[misc]
            known = 0
        self.extend(context[known:])

    def match(self, min_len: int) -> tuple[int, int]:
        """(m, node): the longest m (min_len <= m <= MATCH_MAX) such that the text's last m tokens
        occurred before with a continuation, and their node; (0, 0) when none. A shorter tail
        occurs wherever a longer one does, so the first hit from the longest down is the answer."""
        for m in range(min(MATCH_MAX, len(self._ends) - 1), min_len - 1, -1):
            node = self._ends[m]
            if self.trie.kids[node]:
                return m, node
        return 0, 0
