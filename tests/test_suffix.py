"""Suffix drafting: the per-request suffix tree, the index of earlier outputs, the drafter's chains
and trees, and the cache file (its format, damage, concurrent writers, eviction, keying)."""

from __future__ import annotations

import multiprocessing
import os
import stat
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from localspec.drafters.base import DraftSettings
from localspec.drafters.ngram import NgramDrafter
from localspec.drafters.suffix import STORE_MIN_MATCH, SuffixDrafter, match_kind
from localspec.drafters.suffix_cache import (
    SuffixCache,
    cache_file,
    read_texts,
    write_texts,
)
from localspec.drafters.suffix_index import SuffixIndex
from localspec.drafters.suffix_tree import DEPTH, MATCH_MAX, SuffixTree
from localspec.engine.budgets import FixedBudget
from localspec.engine.controller import AutoController
from localspec.sampling.dist import SamplingParams

GREEDY = SamplingParams(temperature=0.0)
RNG = np.random.default_rng(0)


def drafter(
    memory: SuffixIndex | None = None, branches: int = 1, lookup_min: int = 2, p_split: float = 0.1
) -> SuffixDrafter:
    d = SuffixDrafter(memory, branches)
    d.begin([], DraftSettings(lookup_min=lookup_min, p_split=p_split))
    return d


def test_tree_counts_continuations_and_matches_the_longest_tail():
    t = SuffixTree()
    t.extend([1, 2, 3, 9, 1, 2, 3, 9, 1, 2, 4, 5, 1, 2])
    m, node = t.match(1)
    assert m == 2  # "1 2" went on before; "5 1 2" never did
    kids = {tok: freq for tok, _c, freq in t.trie.children(node)}
    # "1 2" was followed by 3 twice and 4 once; one pseudo-occurrence keeps a count from certainty.
    assert kids == {3: 2 / 4, 4: 1 / 4}


def test_tree_is_depth_limited_and_grows_by_depth_nodes_per_token():
    t = SuffixTree(depth=4)
    text = list(range(20))
    t.extend(text)
    assert len(t.trie) <= 1 + 4 * len(text)
    node = 0
    for tok in text[:4]:  # a stretch of `depth` tokens is a path ...
        node = t.trie.kids[node][tok]  # type: ignore[index]
    assert not t.trie.kids[node]  # ... and none goes deeper


def test_tree_restarts_on_another_text_and_extends_a_continuation():
    t = SuffixTree()
    t.sync([1, 2, 3, 1, 2])
    assert t.match(2)[0] == 2
    t.sync([1, 2, 3, 1, 2, 3, 1])  # a continuation: only the new tokens are indexed
    assert t.tokens == [1, 2, 3, 1, 2, 3, 1]
    t.sync([7, 8, 9])  # another text
    assert t.tokens == [7, 8, 9] and t.match(1) == (0, 0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=2, max_size=80), st.integers(2, 4))
def test_suffix_finds_at_least_what_ngram_finds(context, n_max):
    ngram = NgramDrafter()
    ngram.begin([], DraftSettings(lookup_min=2, lookup_max=n_max))
    n, pos = ngram.match(context)
    d = drafter()
    m, trie, node, _origin = d.match(context)
    assert m >= n
    if n and m == n:
        # ngram's continuation (the most recent occurrence's) is among those suffix counted.
        assert context[pos] in {tok for tok, _c, _f in trie.children(node)}


def test_index_finds_the_longest_match_in_earlier_texts_and_counts_continuations():
    idx = SuffixIndex([[5, 6, 7, 8, 1, 2], [9, 6, 7, 8, 3, 4], [6, 7, 8, 3, 4]])
    m, trie = idx.match([0, 9, 6, 7, 8], 2, 8)
    assert m == 4 and trie is not None  # "9 6 7 8" occurs once: only its continuation counts
    assert [(tok, f) for tok, _c, f in trie.children(0)] == [(3, 0.5)]
    m, trie = idx.match([0, 0, 6, 7, 8], 2, 8)
    assert m == 3 and trie is not None
    assert {tok: f for tok, _c, f in trie.children(0)} == {3: 2 / 4, 1: 1 / 4}
    assert idx.match([2, 9], 2, 8) == (0, None)  # "2" ends a text and "9" starts the next: no match across


