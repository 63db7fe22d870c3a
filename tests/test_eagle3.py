"""Drafters made for one target (-d FILE, #51): each kind is recognised from its file; one made for
another target is refused in one line before any weights load; an EAGLE-3 head drafts with the
target's layer inputs exactly as llama.cpp feeds it, its greedy output is the target alone's, and
its cache follows the target through rejections, in run, serve and bench."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import llama_cpp
import numpy as np
import pytest
from cli_helpers import assert_one_line_error, localspec
from conftest import TinyModels, assert_greedy_equivalent, model_options
from counting_tree import CountingTree
from drafter_helpers import (
    assert_run_drafts_with,
    assert_the_targets_rows_matter,
    bench_summary,
    chat_replies,
    drafted_as_alone,
    generate,
    raw_context,
)
from server_helpers import assert_serves_what_run_does
from tiny_drafters import write_assistant, write_dflash, write_eagle3
from tiny_models import tiny_vocabulary

from benchmarks.testbeds.eagle3_model import Eagle3Spec, write_eagle3_pair
from localspec.backend.drafter_files import ASSISTANT, DFLASH, DRAFT_MODEL, DSPARK, EAGLE3, drafter_file
from localspec.backend.gguf_file import check_gguf
from localspec.backend.layer_inputs import hand_out_layer_inputs, joined_layer_inputs
from localspec.backend.model import Model
from localspec.backend.model_options import HeadFile
from localspec.drafters.mtp import MtpDrafter
from localspec.engine.events import drain
from localspec.engine.speculative import GenerationConfig, SpeculativeEngine
from localspec.sampling.dist import SamplingParams

PROMPTS = ["the cat sat on the mat", "a big red dog ran to the house", "she was in the tree and he"]
GOOD = Eagle3Spec(seed=5)
MIXED = replace(GOOD, g_weight=0.1)  # the target's state perturbs what it predicts: about 1 in 3 rejected
LAYERS = GOOD.layers
BRANCHES = 3


@dataclass(frozen=True)
class Pairs:
    target: Path
    good: Path
    mixed_target: Path
    mixed: Path


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> Pairs:
    d = tmp_path_factory.mktemp("eagle3")
    target, good = write_eagle3_pair(d / "target.gguf", d / "head.gguf", GOOD, tiny_vocabulary)
    mixed_target, mixed = write_eagle3_pair(d / "mt.gguf", d / "mh.gguf", MIXED, tiny_vocabulary)
    return Pairs(target, good, mixed_target, mixed)


def load(target: Path, head: Path, n_seq_max: int = 1) -> Model:
    return Model(target, replace(model_options(), head_file=HeadFile(head, LAYERS), n_seq_max=n_seq_max))


# --- what a file holds, and for which target ------------------------------------------------------


def test_each_kind_is_recognised_from_its_file(tiny: TinyModels, tmp_path: Path):
    files = {
        DRAFT_MODEL: tiny.close,
        EAGLE3: write_eagle3(tmp_path / "e.gguf"),
        DFLASH: write_dflash(tmp_path / "d.gguf"),
        DSPARK: write_dflash(tmp_path / "s.gguf", markov=True),
        ASSISTANT: write_assistant(tmp_path / "a.gguf"),
    }
    assert {kind: drafter_file(check_gguf(path)).kind for kind, path in files.items()} == {
        kind: kind for kind in files
    }
    assert drafter_file(check_gguf(files[EAGLE3])).target_layers == (0, 1, 1)


@pytest.mark.parametrize(
    "write,fragment",
    [
        (
            lambda p: write_eagle3(p, target_hidden=128),
            "EAGLE-3 head for a target of hidden size 128; target.gguf has 64",
        ),
        (lambda p: write_eagle3(p, layers=(0, 1, 2)), "reading layers [0, 1, 2]; target.gguf has 2 layers"),
        (lambda p: write_eagle3(p, pad=16), "with a vocabulary of 331 tokens; target.gguf has 315"),
        (lambda p: write_dflash(p, n_embd=32), "DFlash block drafter for a target of hidden size 32"),
        (lambda p: write_dflash(p, pad=16), "DFlash block drafter with a vocabulary of 331 tokens"),
        (lambda p: write_dflash(p, layers=(1, 5), markov=True), "DSpark block drafter reading layers [1, 5]"),
        (write_assistant, "Gemma 4 assistant (an MTP drafter in its own file), made for a Gemma 4 target"),
    ],
    ids=[
        "eagle3-hidden",
        "eagle3-layers",
        "eagle3-vocabulary",
        "dflash-hidden",
        "dflash-vocabulary",
        "dspark-layers",
        "assistant",
    ],
)
def test_a_drafter_made_for_another_target_is_refused_in_one_line(
    tiny: TinyModels, tmp_path, write, fragment
):
    drafter = write(tmp_path / "drafter.gguf")
    res = localspec("run", "-m", str(tiny.target), "-d", str(drafter), "-p", "hi", "-n", "4")
    assert_one_line_error(res, fragment)


@pytest.mark.parametrize(
    "write,fragment",
    [
        (
            lambda p: write_dflash(p, markov=True, block=None),
            "DSpark block drafter (no dflash.block_size, which its Markov head needs): localspec does not",
        ),
        (lambda p: write_dflash(p, selector=True), "(DFlash2 (a selector lattice)): localspec does not"),
        (lambda p: write_dflash(p, mask=None), "DFlash block drafter (no mask token): localspec does not"),
    ],
    ids=["dspark", "dflash2", "no-mask"],
)
def test_a_block_drafter_localspec_does_not_run_is_refused_in_one_line(
    tiny: TinyModels, tmp_path, write, fragment
):
    drafter = write(tmp_path / "drafter.gguf")
    res = localspec("run", "-m", str(tiny.target), "-d", str(drafter), "-p", "hi", "-n", "4")
    assert_one_line_error(res, fragment)


# --- the EAGLE-3 head -------------------------------------------------------------------------


def test_the_head_reads_the_target_as_llama_cpp_feeds_it(tiny: TinyModels, tmp_path: Path):
    """The head's logits after a context are those of llama.cpp's own feeding (common/speculative.cpp:
    the token at p + 1 with the encoded layer inputs at p, at position p), computed here by hand
    through llama.cpp; pairing each token with its own position's row instead gives others."""
    head_path = write_eagle3(tmp_path / "head.gguf")
    layers = drafter_file(check_gguf(head_path)).target_layers
    with Model(tiny.target, replace(model_options(), head_file=HeadFile(head_path, layers))) as target:
        assert target.head is not None
        tokens = target.tokenize(PROMPTS[0] + " and " + PROMPTS[1])
        target.prefill(tokens[:-1])
        ours = target.head.sync(tokens).copy()
        g = _encoded_rows(target, head_path, layers, tokens)
        by_hand = _decoded(target, head_path, g, tokens[1:])
        shifted = _decoded(target, head_path, g, tokens[:-1])
    assert np.abs(ours - by_hand).max() < 1e-3 * np.abs(by_hand).max()
    assert np.abs(ours - shifted).max() > 0.1 * np.abs(by_hand).max()


