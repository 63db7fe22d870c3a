"""Gemma 4's assistant (-d FILE, #51): an MTP drafter in a file of its own that reads the target's
cache and last hidden state exactly as llama.cpp feeds it, never keeps a state of its own across
rejections, and gives the target alone's output through run, chat, serve and bench (the sampled
case is in test_lossless_sampling.py); one made for another Gemma 4 is refused in one line."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import llama_cpp
import numpy as np
import pytest
from cli_helpers import assert_one_line_error, localspec
from conftest import model_options
from drafter_helpers import (
    assert_run_drafts_with,
    bench_summary,
    chat_replies,
    drafted_as_alone,
    generate,
    raw_context,
)
from llama_cpp import llama_cpp_ext
from server_helpers import assert_serves_what_run_does
from tiny_drafters import write_assistant, write_gemma4, write_gemma4_pair

from localspec.backend.drafter_files import ASSISTANT
from localspec.backend.model import Model
from localspec.backend.model_options import HeadFile
from localspec.drafters.mtp import MtpDrafter
from localspec.engine.speculative import SpeculativeEngine

PROMPTS = ["the cat sat on the mat", "a big red dog ran to the house", "she was in the tree and he"]


@dataclass(frozen=True)
class Gemma4:
    target: Path
    assistant: Path  # random
    paired_target: Path  # the designed pair: a bigram target, and an assistant that drafts it
    paired: Path


@pytest.fixture(scope="module")
def gemma4(tmp_path_factory: pytest.TempPathFactory) -> Gemma4:
    d = tmp_path_factory.mktemp("gemma4")
    target, assistant = write_gemma4(d / "target.gguf"), write_assistant(d / "assistant.gguf")
    return Gemma4(target, assistant, *write_gemma4_pair(d / "pt.gguf", d / "pa.gguf"))


def load(target: Path, assistant: Path) -> Model:
    return Model(target, replace(model_options(), head_file=HeadFile(assistant, (), kind=ASSISTANT)))


# --- the drafter --------------------------------------------------------------------------------


def test_the_assistant_reads_the_target_as_llama_cpp_feeds_it(gemma4: Gemma4):
    """Its logits after a context are those of llama.cpp's own feeding (common/speculative.cpp:
    the last token with the target's state before it, at the last token's position, the target's
    cache holding the rest), computed here by hand through llama.cpp; with the target's cache
    emptied, or the state of another position, they are others."""
    with load(gemma4.target, gemma4.assistant) as target:
        assert target.head is not None and target.head.kind == ASSISTANT
        tokens = target.tokenize(PROMPTS[0] + " and " + PROMPTS[1])
        target.prefill(tokens[:-1])
        ours = target.head.sync(tokens).copy()
        by_hand = _by_hand(target, gemma4.assistant, tokens, state_at=len(tokens) - 2)
        other_state = _by_hand(target, gemma4.assistant, tokens, state_at=len(tokens) - 4)
        no_cache = _by_hand(target, gemma4.assistant, tokens, state_at=len(tokens) - 2, empty=True)
    assert np.abs(ours - by_hand).max() < 1e-3 * np.abs(by_hand).max()
    for wrong in (other_state, no_cache):
        assert np.abs(ours - wrong).max() > 0.02 * np.abs(by_hand).max()


def _by_hand(target: Model, path: Path, tokens: list[int], state_at: int, empty: bool = False) -> np.ndarray:
    """A fresh target context that read tokens[:-1], and a fresh assistant over it (made before the
    target's first pass, as llama.cpp's server makes it: one made after reads none of its cache)."""
    ctx = raw_context(target.model, None, target)
    llama_cpp_ext.llama_set_embeddings_nextn(ctx, True, False)
    weights = llama_cpp.llama_model_load_from_file(str(path).encode(), llama_cpp.llama_model_default_params())
    helper = raw_context(weights, ctx, target, llama_cpp.LLAMA_CONTEXT_TYPE_MTP)
    n, width = len(tokens) - 1, llama_cpp.llama_model_n_embd_out(target.model)
    batch = llama_cpp.llama_batch_init(n, 0, 1)
    for i, token in enumerate(tokens[:-1]):
        batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.seq_id[i][0], batch.logits[i] = (
            token,
            i,
            1,
            0,
            True,
        )
    batch.n_tokens = n
    assert llama_cpp.llama_decode(ctx, batch) == 0
    state = np.ctypeslib.as_array(
        llama_cpp_ext.llama_get_embeddings_nextn_ith(ctx, state_at), shape=(width,)
    ).copy()
    if empty:
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx), True)
    one = llama_cpp.llama_batch_init(1, width, 1)
    ids = (llama_cpp.llama_token * 1)(tokens[-1])
    one.token = ids
    np.ctypeslib.as_array(one.embd, shape=(1, width))[0] = state
    one.pos[0], one.n_seq_id[0], one.seq_id[0][0], one.logits[0], one.n_tokens = n, 1, 0, True, 1
    assert llama_cpp.llama_decode(helper, one) == 0
    logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(helper, 0), shape=(target.n_vocab,)).copy()
    one.token = None
    for b in (batch, one):
        llama_cpp.llama_batch_free(b)
    for c in (helper, ctx):
        llama_cpp.llama_free(c)
    llama_cpp.llama_model_free(weights)
    return logits


def test_the_assistant_follows_the_target_through_rejections(gemma4: Gemma4):
    """After a generation of rejected drafts its logits are what an assistant that never drafted
    gives: all it reads is the target's cache and state."""
    with load(gemma4.target, gemma4.assistant) as target:
        assert target.head is not None
        prompt = target.tokenize(PROMPTS[1])
        done = generate(SpeculativeEngine(target, MtpDrafter(target.head)), prompt, "fixed", draft_max=3)
        assert done.stats.n_accepted < done.stats.n_drafted
        context = [*prompt, *done.tokens]
        after = target.head.sync(context).copy()
    with load(gemma4.target, gemma4.assistant) as fresh:
        assert fresh.head is not None
        fresh.prefill(context[:-1])
        expected = fresh.head.sync(context).copy()
    # The target's cache came from verification passes here, from one prompt pass there: llama.cpp's
    # values move with a pass's width (0.2% here); a cache missing or stale moves them by ~40%.
    assert np.abs(after - expected).max() < 1e-2 * np.abs(expected).max()