def test_index_read_on_one_thread_while_another_adds_finds_only_what_followed():
    """`serve --parallel`: a lane drafts from the index while another lane's finished answer is
    added. A lookup must see one consistent index (before, tokens and positions could come from
    two versions: wrong continuations, or an exception that ended the request)."""
    rng = np.random.default_rng(1)
    phrase = [7, 8, 9, 10, 11]
    idx = SuffixIndex([[*rng.integers(0, 50, 100).tolist(), *phrase, 1000]], size=3000)
    done, seen, errors = threading.Event(), set(), []

    def read() -> None:
        try:
            while not done.is_set():
                m, trie = idx.match([3, *phrase], 2, 1)
                assert m >= len(phrase) and trie is not None
                seen.update(tok for tok, _c, _f in trie.children(0))
        except Exception as e:  # noqa: BLE001 - the reader's failure is the test's
            errors.append(e)

    reader = threading.Thread(target=read)
    reader.start()
    for i in range(1, 300):  # past the size: evictions rebuild the index whole too
        idx.add([*rng.integers(0, 50, 60).tolist(), *phrase, 1000 + i])
    done.set()
    reader.join()
    assert not errors, errors[0]
    assert seen and all(tok >= 1000 for tok in seen)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=30), min_size=1, max_size=6),
    st.lists(st.integers(0, 3), min_size=2, max_size=20),
)
def test_index_grown_text_by_text_answers_as_one_built_at_once(texts, query):
    grown = SuffixIndex([], 1 << 12)
    for t in texts:
        grown.add(t)
    built = SuffixIndex(texts, 1 << 12)
    a, b = grown.match(query, 2, 6), built.match(query, 2, 6)
    assert a[0] == b[0]
    if a[1] is not None:
        assert sorted(a[1].children(0)) == sorted(b[1].children(0))  # type: ignore[union-attr]


def test_index_evicts_the_oldest_texts_past_its_size():
    idx = SuffixIndex([[1, 2, 3, 4]] * 3, size=10)
    assert idx.n_tokens == 8
    idx.add([7, 7, 7, 7, 7, 7, 7])
    assert idx.n_tokens <= 10 and idx.texts[-1].tolist() == [7] * 7
    assert idx.match([1, 2, 3], 2, 4)[0] == 0  # the old texts are gone


def test_a_full_index_is_rebuilt_once_per_quarter_of_its_size_not_at_every_text(monkeypatch):
    idx = SuffixIndex([[5, 6, 7, 8]] * 25, size=100)
    rebuilt = []
    real = SuffixIndex._rebuild
    monkeypatch.setattr(SuffixIndex, "_rebuild", lambda self: (rebuilt.append(1), real(self)))
    for i in range(100):  # 400 tokens into a full memory of 100
        idx.add([i, i + 1, i + 2, i + 3])
        assert idx.n_tokens <= 100 and idx.texts[-1].tolist() == [i, i + 1, i + 2, i + 3]
    assert len(rebuilt) <= 400 // 25 + 1
    assert idx.match([99, 100], 2, 2)[0] == 2 and idx.match([5, 6, 7], 2, 2)[0] == 0


def test_drafter_prefers_a_longer_match_in_earlier_outputs():
    memory = SuffixIndex([[10, 11, 12, 13, 14, 15, 16, 17]])
    d = drafter(memory)
    context = [1, 12, 2, 10, 11, 12]  # "12 2" here; "10 11 12 13 ..." in an earlier output
    draft = d.propose(context, FixedBudget(4), GREEDY, RNG)
    assert draft.tokens == [13, 14, 15, 16] and draft.parents is None
    assert draft.key.kind == match_kind(3) and draft.source == "suffix"


