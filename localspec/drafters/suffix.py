"""Suffix drafting (SuffixDecoding, Oliaro et al. 2024): continue the context the way the longest
earlier occurrence of its tail went on, in this request (its prompt and output so far) or in earlier
outputs (the suffix cache, across requests and processes).

Where the tail occurred more than once, the continuations are counted, and their frequencies are
the draft's confidences: the most frequent path is the chain, and with --draft-branches > 1 a
runner-up more frequent than --draft-p-split opens a branch, verified in the same target pass.
Nodes are taken best first (by the chance that the target accepts them along with their whole
path) for as long as the controller finds each worth its place in the pass. Longer matches predict
better, so the controller learns acceptance per match length (the proposal's kind)."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from localspec.backend.grammar import Grammar
from localspec.drafters.base import Budget, Draft, DraftKey, DraftSettings
from localspec.drafters.suffix_index import TokenIndex
from localspec.drafters.suffix_tree import DEPTH, MATCH_MAX, SuffixTree, Trie
from localspec.sampling.dist import SamplingParams
from localspec.sampling.draws import Coupling

# A datastore holds far more text than a request: its matches of 2-3 tokens are everywhere, and
# what followed them a guess. Drafting them cost unrelated prompts 4% (auto stopped suffix drafting
# altogether after their rejections); from 4 tokens on they draft as this request's matches do.
STORE_MIN_MATCH = 4


class Memory(Protocol):
    """Earlier outputs (suffix_cache.py keeps them on disk), or a datastore of the user's files
    (datastore/store.py), which records nothing."""

    def index(self) -> TokenIndex | None:
        """What is indexed, or None while it is not there yet."""

    def record(self, text: Sequence[int]) -> None: ...


def match_kind(m: int, origin: str = "") -> str:
    """The kind a match of m tokens is learned as: 2, 3, then 4-7, 8-15 and 16 alike; a
    datastore's apart (the user's files continue otherwise than the model's own outputs)."""
    bucket = m if m < 4 else 4 if m < 8 else 8 if m < MATCH_MAX else MATCH_MAX
    return f"{origin or 'suffix'}-{bucket}"


class SuffixDrafter:
    name = "suffix"
    key = DraftKey("suffix", lookup=True)

    def __init__(
        self, memory: Memory | None = None, branches: int = 1, stores: Sequence[Memory] = ()
    ) -> None:
        self.memory = memory
        self.stores = tuple(stores)  # datastores: looked up after the memory, credited as "datastore"
        self.branches = branches  # fixed at load: the target verifies each branch in a sequence of its own
        self.begin((), DraftSettings())

    def begin(self, context: Sequence[int], settings: DraftSettings, coupling: Coupling | None = None) -> int:
        self.settings = settings
        self.tree = SuffixTree()
        self.tree.extend(context)
        self.prompt_len = len(context)
        return 0

    def match(self, context: Sequence[int]) -> tuple[int, Trie, int, str]:
        """(m, trie, node, origin): the longest match of the context's tail, here, in earlier
        outputs or in a datastore (the first of these on a tie), the node its continuations hang
        from, and "datastore" when one gave it; m = 0 when none."""
        self.tree.sync(context)
        m, node = self.tree.match(self.settings.lookup_min)
        best: tuple[int, Trie, int, str] = (m, self.tree.trie, node, "")
        sources = [(self.memory, "")] if self.memory is not None else []
        for memory, origin in sources + [(store, "datastore") for store in self.stores]:
            index = memory.index()
            if index is None or len(context) <= best[0]:
                continue
            shortest = max(self.settings.lookup_min, best[0] + 1, STORE_MIN_MATCH if origin else 0)
            m_far, trie = index.match(context, shortest, DEPTH)
            if trie is not None:
                best = (m_far, trie, 0, origin)
        return best

    def propose(
        self,
        context: Sequence[int],
        budget: Budget,
        params: SamplingParams,
        rng: np.random.Generator,
        grammar: Grammar | None = None,
    ) -> Draft:
        m, trie, node, origin = self.match(context)
        if not m:
            return Draft(key=self.key)
        key = self.key.of_kind(match_kind(m, origin))
        limit = budget.limit(key, calibrated=True)
        draft = Draft(key=key, parents=[], confidences=[], origin=origin)
        # Candidates, surest first: (-path_p, order, trie node, token, parent in the draft, frequency).
        heap: list[tuple[float, int, int, int, int, float]] = []
        order = 0

        def offer(parent_node: int, parent: int, path_p: float) -> None:
            nonlocal order
            for rank, (token, child, freq) in enumerate(trie.children(parent_node)):
                if rank and (self.branches < 2 or freq <= self.settings.p_split):
                    break
                # A runner-up is the target's choice only where the top one is not: taken at its word.
                p = path_p * (freq if rank else budget.acceptance(key, freq))
                heapq.heappush(heap, (-p, order, child, token, parent, freq))
                order += 1

        offer(node, -1, 1.0)
        has_child: set[int] = set()
        leaves = 0
        while heap and len(draft.tokens) < limit:
            neg_p, _, child, token, parent, freq = heapq.heappop(heap)
            opens = parent in has_child  # a second child: one more branch (leaf) in the tree
            if opens and leaves >= self.branches:
                continue
            if not budget.keep(key, -neg_p, len(draft.tokens) + 1):
                break  # every candidate left is less likely still
            leaves += opens or parent == -1
            has_child.add(parent)
            draft.tokens.append(token)
            draft.parents.append(parent)  # type: ignore[union-attr]
            draft.confidences.append(freq)  # type: ignore[union-attr]
            offer(child, len(draft.tokens) - 1, -neg_p)
        if all(p == i - 1 for i, p in enumerate(draft.parents or [])):
            draft.parents = None  # a chain: verified without tree sequences
        return draft

    def end(self, context: Sequence[int]) -> None:
        """A generation ended with `context`: remember its output, after the prompt's last tokens
        (so that the same prompt finds it again)."""
        if self.memory is not None and len(context) > self.prompt_len:
            self.memory.record(context[max(0, self.prompt_len - MATCH_MAX) :])

    def close(self) -> None:
        return None
