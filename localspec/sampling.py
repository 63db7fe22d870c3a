"""Sampling distributions and the speculative acceptance rule.

Every distribution here is the FINAL one a token is drawn from (after top-k, top-p, min-p and
temperature, in llama.cpp's default order), because the acceptance rule min(1, p/q) is exact only
when p and q are the distributions that target and draft really sample from.

Real vocabularies hold 128k-262k tokens and a fast GPU pass takes 10-30 ms, so nothing per token
runs over the whole vocabulary in float64 or more than once: a distribution is kept over its
support (`Dist`: top-k leaves tens of tokens), the k best logits are found through the maxima of
groups of the vocabulary (`top_ids`), and the draft's confidence needs no exp over it
(`top_token`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from localspec import defaults

GROUP = 256  # rows of the vocabulary's grid in top_ids
SMALL = 4 * GROUP  # below this many logits, whole-array operations are cheaper
NEAR = 10.0  # top_token: logits within this of the top are summed exactly
SAMPLE = 32  # ... and the others estimated from every SAMPLE-th one


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = defaults.DEFAULT_TEMP
    top_k: int = defaults.DEFAULT_TOP_K
    top_p: float = defaults.DEFAULT_TOP_P
    min_p: float = defaults.DEFAULT_MIN_P

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
    """The ids of the n largest logits, largest first (ties in either order).

    The vocabulary is seen as GROUP rows of `cols` columns (column c: ids c, c + cols, ...). The n
    largest lie in the n columns with the largest maxima: a column holding one of them has a
    maximum at least the n-th largest logit, and at most n columns do. A column's maximum is a
    reduction down contiguous rows, as fast as one over the whole array: one pass and a partition
    of n columns, where an argpartition of the whole vocabulary costs ten."""
    x = logits
    vocab = len(x)
    if n >= vocab:
        cand = np.arange(vocab)
    elif vocab < SMALL or n * GROUP * 4 > vocab:
        cand = np.argpartition(x, vocab - n)[vocab - n :]
    else:
        width = vocab // GROUP
        best = x[: GROUP * width].reshape(GROUP, width).max(axis=0)
        cols = np.argpartition(best, width - n)[width - n :]
        cand = np.concatenate(((np.arange(GROUP)[:, None] * width + cols).ravel(), np.arange(GROUP * width, vocab)))
        cand = cand[np.argpartition(x[cand], len(cand) - n)[len(cand) - n :]]
    return cand[np.argsort(-x[cand], kind="stable")]


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
        e /= e.sum(dtype=np.float64)
        return Dist(None, e)
    cand = x[ids].astype(np.float64)
    if params.top_p < 1.0:
        cum = np.cumsum(softmax(cand))
        keep = int(np.searchsorted(cum, params.top_p)) + 1  # up to and including the token crossing top_p
        ids, cand = ids[:keep], cand[:keep]
    if params.min_p > 0.0:
        keep_mask = cand >= cand[0] + np.log(params.min_p)
        ids, cand = ids[keep_mask], cand[keep_mask]
    order = np.argsort(ids)
    return Dist(ids[order], softmax(cand / params.temperature)[order])


def distribution(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """final_dist as dense float64 probabilities over the vocabulary (for references and reports)."""
    return final_dist(logits, params).dense(len(logits))


def _as_dist(probs: Dist | np.ndarray) -> Dist:
    return probs if isinstance(probs, Dist) else Dist(None, np.asarray(probs))


def _draw(weights: np.ndarray, rng: np.random.Generator) -> int:
    """An index drawn in proportion to `weights` (not normalised)."""
    cdf = np.cumsum(weights, dtype=np.float64)
    i = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
    if i >= len(cdf):  # the draw rounded up to the total: the last index with any weight
        i = int(np.flatnonzero(weights)[-1])
    return i


def sample(probs: Dist | np.ndarray, rng: np.random.Generator) -> int:
    p = _as_dist(probs)
    if p.ids is not None:
        return int(p.ids[_draw(p.probs, rng)])
    w = p.probs
    if len(w) < SMALL:
        return _draw(w, rng)
    # A whole vocabulary: a block in proportion to its sum, then a token within it (exact, and
    # one pass instead of a cumulative sum of every token).
    rows = len(w) // GROUP
    blocks = np.append(w[: rows * GROUP].reshape(rows, GROUP).sum(axis=1, dtype=np.float64), w[rows * GROUP :].sum(dtype=np.float64))
    b = _draw(blocks, rng)
    return b * GROUP + _draw(w[b * GROUP : (b + 1) * GROUP], rng)


def accept_draft_token(
    p: Dist | np.ndarray, q: Dist | np.ndarray | None, token: int, rng: np.random.Generator
) -> tuple[bool, int]:
    """Speculative sampling's rule for one drafted token.

    Accept `token` with probability min(1, p/q); otherwise return a token drawn from
    norm(max(0, p - q)). q=None means a deterministic (one-hot) proposal: accept with p(token),
    else draw from p with the token removed. Either way the returned token is distributed exactly
    as p. The residual lives on p's support: wherever p is 0, so is max(0, p - q)."""
    p = _as_dist(p)
    q = None if q is None else _as_dist(q)
    q_tok = 1.0 if q is None else q.at(token)
    p_tok = p.at(token)
    if q_tok > 0.0 and rng.random() * q_tok < p_tok:
        return True, token
    residual = p.without(token) if q is None else p.minus(q)
    if residual.probs.sum() <= 0.0:  # p == q up to rounding: rejection had probability ~0
        residual = p
    return False, sample(residual, rng)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 arrays (wrapping arithmetic)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@dataclass(frozen=True)
class Coupling:
    """--verify coupled: every token is the argmax of log p + g over the final distribution's
    support, g being Gumbel noise from a counter-based generator keyed by (seed, generation within
    the session, absolute position, token id). Gumbel-max draws exactly from p, and the draft
    proposes the same argmax over its own q with the same noise, so a draft token is accepted iff
    the two agree: the text is a function of the seed alone, with any draft, any length or none
    (Daliri, Musco, Suresh 2024, arXiv 2408.07978)."""

    seed: int
    generation: int = 0

    def gumbel(self, position: int, ids: np.ndarray) -> np.ndarray:
        mask = (1 << 64) - 1
        key = _mix(np.array([self.seed & mask], dtype=np.uint64))
        key = _mix(key ^ np.uint64(self.generation & mask))
        key = _mix(key ^ np.uint64(position & mask))
        bits = _mix(key ^ (ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)))
        u = ((bits >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53
        return -np.log(-np.log(u))

    def choose(self, probs: Dist | np.ndarray, position: int) -> int:
        """The token at `position` under the final distribution `probs` (of target or draft)."""
        p = _as_dist(probs)
        support = p.support()
        weights = p.probs[support] if p.ids is None else p.probs
        keep = weights > 0
        support, weights = support[keep], weights[keep]
        scores = np.log(weights.astype(np.float64)) + self.gumbel(position, support)
        return int(support[int(np.argmax(scores))])