def test_a_datastore_drafts_its_matches_of_four_tokens_or_more_credited_to_it():
    store = SuffixIndex([[20, 21, 22, 23, 24, 25, 26], [30, 31, 32, 33, 34]])
    d = SuffixDrafter(None, 1, [store])
    d.begin([], DraftSettings(lookup_min=2))
    assert STORE_MIN_MATCH == 4
    short = d.propose([5, 31, 32, 33], FixedBudget(4), GREEDY, RNG)  # "31 32 33": three tokens
    assert short.tokens == [] and short.origin == ""
    draft = d.propose([5, 20, 21, 22, 23], FixedBudget(3), GREEDY, RNG)
    assert draft.tokens == [24, 25, 26] and draft.origin == "datastore"
    assert draft.key.kind == match_kind(4, "datastore") == "datastore-4" and draft.source == "suffix"
    d.end([5, 20, 21, 22, 23, 24])
    assert len(store.texts) == 2  # a datastore records nothing: SuffixIndex here stands in for one


def test_drafter_chain_follows_the_most_frequent_continuation():
    d = drafter()
    context = [7, 1, 2, 3, 8, 1, 2, 3, 9, 1, 2, 4, 6, 1, 2]
    draft = d.propose(context, FixedBudget(2), GREEDY, RNG)
    assert draft.tokens[0] == 3 and len(draft.tokens) == 2 and draft.parents is None
    assert draft.confidences is not None and draft.confidences[0] == pytest.approx(2 / 4)


def test_drafter_branches_where_continuations_part_and_stays_within_the_budget():
    d = drafter(branches=2, p_split=0.1)
    context = [1, 2, 3, 5, 1, 2, 4, 6, 1, 2]
    draft = d.propose(context, FixedBudget(3), GREEDY, RNG)
    assert len(draft.tokens) == 3 and draft.parents is not None
    assert draft.tokens[0] in (3, 4) and sorted(draft.tokens[:2]) == [3, 4]
    assert draft.parents[:2] == [-1, -1]  # two branches from the context's last token
    three = drafter(branches=3, p_split=0.1).propose(
        [1, 2, 3, 1, 2, 4, 1, 2, 5, 1, 2], FixedBudget(8), GREEDY, RNG
    )
    assert sum(p == -1 for p in three.parents or []) == 3
    assert len(drafter(branches=2).propose(context, FixedBudget(1), GREEDY, RNG).tokens) == 1


def test_drafter_without_branches_never_proposes_a_tree():
    d = drafter(branches=1)
    draft = d.propose([1, 2, 3, 5, 1, 2, 4, 6, 1, 2], FixedBudget(6), GREEDY, RNG)
    assert draft.parents is None and draft.tokens == [
        3,
        5,
        1,
        2,
        4,
        6,
    ]  # the first of equals, then its one way on


def test_drafter_keeps_each_output_with_the_end_of_its_prompt():
    memory = SuffixIndex()
    d = SuffixDrafter(memory)
    prompt = list(range(100, 140))
    d.begin(prompt, DraftSettings())
    d.end([*prompt, 1, 2, 3])
    assert [t.tolist() for t in memory.texts] == [[*prompt[-MATCH_MAX:], 1, 2, 3]]
    d.begin(prompt, DraftSettings())
    d.end(prompt)  # nothing generated: nothing kept
    assert len(memory.texts) == 1
    # The same prompt again: its tail matches the kept output, which is proposed at once.
    d.begin(prompt, DraftSettings())
    assert d.propose(prompt, FixedBudget(3), GREEDY, RNG).tokens == [1, 2, 3]


