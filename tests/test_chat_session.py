"""The chat session in-process: one stream of draws per conversation, Ctrl-C in a prompt pass."""

from __future__ import annotations

import pytest
from conftest import TinyModels

from localspec.backend.model import ABORTABLE_BATCH
from localspec.config.settings import Settings
from localspec.engine.events import drain
from localspec.errors import LocalspecError
from localspec.session.conversation import ChatSession
from localspec.session.loader import ModelFiles, load

SAMPLED = Settings(
    temp=1.5, top_k=0, top_p=1.0, min_p=0.0, max_tokens=12, seed=11, draft_mode="fixed", draft_max=4
)


@pytest.fixture(scope="module")
def loaded(tiny: TinyModels):
    pair = load(ModelFiles(tiny.target, tiny.close), Settings(draft_mode="fixed"))
    yield pair
    pair.close()


def answers(session: ChatSession, questions: list[str], reset: bool = False) -> list[list[int]]:
    out = []
    for q in questions:
        if reset:
            session.reset()
        out.append(drain(session.reply(q, print)).tokens)
    return out


def test_replies_draw_on_from_one_stream_and_a_seed_repeats_the_conversation(loaded):
    session = ChatSession(loaded, SAMPLED, verify_chosen=True)  # chat --verify standard
    first, again = answers(session, ["the cat", "the cat"], reset=True)
    # The same question in a fresh conversation is asked of a stream that has moved on.
    assert first != again
    # The same seed in a new session, or set again in this one, repeats the conversation as a whole.
    assert answers(ChatSession(loaded, SAMPLED), ["the cat", "the cat"], reset=True) == [first, again]
    assert session.set_option("seed", "11") == "seed = 11"  # the verification chosen stays
    assert answers(session, ["the cat", "the cat"], reset=True) == [first, again]


def test_set_seed_makes_verification_coupled_unless_one_was_chosen(loaded):
    """As --seed does: under auto only coupled verification makes a seeded conversation repeat."""
    unseeded = Settings(temp=1.2, top_k=0, top_p=1.0, min_p=0.0, max_tokens=12, draft_mode="auto")
    session = ChatSession(loaded, unseeded)
    assert session.set_option("seed", "5") == "seed = 5, verify = coupled"
    first = answers(session, ["the cat", "the cat"], reset=True)
    assert (
        answers(
            ChatSession(loaded, unseeded.merged({"seed": 5, "verify": "coupled"})),
            ["the cat", "the cat"],
            reset=True,
        )
        == first
    )
    assert session.set_option("seed", "-1") == "seed = -1, verify = standard"
    session.set_option("verify", "standard")
    assert session.set_option("seed", "5") == "seed = 5"  # chosen now: kept


def test_set_seed_minus_one_draws_a_random_seed_and_rejects_what_no_generator_takes(loaded):
    session = ChatSession(loaded, Settings(seed=1, temp=1.5, top_k=0, max_tokens=8, draft_mode="fixed"))
    with pytest.raises(LocalspecError, match=r"^seed must be -1 \(random\) or in \[0, 2\^64\)"):
        session.set_option("seed", "-7")
    assert session.settings.seed == 1
    assert session.set_option("seed", "-1") == "seed = -1"
    replies = {tuple(drain(session.reply("the cat", print)).tokens) for _ in range(3)}
    assert len(replies) > 1


def test_ctrl_c_stops_a_prompt_pass_midway(loaded):
    session = ChatSession(loaded, Settings(max_tokens=8, temp=0.0, draft_mode="fixed"))
    target = loaded.target
    real_decode = target.decode

    def decode_with_ctrl_c(tokens, all_logits, **how):
        if len(tokens) >= ABORTABLE_BATCH:
            loaded.cancel.set()  # what chat's SIGINT handler does, here while the prompt pass is due
        return real_decode(tokens, all_logits, **how)

    target.decode = decode_with_ctrl_c
    try:
        done = drain(session.reply("the cat sat on the mat " * 30, print))
    finally:
        del target.decode
    assert done.stop_reason == "interrupted"
    assert done.stats.n_prompt_evaluated == 0 and done.tokens == []
    assert len(target.cached) < ABORTABLE_BATCH  # llama_decode stopped inside the pass
    # The next reply starts afresh (the event is cleared) and the conversation goes on.
    session.reset()
    assert drain(session.reply("moon", print)).stop_reason == "length"


