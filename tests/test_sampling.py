import numpy as np
import pytest
from scipy import stats

from localspec.sampling import SamplingParams, accept_draft_token, distribution, max_prob, sample

P_VALUE_FLOOR = 1e-3


def test_distribution_plain_softmax_with_temperature():
    logits = np.array([2.0, 1.0, 0.0, -1.0], dtype=np.float32)
    p = distribution(logits, SamplingParams(temperature=0.5, top_k=0, top_p=1.0, min_p=0.0))
    x = logits.astype(np.float64) / 0.5
    expected = np.exp(x) / np.exp(x).sum()
    np.testing.assert_allclose(p, expected, rtol=1e-12)


def test_distribution_top_k_keeps_k_best():
    logits = np.array([0.1, 3.0, 2.0, -1.0, 1.0], dtype=np.float32)
    p = distribution(logits, SamplingParams(temperature=1.0, top_k=2, top_p=1.0, min_p=0.0))
    assert set(np.flatnonzero(p)) == {1, 2}
    assert p[1] / p[2] == pytest.approx(np.e)


def test_distribution_top_p_keeps_token_that_crosses_threshold():
    # softmax of log([0.5, 0.3, 0.15, 0.05]) is exactly those probabilities
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    p = distribution(logits, SamplingParams(temperature=1.0, top_k=0, top_p=0.7, min_p=0.0))
    assert set(np.flatnonzero(p)) == {0, 1}
    np.testing.assert_allclose(p[:2], [0.625, 0.375])


def test_distribution_min_p_is_relative_to_top_token():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    p = distribution(logits, SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.25))
    assert set(np.flatnonzero(p)) == {0, 1, 2}  # 0.05 < 0.25 * 0.5


def test_distribution_order_is_top_k_top_p_min_p_then_temperature():
    logits = np.log(np.array([0.4, 0.3, 0.2, 0.1]))
    # top-p on the raw probabilities keeps 3 tokens; a high temperature afterwards must not add the 4th.
    p = distribution(logits, SamplingParams(temperature=5.0, top_k=0, top_p=0.85, min_p=0.0))
    assert p[3] == 0.0 and np.all(p[:3] > 0)


def test_max_prob():
    assert max_prob(np.log(np.array([0.7, 0.2, 0.1]))) == pytest.approx(0.7)


def test_sample_follows_distribution():
    rng = np.random.default_rng(0)
    p = np.array([0.0, 0.5, 0.2, 0.0, 0.3])
    counts = np.bincount([sample(p, rng) for _ in range(20000)], minlength=5)
    assert counts[0] == counts[3] == 0
    assert stats.chisquare(counts[[1, 2, 4]], 20000 * p[[1, 2, 4]]).pvalue > P_VALUE_FLOOR


def _emitted_distribution(p: np.ndarray, q: np.ndarray | None, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    vocab = len(p)
    counts = np.zeros(vocab, dtype=np.int64)
    for _ in range(n):
        draft = sample(q, rng) if q is not None else 2  # a fixed one-hot proposal
        _, token = accept_draft_token(p, q, draft, rng)
        counts[token] += 1
    return counts


@pytest.mark.parametrize(
    "p,q",
    [
        ([0.1, 0.2, 0.3, 0.25, 0.15, 0.0], [0.3, 0.3, 0.1, 0.1, 0.1, 0.1]),  # q covers a token p forbids
        ([0.05, 0.05, 0.6, 0.1, 0.1, 0.1], [0.0, 0.0, 0.2, 0.4, 0.4, 0.0]),  # q misses tokens p allows
        ([0.2, 0.2, 0.2, 0.2, 0.1, 0.1], [0.2, 0.2, 0.2, 0.2, 0.1, 0.1]),  # identical: always accept
    ],
)
def test_rejection_rule_emits_target_distribution(p, q):
    p, q = np.array(p), np.array(q)
    n = 30000
    counts = _emitted_distribution(p, q, n, seed=1)
    support = p > 0
    assert counts[~support].sum() == 0
    assert stats.chisquare(counts[support], n * p[support]).pvalue > P_VALUE_FLOOR


def test_one_hot_proposal_emits_target_distribution():
    p = np.array([0.1, 0.2, 0.4, 0.3])
    n = 30000
    counts = _emitted_distribution(p, None, n, seed=2)
    assert stats.chisquare(counts, n * p).pvalue > P_VALUE_FLOOR


def test_rule_detects_a_wrong_residual():
    """The chi-square check is strong enough to catch the classic bug of resampling from p."""
    p = np.array([0.1, 0.2, 0.3, 0.25, 0.15])
    q = np.array([0.4, 0.3, 0.1, 0.1, 0.1])
    rng = np.random.default_rng(3)
    counts = np.zeros(5, dtype=np.int64)
    n = 30000
    for _ in range(n):
        d = sample(q, rng)
        if rng.random() < min(1.0, p[d] / q[d]):
            counts[d] += 1
        else:
            counts[sample(p, rng)] += 1  # wrong: should be norm(max(0, p - q))
    assert stats.chisquare(counts, n * p).pvalue < P_VALUE_FLOOR
