"""The top token of a row of logits and its probability under softmax: a draft's confidence,
what `auto` judges each drafted token by (engine/estimates.py calibrates it) and --draft-p-min
compares against. A server's lanes have it computed where their passes ran (backend/draft_ask.py)."""

from __future__ import annotations

import numpy as np

SMALL = 1024  # below this many logits, whole-array operations are cheaper
NEAR = 10.0  # top_token: logits within this of the top are summed exactly
SAMPLE = 32  # ... and the others estimated from every SAMPLE-th one


def top_token(logits: np.ndarray) -> tuple[int, float]:
    """The argmax and its probability under plain softmax (the draft's confidence, what
    --draft-p-min compares against), with two passes over the vocabulary and no exp over it.

    The normaliser is summed exactly over the logits within NEAR of the top (every term that could
    matter alone) and estimated from every SAMPLE-th logit below that (the many small terms, whose
    sum does matter: a top token at 0.9 leaves 0.1 spread over the rest). A confidence is a
    heuristic for how far to draft, never part of the acceptance rule."""
    x = logits
    token = int(np.argmax(x))
    top = x[token]
    if len(x) < SMALL:
        return token, float(1.0 / np.exp(x - top, dtype=np.float64).sum())
    cut = top - np.float32(NEAR)
    exact = float(np.exp(x[x > cut] - top).sum(dtype=np.float64))
    sampled = x[::SAMPLE]
    far = float(np.exp(sampled[sampled <= cut] - top).sum(dtype=np.float64))
    return token, 1.0 / (exact + SAMPLE * far)
