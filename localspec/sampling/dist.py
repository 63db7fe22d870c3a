"""Sampling distributions: what a token is drawn from.

Every distribution here is the FINAL one a token is drawn from (after top-k, top-p, min-p and
temperature, in llama.cpp's default order), because the acceptance rule min(1, p/q) is exact only
when p and q are the distributions that target and draft really sample from.

Real vocabularies hold 128k-262k tokens and a fast GPU pass takes 10-30 ms, so nothing per token
runs over the whole vocabulary in float64 or more than once: a distribution is kept over its
support (`Dist`: top-k leaves tens of tokens), the k best logits are found through the maxima of
groups of the vocabulary (`top_ids`), and the draft's confidence needs no exp over it
(`top_token`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from localspec.backend.confidence import SMALL
from localspec.config import defaults
from localspec.errors import LocalspecError
from localspec.sampling.penalties import Penalties

GROUP = 256  # rows of the vocabulary's grid in top_ids


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = defaults.DEFAULT_TEMP
    top_k: int = defaults.DEFAULT_TOP_K
    top_p: float = defaults.DEFAULT_TOP_P
    min_p: float = defaults.DEFAULT_MIN_P
    # Applied to the logits before everything here, by whoever knows the text before a position
    # (engine/constraint.py, the draft model).
    penalties: Penalties = field(default_factory=Penalties)

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass(frozen=True)
class Dist:
    """Probabilities over a support: `ids` ascending with their `probs`, or `ids` None and `probs`
    over the whole vocabulary (zeros allowed). Sums to 1, except a residual, which `sample`
    normalises."""

    ids: np.ndarray | None
    probs: np.ndarray

    def at(self, token: int) -> float:
        if self.ids is None:
            return float(self.probs[token]) if 0 <= token < len(self.probs) else 0.0
        i = int(np.searchsorted(self.ids, token))
        return float(self.probs[i]) if i < len(self.ids) and self.ids[i] == token else 0.0

    def at_many(self, tokens: np.ndarray) -> np.ndarray:
        if self.ids is None:
            inside = tokens < len(self.probs)
            return np.where(inside, self.probs[np.where(inside, tokens, 0)], 0.0)
        i = np.minimum(np.searchsorted(self.ids, tokens), len(self.ids) - 1)
        return np.where(self.ids[i] == tokens, self.probs[i], 0.0)

    def support(self) -> np.ndarray:
        return self.ids if self.ids is not None else np.flatnonzero(self.probs)

    def top(self) -> float:
        return float(self.probs.max())

    def without(self, token: int) -> Dist:
        """The same weights with `token`'s removed (not renormalised)."""
        probs = self.probs.copy()
        if self.ids is None:
            if token < len(probs):
                probs[token] = 0.0
        else:
            probs[self.ids == token] = 0.0
        return Dist(self.ids, probs)

    def minus(self, q: Dist) -> Dist:
        """max(0, self - q): what is left of p where q took too much (the rejection residual)."""
        if self.ids is not None:
            return Dist(self.ids, np.maximum(self.probs - q.at_many(self.ids), 0.0))
        probs = self.probs.copy()
        if q.ids is None:
            width = min(len(q.probs), len(probs))
            np.maximum(probs[:width] - q.probs[:width], 0.0, out=probs[:width], casting="unsafe")
        else:
            ids = q.ids[q.ids < len(probs)]
            probs[ids] = np.maximum(probs[ids] - q.at_many(ids), 0.0)
        return Dist(None, probs)

    def dense(self, n_vocab: int) -> np.ndarray:
        out = np.zeros(n_vocab, dtype=np.float64)
        if self.ids is None:
            out[: len(self.probs)] = self.probs
        else:
            out[self.ids] = self.probs
        return out


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def top_ids(logits: np.ndarray, n: int) -> np.ndarray:
    """The ids of the n largest logits, largest first, equal ones in id order (of several equal to
    the n-th, any may be the one kept).

    The vocabulary is seen as GROUP rows of `cols` columns (column c: ids c, c + cols, ...). The n
    largest lie in the n columns with the largest maxima: a column holding one of them has a
    maximum at least the n-th largest logit, and at most n columns do. A column's maximum is a
    reduction down contiguous rows, as fast as one over the whole array: one pass and a partition
    of n columns, where an argpartition of the whole vocabulary costs ten."""
    x = logits
    vocab = len(x)
    if n >= vocab:
        return np.argsort(-x, kind="stable")
    if vocab < SMALL or n * GROUP * 4 > vocab:
        cand = np.argpartition(x, vocab - n)[vocab - n :]
    else:
        width = vocab // GROUP
        best = x[: GROUP * width].reshape(GROUP, width).max(axis=0)
        cols = np.argpartition(best, width - n)[width - n :]
        cand = np.concatenate(
            ((np.arange(GROUP)[:, None] * width + cols).ravel(), np.arange(GROUP * width, vocab))
        )
        # The n largest are each at least the n-th largest column maximum (n columns reach it):
        # what lies below goes before the partition, which slows tenfold over many equal values
        # (a vocabulary's unused ids, whose rows are copies of one another).
        cand = cand[x[cand] >= best[cols].min()]
        cand = cand[np.argpartition(x[cand], len(cand) - n)[len(cand) - n :]]
    cand = np.sort(cand)  # equal logits in id order, as the stable sort of the whole vocabulary above
    return cand[np.argsort(-x[cand], kind="stable")]