def _encoded_rows(target: Model, head_path: Path, layers, tokens: list[int]) -> np.ndarray:
    """The g rows llama.cpp's driver makes: a fresh target context's layer inputs, encoded."""
    n, width = len(tokens), llama_cpp.llama_model_n_embd(target.model)
    ctx = raw_context(target.model, None, target)
    hand_out_layer_inputs(ctx, layers)
    batch = llama_cpp.llama_batch_init(n, 0, 1)
    for i, token in enumerate(tokens):
        batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.seq_id[i][0] = token, i, 1, 0
        batch.logits[i] = i == n - 1
    batch.n_tokens = n
    assert llama_cpp.llama_decode(ctx, batch) == 0
    joined = joined_layer_inputs(ctx, layers, n, width)
    head = target.head
    assert head is not None
    rows = head._encode(joined)
    llama_cpp.llama_batch_free(batch)
    llama_cpp.llama_free(ctx)
    return rows


def _decoded(target: Model, head_path: Path, g: np.ndarray, paired: list[int]) -> np.ndarray:
    """A fresh head context given `paired[k]` with g[k] at position k, as llama.cpp's driver gives
    them (a verified batch without outputs, then the last token alone): the logits after it."""
    weights = llama_cpp.llama_model_load_from_file(
        str(head_path).encode(), llama_cpp.llama_model_default_params()
    )
    ctx = raw_context(weights, target.ctx, target)
    n, width = len(paired), g.shape[1]
    batch = llama_cpp.llama_batch_init(n, width, 1)
    ids = (llama_cpp.llama_token * n)()
    batch.token = ids
    rows = np.ctypeslib.as_array(batch.embd, shape=(n, width))
    for first, stop in ((0, n - 1), (n - 1, n)):
        for i, k in enumerate(range(first, stop)):
            ids[i], rows[i] = paired[k], g[k]
            batch.pos[i], batch.n_seq_id[i], batch.seq_id[i][0], batch.logits[i] = k, 1, 0, k == n - 1
        batch.n_tokens = stop - first
        assert llama_cpp.llama_decode(ctx, batch) == 0
    logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, -1), shape=(target.n_vocab,)).copy()
    batch.token = None
    llama_cpp.llama_batch_free(batch)
    llama_cpp.llama_free(ctx)
    llama_cpp.llama_model_free(weights)
    return logits


