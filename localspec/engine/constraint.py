"""A step under the rules that depend on the text before a position, penalties and a grammar: the
target's rows of a verifying pass shaped along the draft (a lookup draft is cut where the grammar
stops it by Grammar.allowed_prefix).

Row 0 of a pass is the prediction after the context, row i + 1 the prediction after draft node i:
so row i + 1 is penalised for the context and the path to node i, and judged where the grammar
stands after that path (a copy of the grammar advanced by it). A node whose
token its own row rules out is rejected before the row after it is read, so that row and its
subtree's are left as they are (and the token is never given to the grammar, which would abort);
in greedy decoding so is every node that is not its parent row's argmax."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from localspec.backend.grammar import Grammar
from localspec.sampling.constrain import constrained
from localspec.sampling.dist import SamplingParams


def penalise_rows(
    logits: np.ndarray,
    context: Sequence[int],
    tokens: Sequence[int],
    parents: Sequence[int] | None,
    params: SamplingParams,
) -> None:
    """Penalise `logits` (rows: the context's last token, then each draft node) in place."""
    penalties = params.penalties
    if penalties.off:
        return
    parents = parents if parents is not None else range(-1, len(tokens) - 1)
    history = list(context[-penalties.last_n :])
    paths: dict[int, list[int]] = {-1: []}
    penalties.apply(logits[0], history)
    for i, (token, parent) in enumerate(zip(tokens, parents, strict=False)):
        paths[i] = [*paths[parent], token]
        penalties.apply(logits[i + 1], [*history, *paths[i]])


def constrain_rows(
    logits: np.ndarray,
    tokens: Sequence[int],
    parents: Sequence[int] | None,
    grammar: Grammar,
    params: SamplingParams,
    whole: bool,
) -> None:
    """Constrain `logits` (rows: the context's last token, then each draft node) in place."""
    parents = parents if parents is not None else range(-1, len(tokens) - 1)
    logits[0] = constrained(logits[0], params, grammar.allowed, whole)
    states: dict[int, Grammar] = {-1: grammar}
    try:
        for i, (token, parent) in enumerate(zip(tokens, parents, strict=False)):
            state = states.get(parent)
            if state is None or not _reachable(logits[parent + 1], token, params):
                continue
            states[i] = state = state.clone()
            state.accept(token)
            logits[i + 1] = constrained(logits[i + 1], params, state.allowed, whole)
    finally:
        for i, state in states.items():
            if i >= 0:
                state.close()


def _reachable(row: np.ndarray, token: int, params: SamplingParams) -> bool:
    """Whether a draft token can be accepted on its (constrained) row: only as the argmax in greedy
    decoding, whose rows past the first mismatch are never read; with any probability otherwise."""
    return int(np.argmax(row)) == token if params.greedy else bool(np.isfinite(row[token]))
