"""Drawing tokens: from a distribution, by speculative sampling's acceptance rule, or coupled to a
seed's noise so that the text depends on the seed alone."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from localspec.backend.confidence import SMALL
from localspec.sampling.dist import GROUP, Dist


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
    blocks = np.append(
        w[: rows * GROUP].reshape(rows, GROUP).sum(axis=1, dtype=np.float64),
        w[rows * GROUP :].sum(dtype=np.float64),
    )
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