class NotNumbers(LocalspecError):
    def __init__(self) -> None:
        super().__init__(
            "the model's output is not numbers (NaN or infinite logits): its weights are damaged, or its "
            "type is one this build computes wrongly"
        )


def final_dist(logits: np.ndarray, params: SamplingParams) -> Dist:
    """The distribution a temp > 0 sampler draws from, over its support."""
    x = logits
    vocab = len(x)
    if 0 < params.top_k < vocab:
        ids = top_ids(x, params.top_k)
    elif params.top_p < 1.0:
        ids = np.argsort(-x, kind="stable")  # top-p alone: the nucleus is a prefix of the whole order
    elif params.min_p > 0.0:
        # A superset of what min-p keeps (rounding to float32 moves the bound by an ulp); cut exactly below.
        ids = np.flatnonzero(x >= x.max() + np.log(params.min_p) - 1e-3)
        ids = ids[np.argsort(-x[ids], kind="stable")]
    else:
        # The whole vocabulary: one array, in float32 where it is wide.
        e = x.astype(np.float64 if vocab < SMALL else np.float32)
        e -= e.max()
        e *= 1.0 / params.temperature
        np.exp(e, out=e)
        total = e.sum(dtype=np.float64)
        if not 0 < total < np.inf:
            raise NotNumbers()
        e /= total
        return Dist(None, e)
    cand = x[ids].astype(np.float64)
    if params.top_p < 1.0:
        cum = np.cumsum(softmax(cand))
        keep = int(np.searchsorted(cum, params.top_p)) + 1  # up to and including the token crossing top_p
        ids, cand = ids[:keep], cand[:keep]
    if params.min_p > 0.0:
        keep_mask = cand >= cand[0] + np.log(params.min_p)
        ids, cand = ids[keep_mask], cand[keep_mask]
    if not len(cand) or not np.isfinite(cand[0]):  # the largest is NaN: so is every probability
        raise NotNumbers()
    order = np.argsort(ids)
    return Dist(ids[order], softmax(cand / params.temperature)[order])


def distribution(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """final_dist as dense float64 probabilities over the vocabulary (for references and reports)."""
    return final_dist(logits, params).dense(len(logits))


def token_logprobs(
    logits: np.ndarray, token: int, params: SamplingParams, n_top: int
) -> tuple[float, tuple[tuple[int, float], ...]]:
    """log p(token) and the n_top likeliest tokens with theirs, p the distribution the token was
    drawn from: the final one at temp > 0 (-inf outside its support); at temp 0 the softmax of the
    logits, since greedy's own choice is one-hot and would say nothing."""
    if params.greedy:
        x = logits.astype(np.float64 if len(logits) < SMALL else np.float32)
        top = float(x.max())
        log_z = top + float(np.log(np.exp(x - top).sum(dtype=np.float64)))
        best = top_ids(logits, n_top) if n_top else np.empty(0, dtype=np.int64)
        return float(logits[token]) - log_z, tuple((int(t), float(logits[t]) - log_z) for t in best)
    d = final_dist(logits, params)
    p = d.at(token)
    own = float(np.log(p)) if p > 0 else -math.inf
    if not n_top:
        return own, ()
    ids = d.ids if d.ids is not None else top_ids(d.probs, min(n_top, len(d.probs)))
    probs = d.at_many(ids)
    order = np.argsort(-probs, kind="stable")[:n_top]
    return own, tuple((int(ids[i]), float(np.log(probs[i]))) for i in order if probs[i] > 0)