@pytest.mark.parametrize("pair", [False, True], ids=["random", "paired"])
@pytest.mark.parametrize("mode", ["fixed", "auto", "chain"])
def test_greedy_output_with_the_assistant_is_the_target_alones(gemma4: Gemma4, mode: str, pair: bool):
    files = (gemma4.paired_target, gemma4.paired) if pair else (gemma4.target, gemma4.assistant)
    with load(*files) as target:
        assert target.head is not None
        # under auto the random assistant is soon paused: its first steps draft
        assert drafted_as_alone(target, MtpDrafter(target.head), mode, PROMPTS) > 0


def test_an_assistant_for_another_gemma_4_is_refused_in_one_line(gemma4: Gemma4, tmp_path: Path):
    narrow = write_assistant(tmp_path / "narrow.gguf", head=8)
    res = localspec("run", "-m", str(gemma4.target), "-d", str(narrow), "-p", "hi", "-n", "4")
    assert_one_line_error(res, "for another Gemma 4: attention.key_length 8, target.gguf has 16")
    wide = write_assistant(tmp_path / "wide.gguf", target_hidden=128)
    res = localspec("run", "-m", str(gemma4.target), "-d", str(wide), "-p", "hi", "-n", "4")
    assert_one_line_error(res, "for a target of hidden size 128; target.gguf has 64")


def test_a_tree_of_the_assistant_is_refused_in_one_line(gemma4: Gemma4):
    res = localspec(
        "run", "-m", str(gemma4.target), "-d", str(gemma4.assistant), "-p", "hi", "--draft-branches", "3"
    )
    assert_one_line_error(res, "MTP drafter in its own file) drafts one chain")


# --- through the commands ------------------------------------------------------------------------


def test_run_drafts_with_the_assistant_and_says_so(gemma4: Gemma4):
    stats = assert_run_drafts_with(gemma4.paired_target, gemma4.paired, ASSISTANT, PROMPTS)
    assert sum(s["n_accepted"] for s in stats) > 0


def test_serve_drafts_with_the_assistant_and_answers_what_run_does(gemma4: Gemma4):
    models = ["-m", str(gemma4.paired_target), "-d", str(gemma4.paired)]
    assert_serves_what_run_does(models, PROMPTS[1], ASSISTANT)


def test_bench_runs_the_assistant(gemma4: Gemma4):
    fixed = bench_summary(gemma4.paired_target, gemma4.paired)["fixed-4"]
    assert fixed["drafted_steps"] > 0 and fixed["acceptance_rate"] > 0


def test_chat_with_the_assistant_replies_what_the_target_alone_does(gemma4: Gemma4, tmp_path: Path):
    alone = chat_replies(gemma4.paired_target, "none", PROMPTS[:2], tmp_path)
    drafted = chat_replies(gemma4.paired_target, str(gemma4.paired), PROMPTS[:2], tmp_path)
    assert len(alone) == 2 and drafted == alone