def test_a_head_with_a_reduced_vocabulary_drafts_only_the_ids_it_maps(tiny: TinyModels, tmp_path: Path):
    """`d2t` maps the head's rows to target ids (heads for Llama 3.3 70B): the other ids get no
    probability (so no draft can propose them), and the output is the target alone's."""
    mapped = tuple(range(259, 315))
    head_path = write_eagle3(tmp_path / "d2t.gguf", d2t=mapped)
    options = replace(model_options(), head_file=HeadFile(head_path, (0, 1, 1)))
    with Model(tiny.target, options) as target:
        assert target.head is not None
        prompt = target.tokenize(PROMPTS[0])
        target.prefill(prompt[:-1])
        logits = target.head.sync(prompt).copy()
        outside = np.setdiff1d(np.arange(target.n_vocab), mapped)
        assert np.isneginf(logits[outside]).all() and np.isfinite(logits[list(mapped)]).all()
        done = generate(SpeculativeEngine(target, MtpDrafter(target.head)), prompt, "fixed", n=24)
        expected = generate(SpeculativeEngine(target, None), prompt, "fixed", n=24).tokens
        assert_greedy_equivalent(target, prompt, expected, done.tokens)
        assert done.stats.n_drafted > 0


def test_the_test_head_predicts_its_target(pairs: Pairs):
    """The designed pair stays meaningful: about half its drafts two deep are accepted (a random
    head's, about 1 in 100; the head does not see the first token, to which the target attends)."""
    with load(pairs.target, pairs.good) as target:
        assert target.head is not None and target.head.kind == "eagle3"
        engine = SpeculativeEngine(target, MtpDrafter(target.head), "eagle3")
        drafted = accepted = 0
        for text in PROMPTS:
            stats = generate(engine, target.tokenize(text), "fixed", draft_max=2).stats
            drafted, accepted = drafted + stats.n_drafted, accepted + stats.n_accepted
        assert drafted > 40 and accepted / drafted > 0.4, (accepted, drafted)


@pytest.mark.parametrize("name", ["good", "mixed"])
@pytest.mark.parametrize("mode", ["fixed", "auto", "chain", "tree"])
def test_greedy_output_with_the_head_is_the_target_alones(pairs: Pairs, name: str, mode: str):
    target_path, head = (pairs.target, pairs.good) if name == "good" else (pairs.mixed_target, pairs.mixed)
    with load(target_path, head, BRANCHES if mode == "tree" else 1) as target:
        assert target.head is not None
        drafter = CountingTree(target.head, BRANCHES) if mode == "tree" else MtpDrafter(target.head)
        drafted_as_alone(target, drafter, mode, PROMPTS)


