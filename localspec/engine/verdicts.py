"""What the target says of a draft: the accepted prefix of a chain (from its logits at every
position of one pass), and which drafted tokens it judged, for the controller to calibrate on."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from localspec.backend.top_tokens import top_rows
from localspec.drafters.base import Draft
from localspec.sampling.dist import SamplingParams, final_dist
from localspec.sampling.draws import Coupling, accept_draft_token, sample


def verify(
    logits: np.ndarray,
    draft: Draft,
    params: SamplingParams,
    rng: np.random.Generator,
    coupling: Coupling | None = None,
    position: int = 0,
) -> tuple[int, int]:
    """Return (number of draft tokens accepted, the target's own next token).

    logits[i] is the target's prediction after the batch's i-th token, i.e. for d_{i+1}, the token
    at absolute `position` + i."""
    k = len(draft.tokens)
    if coupling is not None and not params.greedy:
        for i in range(k + 1):
            token = coupling.choose(final_dist(logits[i], params), position + i)
            if i == k or token != draft.tokens[i]:
                return i, token
    if params.greedy:
        # Every row's top in one call: most drafts are mostly accepted, and one pass over the rows
        # costs less than a call per row.
        tops = top_rows(logits[: k + 1])
        for i in range(k):
            if tops[i] != draft.tokens[i]:
                return i, tops[i]
        return k, tops[k]
    for i, d in enumerate(draft.tokens):
        q = draft.probs[i] if draft.probs is not None else None
        accepted, token = accept_draft_token(final_dist(logits[i], params), q, d, rng)
        if not accepted:
            return i, token
    return k, sample(final_dist(logits[k], params), rng)


def judged(draft: Draft, path: Sequence[int]) -> list[tuple[float, bool]]:
    """(confidence, accepted) for every top drafted token the target judged: those whose parent
    was accepted (in a chain, the accepted prefix and the first rejected token). In a tree only a
    parent's first child is its top candidate; side candidates calibrate nothing."""
    if draft.confidences is None:
        return []
    on_path = {-1, *path}
    parents = draft.parents if draft.parents is not None else range(-1, len(draft.tokens) - 1)
    out, seen = [], set()
    for i, (c, parent) in enumerate(zip(draft.confidences, parents, strict=False)):
        if parent in on_path and parent not in seen:
            seen.add(parent)
            out.append((c, i in on_path))
    return out
