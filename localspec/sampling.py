"""Sampling distributions and the speculative acceptance rule.

Every distribution here is the FINAL one a token is drawn from (after top-k, top-p, min-p and
temperature, in llama.cpp's default order), because the acceptance rule min(1, p/q) is exact only
when p and q are the distributions that target and draft really sample from.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from localspec import defaults


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = defaults.DEFAULT_TEMP
    top_k: int = defaults.DEFAULT_TOP_K
    top_p: float = defaults.DEFAULT_TOP_P
    min_p: float = defaults.DEFAULT_MIN_P

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def distribution(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """Dense float64 probabilities over the vocabulary that a temp > 0 sampler draws from."""
    x = np.asarray(logits, dtype=np.float64)
    vocab = x.shape[0]
    if 0 < params.top_k < vocab:
        ids = np.argpartition(x, vocab - params.top_k)[vocab - params.top_k :]
    else:
        ids = np.arange(vocab)
    cand = x[ids]
    order = np.argsort(-cand, kind="stable")
    ids, cand = ids[order], cand[order]
    if params.top_p < 1.0:
        cum = np.cumsum(softmax(cand))
        keep = int(np.searchsorted(cum, params.top_p)) + 1  # up to and including the token crossing top_p
        ids, cand = ids[:keep], cand[:keep]
    if params.min_p > 0.0:
        keep_mask = cand >= cand[0] + np.log(params.min_p)
        ids, cand = ids[keep_mask], cand[keep_mask]
    out = np.zeros(vocab, dtype=np.float64)
    out[ids] = softmax(cand / params.temperature)
    return out


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    support = np.flatnonzero(probs)
    cdf = np.cumsum(probs[support])
    i = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
    return int(support[min(i, len(support) - 1)])


def max_prob(logits: np.ndarray) -> float:
    """Probability of the top token under plain softmax (what --draft-p-min compares against)."""
    x = np.asarray(logits, dtype=np.float64)
    return float(1.0 / np.exp(x - x.max()).sum())


def accept_draft_token(
    p: np.ndarray, q: np.ndarray | None, token: int, rng: np.random.Generator
) -> tuple[bool, int]:
    """Speculative sampling's rule for one drafted token.

    Accept `token` with probability min(1, p/q); otherwise return a token drawn from
    norm(max(0, p - q)). q=None means a deterministic (one-hot) proposal: accept with p(token),
    else draw from p with the token removed. Either way the returned token is distributed exactly
    as p."""
    q_tok = 1.0 if q is None else float(q[token])
    p_tok = float(p[token])
    if q_tok > 0.0 and rng.random() * q_tok < p_tok:
        return True, token
    residual = p.copy()
    if q is None:
        residual[token] = 0.0
    else:
        np.subtract(residual, q, out=residual)
        np.maximum(residual, 0.0, out=residual)
    if residual.sum() <= 0.0:  # p == q up to rounding: rejection had probability ~0
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

    def choose(self, probs: np.ndarray, position: int) -> int:
        """The token at `position` under the final distribution `probs` (of target or draft)."""
        support = np.flatnonzero(probs)
        scores = np.log(probs[support]) + self.gumbel(position, support)
        return int(support[int(np.argmax(scores))])