def test_under_a_grammar_the_head_drafts_what_the_constrained_target_says(pairs: Pairs):
    grammar = "root ::= ([ ]? [a-s] [a-z]*)+"
    with load(pairs.target, pairs.good) as target:
        assert target.head is not None
        engine, alone = SpeculativeEngine(target, MtpDrafter(target.head)), SpeculativeEngine(target, None)
        config = GenerationConfig(
            max_tokens=32,
            sampling=SamplingParams(temperature=0.0),
            draft_mode="fixed",
            draft_max=4,
            grammar=grammar,
        )
        for text in PROMPTS[:2]:
            prompt = target.tokenize(text)
            expected = drain(alone.generate(prompt, config)).tokens
            done = drain(engine.generate(prompt, config))
            assert done.stats.n_accepted > 0
            assert_greedy_equivalent(target, prompt, expected, done.tokens)


@pytest.mark.parametrize("tree", [False, True], ids=["chain", "tree"])
def test_the_heads_cache_follows_the_target_through_rejections(pairs: Pairs, tree: bool):
    """After a generation with rejections the head predicts what a head that never drafted does."""
    with load(pairs.mixed_target, pairs.mixed, BRANCHES if tree else 1) as target:
        assert target.head is not None
        drafter = CountingTree(target.head, BRANCHES) if tree else MtpDrafter(target.head)
        prompt = target.tokenize(PROMPTS[1])
        done = generate(SpeculativeEngine(target, drafter), prompt, "fixed", draft_max=4)
        assert done.stats.n_accepted < done.stats.n_drafted and (not tree or drafter.branched)
        context = [*prompt, *done.tokens]
        after = target.head.sync(context).copy()
    with load(pairs.mixed_target, pairs.mixed) as fresh:
        assert fresh.head is not None
        fresh.prefill(context[:-1])
        expected = fresh.head.sync(context)
        assert np.abs(after - expected).max() < 1e-3 * np.abs(expected).max()


def test_without_the_targets_rows_the_mixed_head_predicts_otherwise(pairs: Pairs):
    """The check above can fail: handed no rows, the mixed head predicts other logits."""
    with load(pairs.mixed_target, pairs.mixed) as target:
        assert_the_targets_rows_matter(target, target.tokenize(PROMPTS[2]))


def test_the_head_leaves_out_the_first_token(pairs: Pairs):
    """No row precedes the first token: it has no entry in the head's cache (llama.cpp's has none)."""
    with load(pairs.target, pairs.good) as target:
        assert target.head is not None
        context = target.tokenize(PROMPTS[0])
        target.prefill(context[:-1])
        target.head.sync(context)
        memory = target.head.memory
        assert llama_cpp.llama_memory_seq_pos_min(memory, 0) == 1
        assert llama_cpp.llama_memory_seq_pos_max(memory, 0) == len(context) - 1


# --- through the commands ------------------------------------------------------------------------


def test_run_drafts_with_the_head_and_says_so(pairs: Pairs):
    stats = assert_run_drafts_with(pairs.target, pairs.good, "eagle3", PROMPTS)
    assert all(s["n_accepted"] > 0 for s in stats)


def test_serve_drafts_with_the_head_and_answers_what_run_does(pairs: Pairs):
    assert_serves_what_run_does(["-m", str(pairs.target), "-d", str(pairs.good)], PROMPTS[1], "eagle3")


def test_bench_runs_the_head(pairs: Pairs):
    assert bench_summary(pairs.target, pairs.good)["fixed-4"]["acceptance_rate"] > 0.3


def test_chat_with_the_head_replies_what_the_target_alone_does(pairs: Pairs, tmp_path: Path):
    """Two turns piped into `chat` (the second reusing the head's cache of the first): the saved
    replies are the target alone's."""
    alone = chat_replies(pairs.target, "none", PROMPTS[:2], tmp_path)
    assert len(alone) == 2 and chat_replies(pairs.target, str(pairs.good), PROMPTS[:2], tmp_path) == alone