def test_set_changes_only_what_may_change_between_replies(loaded):
    session = ChatSession(loaded, Settings())
    assert (
        session.set_option("draft-p-split", "0.2") == "draft-p-split = 0.2"
        and session.settings.draft_p_split == 0.2
    )
    assert session.set_option("lookup-max", "6") == "lookup-max = 6"
    for load_time in ("ctx", "threads", "draft-branches", "gpu-layers"):
        with pytest.raises(
            LocalspecError,
            match=f"^{load_time} is fixed for the session: start the chat with --{load_time} 2$",
        ):
            session.set_option(load_time, "2")
    with pytest.raises(LocalspecError, match="unknown setting 'nope'"):
        session.set_option("nope", "2")
    with pytest.raises(LocalspecError, match="draft-min must be in \\[0, draft-max\\]"):
        session.set_option("draft-min", "99")


def test_set_grammar_reads_a_file_and_none_drops_it(loaded, tmp_path):
    session = ChatSession(loaded, Settings(temp=0.0, max_tokens=6, draft_mode="fixed"))
    (tmp_path / "cats.gbnf").write_text('root ::= (" cat")+')
    assert session.set_option("grammar", str(tmp_path / "cats.gbnf")) == "grammar = 'root ::= (\" cat\")+'"
    reply = drain(session.reply("the dog", print)).text
    assert reply and (" cat" * 6).startswith(reply)  # cut off by -n or ended after a word
    assert session.set_option("grammar", "none") == "grammar = default"
    with pytest.raises(LocalspecError, match="^grammar cannot read .*missing.gbnf"):
        session.set_option("grammar", str(tmp_path / "missing.gbnf"))
    (tmp_path / "bad.gbnf").write_text("root ::= (")
    with pytest.raises(LocalspecError, match="^grammar is not a GBNF grammar"):
        session.set_option("grammar", str(tmp_path / "bad.gbnf"))


def test_set_alone_lists_what_it_may_change_with_current_values(loaded):
    session = ChatSession(loaded, Settings(temp=0.3, draft_policy="greedy"))
    listing = session.current()
    assert "temp = 0.3" in listing and "draft-policy = greedy" in listing and "draft-p-min = 0.0" in listing
    assert "seed = default" in listing and "stop = none" in listing  # as a user would type them
    assert not any(line.startswith(("ctx ", "threads ", "draft-branches ")) for line in listing)


def test_set_draft_mode_auto_after_fixed_decides_from_the_next_reply(loaded):
    session = ChatSession(loaded, Settings(temp=0.0, max_tokens=40, draft_mode="fixed", draft_max=4))
    fixed = drain(session.reply("the cat", print)).stats
    # The last may have no room
    assert fixed.draft_mode == "fixed" and fixed.n_steps_drafted >= fixed.n_steps - 1
    session.set_option("draft-mode", "auto")
    auto = drain(session.reply("a dog", print)).stats
    # The costs timed in the fixed reply carry over: auto's choices show in the next reply's stats.
    assert auto.draft_mode == "auto" and auto.costs_ms["target_1_ms"] > 0
    assert 0 < auto.n_steps_drafted <= auto.n_steps and auto.n_drafted > 0


def test_a_coupled_seeded_conversation_repeats_under_auto(loaded):
    coupled = Settings(
        temp=1.2, top_k=0, top_p=1.0, min_p=0.0, max_tokens=12, seed=5, verify="coupled", draft_mode="auto"
    )
    first = answers(ChatSession(loaded, coupled), ["the cat", "the cat"], reset=True)
    assert first[0] != first[1]  # each reply its own noise
    assert answers(ChatSession(loaded, coupled), ["the cat", "the cat"], reset=True) == first
