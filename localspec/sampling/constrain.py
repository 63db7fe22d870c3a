"""Logits under a grammar: the tokens it forbids at -inf, so that every rule downstream (argmax,
final_dist, the acceptance rule, coupled noise, log-probabilities) sees the constrained
distribution: the grammar applied first, then top-k, top-p, min-p and temperature.

Asking a grammar of a whole vocabulary costs as much as a target pass (backend/grammar.py), so it
is asked of the likeliest tokens first, in growing batches, until the rest can no longer matter to
the sampler: greedy needs one allowed token, top-k the k best allowed (or, when fewer are found,
as many as the nucleus and min-p cut can still reach), min-p every allowed token above its bound,
top-p a cut that the mass of the tokens not asked of could not move; full support and exact
log-probabilities need all of them. The row returned keeps finite only the allowed tokens it found,
all a sampler under `params` would reach."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from localspec.errors import LocalspecError
from localspec.sampling.dist import SamplingParams, top_ids

BATCHES = (8, 64, 512, 4096)


def _enough(kept: np.ndarray, lowest: float, logits: np.ndarray, params: SamplingParams, unseen: int) -> bool:
    """Whether the allowed tokens found among the best candidates (lowest logit `lowest`; `unseen`
    tokens not asked of) are all the sampler can reach."""
    if not len(kept):
        return False
    if params.greedy or 0 < params.top_k <= len(kept):
        return True
    best = float(logits[kept[0]])
    # Allowed tokens not found yet lie at or below `lowest`; this many could still join the support.
    joining = min(params.top_k - len(kept), unseen) if params.top_k > 0 else unseen
    if params.top_p < 1.0:
        # The nucleus is cut by mass, to which those tokens would add at most joining * e^lowest: if
        # the cut falls at the same found token with or without that mass, they cannot matter.
        w = np.exp(logits[kept].astype(np.float64) - best)
        cum = np.cumsum(w)
        at = int(np.searchsorted(cum / cum[-1], params.top_p))
        return at == int(np.searchsorted(cum / (cum[-1] + joining * math.exp(lowest - best)), params.top_p))
    if params.min_p > 0.0:
        return lowest < best + math.log(params.min_p)
    return not joining


def constrained(
    logits: np.ndarray,
    params: SamplingParams,
    allowed: Callable[[np.ndarray], np.ndarray],
    whole: bool = False,
) -> np.ndarray:
    """`logits` with what the grammar (`allowed`) forbids, and what the sampler would not reach
    anyway, at -inf. `whole`: every allowed token kept (for an exact softmax over them)."""
    vocab = len(logits)
    out = np.full(vocab, -np.inf, dtype=np.float32)
    if not whole:
        for n in BATCHES:
            if n * 2 > vocab:
                break
            cand = top_ids(logits, n)
            kept = cand[allowed(cand)]
            if _enough(kept, float(logits[cand[-1]]), logits, params, vocab - n):
                out[kept] = logits[kept]
                return out
    ok = allowed(np.arange(vocab, dtype=np.int32))
    if not ok.any():
        raise LocalspecError("the grammar allows no token at this point of the output")
    out[ok] = logits[ok]
    return out
