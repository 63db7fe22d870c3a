from collections import Counter

import numpy as np
import pytest
from scipy import stats

from localspec.backend.confidence import top_token
from localspec.sampling.dist import SamplingParams, distribution
from localspec.sampling.draws import accept_draft_token, sample

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
    assert top_token(np.log(np.array([0.7, 0.2, 0.1]))) == (0, pytest.approx(0.7))


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


# --- wide vocabularies: the sparse forms against dense float64 references ----------------------

WIDE = (49152, 152064, 262144)


def _logits(vocab: int, seed: int, top: float = 12.0) -> np.ndarray:
    """A language model's shape: a bulk of unlikely tokens and a few far above it."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(vocab).astype(np.float32) * 2.5
    x[rng.choice(vocab, 8, replace=False)] += rng.uniform(0.5, 1.0, 8).astype(np.float32) * top
    return x


def _reference(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """The definition, dense and in float64: top-k, then top-p, then min-p, then temperature."""
    x = logits.astype(np.float64)
    order = np.argsort(-x, kind="stable")
    if params.top_k > 0:
        order = order[: params.top_k]
    cand = x[order]
    if params.top_p < 1.0:
        cum = np.cumsum(np.exp(cand - cand[0]) / np.exp(cand - cand[0]).sum())
        keep = int(np.searchsorted(cum, params.top_p)) + 1
        order, cand = order[:keep], cand[:keep]
    if params.min_p > 0.0:
        keep_mask = cand >= cand[0] + np.log(params.min_p)
        order, cand = order[keep_mask], cand[keep_mask]
    out = np.zeros(len(x))
    e = np.exp((cand - cand[0]) / params.temperature)
    out[order] = e / e.sum()
    return out


@pytest.mark.parametrize("vocab", WIDE)
@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(0.8, 40, 0.95, 0.05),
        SamplingParams(1.0, 0, 1.0, 0.0),  # full support
        SamplingParams(0.7, 0, 0.9, 0.0),
        SamplingParams(1.2, 0, 1.0, 0.02),
        SamplingParams(1.0, 300, 1.0, 0.0),
    ],
    ids=str,
)
def test_final_dist_is_the_definition_at_wide_vocabularies(vocab: int, params: SamplingParams):
    for seed in range(3):
        logits = _logits(vocab, seed)
        np.testing.assert_allclose(
            distribution(logits, params), _reference(logits, params), rtol=2e-5, atol=1e-9
        )


@pytest.mark.parametrize("vocab", (1000, *WIDE))
def test_top_ids_are_the_largest_in_order(vocab: int):
    from localspec.sampling.dist import top_ids

    for seed, n in ((0, 1), (1, 4), (2, 40), (3, 500)):
        logits = _logits(vocab, seed)
        np.testing.assert_array_equal(top_ids(logits, n), np.argsort(-logits, kind="stable")[:n])


@pytest.mark.parametrize("vocab", WIDE[1:])
def test_top_ids_over_many_equal_unused_ids(vocab: int):
    """A padded vocabulary: most ids share one low logit (the wide testbed's, and real models'
    unused rows copied from one another); ties among the largest too."""
    from localspec.sampling.dist import top_ids

    logits = _logits(vocab, 7)
    logits[49152:] = -30.0
    first = int(np.argmax(logits))
    logits[[5, 900, 40000]] = logits[first]
    for n in (1, 3, 4, 40, 200):
        ids = top_ids(logits, n)
        # The n largest values, largest first, equal ones in id order (of those equal to the n-th,
        # any may be the one kept).
        np.testing.assert_array_equal(logits[ids], np.sort(logits)[::-1][:n])
        assert len(set(ids.tolist())) == n and all(
            a < b for a, b in zip(ids, ids[1:], strict=False) if logits[a] == logits[b]
        )
    np.testing.assert_array_equal(top_ids(logits, 4), sorted({5, 900, 40000, first}))  # a tie kept whole


@pytest.mark.parametrize("vocab", WIDE)
@pytest.mark.parametrize("top", [30.0, 12.0, 3.0, 0.0])  # very sure ... no token above the bulk
def test_top_token_is_the_argmax_and_its_probability(vocab: int, top: float):
    for seed in range(3):
        logits = _logits(vocab, seed, top)
        token, p = top_token(logits)
        x = logits.astype(np.float64)
        assert token == int(np.argmax(logits))
        assert p == pytest.approx(1.0 / np.exp(x - x.max()).sum(), rel=0.03)


def test_the_wide_paths_copy_no_row_of_the_vocabulary():
    """What a drafted or verified token costs at 262k with a sure draft and llama.cpp's default
    filters: not even a float32 copy of the logits."""
    import tracemalloc

    from localspec.sampling.dist import final_dist

    logits = _logits(262144, 0, top=30.0)
    tracemalloc.start()
    top_token(logits)
    final_dist(logits, SamplingParams(0.8, 40, 0.95, 0.05))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 262144 * 4, peak


@pytest.mark.parametrize("vocab", [6, 262144])
def test_sparse_rule_emits_the_target_distribution(vocab: int):
    """p and q over supports that overlap only in part, at a toy and at a real width: the emitted
    tokens follow p, and never leave its support."""
    from localspec.sampling.dist import Dist

    ids = np.array([3, 4, 5]) if vocab == 6 else np.array([7, 100_000, 262_000])
    p = Dist(np.array([0, *ids]), np.array([0.1, 0.3, 0.4, 0.2]))
    q = Dist(np.array([1, ids[0], ids[2]]), np.array([0.5, 0.2, 0.3]))
    rng = np.random.default_rng(4)
    n = 30000
    counts: Counter = Counter()
    for _ in range(n):
        _, token = accept_draft_token(p, q, sample(q, rng), rng)
        counts[token] += 1
    assert set(counts) <= {0, *ids.tolist()}
    observed = [counts[t] for t in (0, *ids.tolist())]
    assert stats.chisquare(observed, n * p.probs).pvalue > P_VALUE_FLOOR


def test_full_support_target_with_a_sparse_draft_emits_the_target_distribution():
    from localspec.sampling.dist import Dist, final_dist

    logits = _logits(262144, 5, top=6.0)
    p = final_dist(logits, SamplingParams(1.0, 0, 1.0, 0.0))
    assert p.ids is None and p.probs.dtype == np.float32
    top = np.argsort(-logits)[:3]
    q = Dist(np.sort(top), np.array([0.5, 0.3, 0.2]))
    rng = np.random.default_rng(6)
    n = 8000
    tokens = np.array([accept_draft_token(p, q, sample(q, rng), rng)[1] for _ in range(n)])
    # The three drafted tokens one by one, everything else pooled.
    observed = [int(np.sum(tokens == t)) for t in top]
    expected = [float(p.probs[t]) * n for t in top]
    observed.append(n - sum(observed))
    expected.append(n - sum(expected))
    assert stats.chisquare(observed, expected).pvalue > P_VALUE_FLOOR
