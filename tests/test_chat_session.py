"""The chat session in-process: one stream of draws per conversation, Ctrl-C in a prompt pass."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from conftest import TinyModels

from localspec.backend.model import ABORTABLE_BATCH
from localspec.chat import ChatSession
from localspec.engine.events import DoneEvent, Event
from localspec.engine.speculative import GenerationConfig
from localspec.loader import LoadOptions, load
from localspec.sampling import SamplingParams

SAMPLED = SamplingParams(temperature=1.5, top_k=0, top_p=1.0, min_p=0.0)


def done_of(events: Iterable[Event]) -> DoneEvent:
    return [ev for ev in events if isinstance(ev, DoneEvent)][-1]


@pytest.fixture(scope="module")
def loaded(tiny: TinyModels):
    pair = load(LoadOptions(model=tiny.target, draft=tiny.close, draft_mode="fixed"))
    yield pair
    pair.close()


def answers(session: ChatSession, questions: list[str], reset: bool = False) -> list[list[int]]:
    out = []
    for q in questions:
        if reset:
            session.reset()
        out.append(done_of(session.reply(q, print)).tokens)
    return out


def test_replies_draw_on_from_one_stream_and_a_seed_repeats_the_conversation(loaded):
    config = GenerationConfig(max_tokens=12, sampling=SAMPLED, seed=11, draft_mode="fixed", draft_max=4)
    session = ChatSession(loaded, config)
    first, again = answers(session, ["the cat", "the cat"], reset=True)
    # The same question in a fresh conversation is asked of a stream that has moved on.
    assert first != again
    # The same seed in a new session, or set again in this one, repeats the conversation as a whole.
    assert answers(ChatSession(loaded, config), ["the cat", "the cat"], reset=True) == [first, again]
    session.set_option("seed", "11")
    assert answers(session, ["the cat", "the cat"], reset=True) == [first, again]


def test_set_seed_rejects_what_no_generator_takes(loaded):
    session = ChatSession(loaded, GenerationConfig(seed=1))
    with pytest.raises(Exception, match="--seed must be in"):
        session.set_option("seed", "-1")
    assert session.config.seed == 1


def test_ctrl_c_stops_a_prompt_pass_midway(loaded):
    session = ChatSession(loaded, GenerationConfig(max_tokens=8, sampling=SamplingParams(temperature=0.0), draft_mode="fixed"))
    target = loaded.target
    real_decode = target.decode

    def decode_with_ctrl_c(tokens, all_logits):
        if len(tokens) >= ABORTABLE_BATCH:
            loaded.cancel.set()  # what chat's SIGINT handler does, here while the prompt pass is due
        return real_decode(tokens, all_logits)

    target.decode = decode_with_ctrl_c
    try:
        done = done_of(session.reply("the cat sat on the mat " * 30, print))
    finally:
        del target.decode
    assert done.stop_reason == "interrupted"
    assert done.stats.n_prompt_evaluated == 0 and done.tokens == []
    assert len(target.cached) < ABORTABLE_BATCH  # llama_decode stopped inside the pass
    # The next reply starts afresh (the event is cleared) and the conversation goes on.
    session.reset()
    assert done_of(session.reply("moon", print)).stop_reason == "length"
