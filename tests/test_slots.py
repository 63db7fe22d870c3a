"""The sequences a model keeps for a server: a request resumes the kept one sharing the longest
prefix with it, a short interleaved request does not overwrite a conversation, and kept sequences
take no room in the KV cache."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from conftest import TinyModels, model_options

from localspec.backend.model import Model
from localspec.backend.slots import PREFIX_BLOCK, common_prefix


def tokens(seed: int, n: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(3, 250, n)]


def start(model: Model, tokens: list[int]) -> int:
    """What a generation does first: resume, then evaluate what is not cached."""
    model.resume(tokens)
    return model.prefill(tokens)


def test_a_conversation_resumes_from_its_slot_after_interleaved_requests(tiny: TinyModels):
    a, title, b = tokens(1, 120), tokens(2, 30), tokens(3, 90)
    with (
        Model(tiny.target, replace(model_options(1024), slots=3)) as kept,
        Model(tiny.target, model_options(1024)) as fresh,
    ):
        assert start(kept, a) == 0
        kept.decode(tokens(4, 20), all_logits=False)  # the reply
        conversation = kept.cached[:]
        assert start(kept, title) == 0  # a title request in between...
        assert start(kept, b) == 0  # ...and another conversation
        turn = conversation + tokens(5, 10)
        assert start(kept, turn) == len(conversation)  # only the new turn is evaluated
        assert start(kept, title[:20] + tokens(6, 5)) == 20
        # What was resumed is what a fresh model computes for the same tokens.
        kept.resume(turn + [7])
        got, want = kept.sync(turn + [7]), fresh.sync(turn + [7])
        assert int(np.argmax(got)) == int(np.argmax(want)) and np.max(np.abs(got - want)) < 0.05


def test_kept_sequences_live_outside_the_cache(tiny: TinyModels):
    a, b, c = tokens(1, 200), tokens(2, 200), tokens(3, 200)
    with Model(tiny.target, replace(model_options(256), slots=3)) as kept:
        assert kept.n_ctx == 256  # room for one of them at a time
        for seq in (a, b, c):
            assert start(kept, seq) == 0
        for seq in (a, b, c):
            assert start(kept, seq + [9]) == 200  # each resumes in full


def test_without_slots_nothing_is_kept(tiny: TinyModels):
    a, b = tokens(1, 50), tokens(2, 50)
    with Model(tiny.target, model_options(512)) as model:
        start(model, a)
        start(model, b)
        assert start(model, a) == 0


def test_common_prefix_is_where_two_token_lists_part_wherever_that_is():
    """Compared a block at a time: a parting in the first, a middle or the last block, at a block's
    edge, none at all, one list a prefix of the other, lists against tuples."""
    rng = np.random.default_rng(7)
    for n in (0, 1, PREFIX_BLOCK - 1, PREFIX_BLOCK, PREFIX_BLOCK + 1, 5 * PREFIX_BLOCK + 3):
        a = [int(t) for t in rng.integers(0, 4, n)]
        cuts = {0, n // 2, max(n - 1, 0), n, *(i for i in range(0, n, PREFIX_BLOCK))}
        for cut in cuts:
            b = a[:cut] + [9] + a[cut + 1 :] if cut < n else a + [9]
            assert (
                common_prefix(a, b) == common_prefix(tuple(a), b) == common_prefix(b, tuple(a)) == min(cut, n)
            )
            assert common_prefix(a, a[:cut]) == cut
