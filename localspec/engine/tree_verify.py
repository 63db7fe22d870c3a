"""Verifying a draft tree (SpecInfer-style) in one target pass.

Row 0 of the pass is the context's last token (the root); row i+1 is drafted node i. Every branch
(root-to-leaf path) is one KV sequence, so a node shared by several branches is evaluated once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from localspec.sampling.dist import SamplingParams, final_dist
from localspec.sampling.draws import Coupling, sample


@dataclass(frozen=True)
class TreeLayout:
    children: list[list[int]]  # row -> drafted nodes below it (row 0: the root)
    depth: list[int]  # node -> depth (1 for the root's children)
    node_seqs: list[list[int]]  # node -> the sequences (branches) it lies on
    n_seqs: int

    @staticmethod
    def build(parents: Sequence[int]) -> TreeLayout:
        n = len(parents)
        children: list[list[int]] = [[] for _ in range(n + 1)]
        depth = [0] * n
        for i, parent in enumerate(parents):
            if not -1 <= parent < i:
                raise ValueError(f"node {i} has parent {parent}: parents must come first")
            children[parent + 1].append(i)
            depth[i] = 1 if parent < 0 else depth[parent] + 1
        # Leaves in depth-first order, first children first: branch 0 is the draft's top path.
        node_seqs: list[list[int]] = [[] for _ in range(n)]
        n_seqs = 0
        stack: list[tuple[int, list[int]]] = [(0, [])]
        while stack:
            row, path = stack.pop()
            kids = children[row]
            if not kids and row:
                for node in path:
                    node_seqs[node].append(n_seqs)
                n_seqs += 1
            for kid in reversed(kids):
                stack.append((kid + 1, [*path, kid]))
        return TreeLayout(children, depth, node_seqs, max(n_seqs, 1))


def verify_tree(
    logits: np.ndarray,
    tokens: Sequence[int],
    layout: TreeLayout,
    params: SamplingParams,
    rng: np.random.Generator,
    coupling: Coupling | None = None,
    position: int = 0,
) -> tuple[list[int], int]:
    """Walk the tree from the root; return (accepted nodes, the target's own next token).

    Greedy: follow the child equal to the target's argmax. Sampling: try the children at a node
    in turn as one-hot proposals: accept child d with probability p(d) (p renormalised after each
    rejection, with the rejected token's mass removed); if all fail, draw from what is left of p.
    Either way the emitted tokens are distributed exactly as the target's own. Coupled (`position`:
    the absolute position of the root's next token): follow the child equal to the target's coupled
    choice, as greedy follows its argmax."""
    path: list[int] = []
    row = 0
    while True:
        kids = layout.children[row]
        if params.greedy or coupling is not None:
            if coupling is None:
                choice = int(np.argmax(logits[row]))
            else:
                depth = layout.depth[row - 1] if row else 0
                choice = coupling.choose(final_dist(logits[row], params), position + depth)
            match = next((k for k in kids if tokens[k] == choice), None)
            if match is None:
                return path, choice
        else:
            p = final_dist(logits[row], params)
            match = None
            for k in kids:
                total = float(p.probs.sum())
                if total > 0 and rng.random() * total < p.at(tokens[k]):
                    match = k
                    break
                p = p.without(tokens[k])
            if match is None:
                return path, sample(p, rng)
        path.append(match)
        row = match + 1