def test_match_lengths_learn_apart_but_share_one_gate():
    c = AutoController()
    four, sixteen = (SuffixDrafter.key.of_kind(match_kind(m)) for m in (4, 16))
    assert four.estimates != sixteen.estimates
    assert c.gate(four.drafter) is c.gate(sixteen.drafter) is c.gate("suffix")
    assert (
        match_kind(2) != match_kind(8)
        and match_kind(9) == match_kind(15)
        and match_kind(40) == match_kind(MATCH_MAX)
    )
    assert MATCH_MAX < DEPTH


# --- the cache file ---


def test_file_round_trip_is_private(tmp_path: Path):
    path = tmp_path / "c.bin"
    texts = [np.array([1, 2, 3], np.int32), np.array([4], np.int32)]
    write_texts(path, texts, 50)
    assert [t.tolist() for t in read_texts(path, 50)] == [[1, 2, 3], [4]]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_damaged_or_foreign_file_is_ignored_with_a_notice_and_rebuilt(tmp_path: Path):
    path = tmp_path / "c.bin"
    write_texts(path, [np.array([1, 2, 3], np.int32)], 50)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    notices: list[str] = []
    cache = SuffixCache(path, 50, 1000, notices.append)
    assert cache.wait(10)
    assert len(notices) == 1 and "starts anew" in notices[0] and cache.index().n_tokens == 0  # type: ignore[union-attr]
    cache.record([7, 8, 9])
    assert [t.tolist() for t in read_texts(path, 50)] == [[7, 8, 9]]
    # Another vocabulary's size: not read.
    other: list[str] = []
    assert SuffixCache(path, 51, 1000, other.append).wait(10) and len(other) == 1


def test_records_keep_within_the_size_and_drop_the_oldest(tmp_path: Path):
    path = tmp_path / "c.bin"
    cache = SuffixCache(path, 50, 10, print)
    for i in range(5):
        cache.record([i] * 4)
    on_disk = [t.tolist() for t in read_texts(path, 50)]
    assert on_disk == [[3] * 4, [4] * 4]
    assert cache.index().n_tokens <= 10  # type: ignore[union-attr]


def _writer(path: str, worker: int, count: int) -> None:
    cache = SuffixCache(Path(path), 1000, 1 << 20, print)
    for i in range(count):
        cache.record([worker, i, *range(20)])


def test_concurrent_processes_never_lose_or_corrupt_texts(tmp_path: Path):
    path = tmp_path / "c.bin"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(path), w, 15)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    texts = read_texts(path, 1000)
    assert sorted((t[0], t[1]) for t in texts) == [(w, i) for w in range(4) for i in range(15)]


def test_the_file_is_per_vocabulary_and_per_api_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    a, b = cache_file("vocab-a"), cache_file("vocab-b")
    assert a != b and a.parent == b.parent and str(a).startswith(str(tmp_path))
    k1, k2 = cache_file("vocab-a", "key-1"), cache_file("vocab-a", "key-2")
    assert len({a, k1, k2}) == 3 and "key-1" not in k1.name  # the key itself never shows


def test_vocabularies_have_different_digests(tiny):
    from localspec.backend.gguf_file import check_gguf
    from localspec.backend.vocab import vocab_digest

    def digest(path: Path) -> str:
        return vocab_digest(check_gguf(path))

    assert digest(tiny.target) == digest(tiny.close) != digest(tiny.other_vocab)
    assert os.environ.get("XDG_CACHE_HOME")  # the suite never writes the user's own cache


def test_an_unwritable_cache_says_so_once_and_keeps_outputs_in_memory(tmp_path: Path):
    (tmp_path / "a-file").write_text("")
    notices: list[str] = []
    cache = SuffixCache(tmp_path / "a-file" / "c.bin", 50, 1000, notices.append)
    cache.wait(10)
    cache.record([1, 2, 3, 4])
    cache.record([1, 2, 3, 5])
    assert len(notices) == 1 and "memory only" in notices[0]
    assert cache.index().n_tokens == 8  # type: ignore[union-attr]
