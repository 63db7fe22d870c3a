"""A DFlash block drafter (-d FILE, #51): it drafts a block from the target's layer inputs exactly
as llama.cpp feeds it, its cache follows the target through rejections, a step never drafts past
its block, a call is priced the same at any length, and the output is the target alone's through
run, chat, serve and bench (the sampled case is in test_lossless_sampling.py)."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import llama_cpp
import numpy as np
import pytest
from cli_helpers import assert_one_line_error, localspec
from conftest import TinyModels, assert_greedy_equivalent, model_options
from drafter_helpers import (
    assert_run_drafts_with,
    bench_summary,
    chat_replies,
    drafted_as_alone,
    generate,
    raw_context,
)
from server_helpers import assert_serves_what_run_does
from tiny_drafters import write_dflash

from localspec.backend.dflash import DFlashBlock, InjectedInputs
from localspec.backend.drafter_files import DFLASH, DSPARK
from localspec.backend.layer_inputs import hand_out_layer_inputs, joined_layer_inputs
from localspec.backend.model import Model
from localspec.backend.model_options import HeadFile
from localspec.drafters.base import DraftSettings
from localspec.drafters.block import BlockDrafter
from localspec.engine.budgets import FixedBudget
from localspec.engine.costs import LiveCosts
from localspec.engine.speculative import SpeculativeEngine
from localspec.sampling.dist import SamplingParams

PROMPTS = ["the cat sat on the mat", "a big red dog ran to the house", "she was in the tree and he"]
LAYERS = (0, 1)
BLOCK = 8
MASK = 4


@pytest.fixture(scope="module")
def drafter_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dflash(tmp_path_factory.mktemp("dflash") / "dflash.gguf", LAYERS, block=BLOCK, mask=MASK)


@pytest.fixture(scope="module")
def spark_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DSpark drafter: a Markov head, its anchor-first layout."""
    folder = tmp_path_factory.mktemp("dspark")
    return write_dflash(folder / "dspark.gguf", LAYERS, block=BLOCK, mask=MASK, markov=True)


def load(target: Path, drafter: Path, kind: str = DFLASH) -> Model:
    return Model(target, replace(model_options(), head_file=HeadFile(drafter, LAYERS, kind=kind)))


def block_rows(target: Model, context: list[int]) -> np.ndarray:
    """Every row of the block the drafter drafts after `context` (the target has verified all
    but its last token)."""
    head = target.head
    assert isinstance(head, DFlashBlock)
    rows = [head.sync(context).copy()]
    for _ in range(head.most - 1):
        rows.append(head.decode([0], all_logits=False)[0].copy())
    return np.stack(rows)


# --- the drafter --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [DFLASH, DSPARK])
def test_the_block_reads_the_target_as_llama_cpp_feeds_it(
    tiny: TinyModels, drafter_file: Path, spark_file: Path, kind: str
):
    """The block's rows after a context are those of llama.cpp's own feeding (common/speculative.cpp:
    the target's layer inputs at p injected at p, then [last token, mask, ...] decoded after
    them; DSpark's rows from the last token's own on), computed here by hand through llama.cpp;
    features one position off give others."""
    path = spark_file if kind == DSPARK else drafter_file
    with load(tiny.target, path, kind) as target:
        tokens = target.tokenize(PROMPTS[0] + " and " + PROMPTS[1])
        target.prefill(tokens[:-1])
        ours = block_rows(target, tokens)
        features = _layer_inputs(target, tokens[:-1])
        first = 0 if kind == DSPARK else 1
        by_hand = _block_by_hand(target, path, features, tokens[-1])[first:]
        shifted = _block_by_hand(target, path, np.roll(features, 1, axis=0), tokens[-1])[first:]
    assert np.abs(ours - by_hand).max() < 1e-3 * np.abs(by_hand).max()
    assert np.abs(ours - shifted).max() > 0.02 * np.abs(by_hand).max()


def _layer_inputs(target: Model, tokens: list[int]) -> np.ndarray:
    """A fresh target context's joined layer inputs for `tokens`, from one pass."""
    n, width = len(tokens), llama_cpp.llama_model_n_embd(target.model)
    ctx = raw_context(target.model, None, target)
    hand_out_layer_inputs(ctx, LAYERS)
    batch = llama_cpp.llama_batch_init(n, 0, 1)
    for i, token in enumerate(tokens):
        batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.seq_id[i][0] = token, i, 1, 0
        batch.logits[i] = i == n - 1
    batch.n_tokens = n
    assert llama_cpp.llama_decode(ctx, batch) == 0
    joined = joined_layer_inputs(ctx, LAYERS, n, width).copy()
    llama_cpp.llama_batch_free(batch)
    llama_cpp.llama_free(ctx)
    return joined


def _block_by_hand(target: Model, path: Path, features: np.ndarray, last: int) -> np.ndarray:
    weights = llama_cpp.llama_model_load_from_file(str(path).encode(), llama_cpp.llama_model_default_params())
    ctx = raw_context(weights, target.ctx, target)
    llama_cpp.llama_set_causal_attn(ctx, False)
    n, width = features.shape
    inject = llama_cpp.llama_batch_init(n, width, 1)
    np.ctypeslib.as_array(inject.embd, shape=(n, width))[:] = features
    for i in range(n):
        inject.pos[i], inject.n_seq_id[i], inject.seq_id[i][0], inject.logits[i] = i, 1, 0, False
    inject.n_tokens = n
    assert llama_cpp.llama_decode(ctx, inject) == 0
    noise = llama_cpp.llama_batch_init(BLOCK, 0, 1)
    for i in range(BLOCK):
        noise.token[i], noise.pos[i], noise.n_seq_id[i] = last if i == 0 else MASK, n + i, 1
        noise.seq_id[i][0], noise.logits[i] = 0, True
    noise.n_tokens = BLOCK
    assert llama_cpp.llama_decode(ctx, noise) == 0
    logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits(ctx), shape=(BLOCK, target.n_vocab)).copy()
    for batch in (inject, noise):
        llama_cpp.llama_batch_free(batch)
    llama_cpp.llama_free(ctx)
    llama_cpp.llama_model_free(weights)
    return logits


def test_the_cache_follows_the_target_through_rejections(tiny: TinyModels, drafter_file: Path):
    """After a generation of rejected drafts the block is what a drafter that never drafted makes."""
    with load(tiny.target, drafter_file) as target:
        assert target.head is not None
        prompt = target.tokenize(PROMPTS[1])
        done = generate(SpeculativeEngine(target, BlockDrafter(target.head)), prompt, "fixed")
        assert done.stats.n_accepted < done.stats.n_drafted
        context = [*prompt, *done.tokens]
        after = block_rows(target, context)
    with load(tiny.target, drafter_file) as fresh:
        fresh.prefill(context[:-1])
        expected = block_rows(fresh, context)
    assert np.abs(after - expected).max() < 1e-3 * np.abs(expected).max()


def test_a_step_never_drafts_past_the_block(tiny: TinyModels, drafter_file: Path):
    with load(tiny.target, drafter_file) as target:
        assert target.head is not None
        drafter = BlockDrafter(target.head)
        prompt = target.tokenize(PROMPTS[2])
        target.prefill(prompt[:-1])
        drafter.begin(prompt, DraftSettings())
        rng = np.random.default_rng(0)
        draft = drafter.propose(prompt, FixedBudget(16), SamplingParams(temperature=0.0), rng)
        assert len(draft.tokens) == BLOCK - 1 and draft.flat
        # Its one block pass (and no injection: the prompt was read at the start)
        assert draft.passes == 1


def test_the_targets_passes_hand_the_drafter_their_rows_as_they_end(tiny: TinyModels, drafter_file: Path):
    """A long prompt's layer inputs go into the drafter's cache chunk by chunk, never all held at
    once; a drafter that sat out is current all the same: its next call is its block's one pass,
    and that pass is charged to drafting, not to catching up."""
    with load(tiny.target, drafter_file) as target:
        assert target.head is not None and target.hidden is not None
        drafter = BlockDrafter(target.head)
        prompt = target.tokenize(PROMPTS[0])
        target.prefill(prompt[:-1])
        drafter.begin(prompt, DraftSettings())
        later = [*prompt, *target.tokenize(" and " + PROMPTS[1] + " and " + PROMPTS[2])[1:]]
        target.prefill(later[:-1])
        assert not target.hidden.blocks and target.head.cached[: len(later) - 1] == later[:-1]
        params, rng = SamplingParams(temperature=0.0), np.random.default_rng(0)
        draft = drafter.propose(later, FixedBudget(4), params, rng)
        assert len(draft.tokens) == 4 and draft.passes == 1
        assert draft.catch_up_s <= max(drafter.view.synced_s - target.head.block_s, 0.0) + 1e-9


def test_a_block_is_priced_the_same_at_any_length():
    """One pass drafts the whole block: auto must not price a longer draft as more passes."""
    costs = LiveCosts()
    for _ in range(5):
        costs.observe_draft("dflash", 2, 0.004, flat=True)
        costs.observe_draft("draft-model", 3, 0.006, first=0.002)
    assert costs.draft("dflash", 1) == pytest.approx(0.004)
    assert costs.draft("dflash", 7) == pytest.approx(0.004)
    assert costs.draft("draft-model", 7) > 2 * costs.draft("draft-model", 1)


@pytest.mark.parametrize("mode", ["fixed", "auto", "chain"])
def test_greedy_output_with_the_block_is_the_target_alones(tiny: TinyModels, drafter_file: Path, mode: str):
    with load(tiny.target, drafter_file) as target:
        assert target.head is not None
        # under auto the random drafter is soon paused: its first steps draft
        assert drafted_as_alone(target, BlockDrafter(target.head), mode, PROMPTS) > 0


def test_a_dspark_block_drafts_a_whole_block_and_the_target_alones_text(tiny: TinyModels, spark_file: Path):
    """Its anchor-first layout drafts from the last token's own row: a block of BLOCK tokens."""
    with load(tiny.target, spark_file, DSPARK) as target:
        assert isinstance(target.head, DFlashBlock) and target.head.most == BLOCK
        drafter = BlockDrafter(target.head)
        assert drafter.name == DSPARK and drafted_as_alone(target, drafter, "fixed", PROMPTS) > 0
        prompt = target.tokenize(PROMPTS[2])
        target.prefill(prompt[:-1])
        drafter.begin(prompt, DraftSettings())
        draft = drafter.propose(
            prompt, FixedBudget(16), SamplingParams(temperature=0.0), np.random.default_rng(0)
        )
        assert len(draft.tokens) == BLOCK


# --- through the commands ------------------------------------------------------------------------


def test_run_drafts_with_the_block_and_says_so(tiny: TinyModels, drafter_file: Path, spark_file: Path):
    assert_run_drafts_with(tiny.target, drafter_file, "dflash", PROMPTS)
    assert_run_drafts_with(tiny.target, spark_file, "dspark", PROMPTS[:1])


def test_a_tree_of_blocks_is_refused_in_one_line(tiny: TinyModels, drafter_file: Path):
    res = localspec(
        "run", "-m", str(tiny.target), "-d", str(drafter_file), "-p", "hi", "--draft-branches", "3"
    )
    assert_one_line_error(res, "a DFlash block drafter drafts one chain")


def test_serve_drafts_with_the_block_and_answers_what_run_does(tiny: TinyModels, drafter_file: Path):
    assert_serves_what_run_does(["-m", str(tiny.target), "-d", str(drafter_file)], PROMPTS[1], "dflash")


def test_bench_runs_the_block(tiny: TinyModels, drafter_file: Path):
    fixed = bench_summary(tiny.target, drafter_file)["fixed-4"]
    assert fixed["drafted_steps"] > 0 and "dflash_call_ms" in fixed["costs_ms"]


def test_chat_with_the_block_replies_what_the_target_alone_does(
    tiny: TinyModels, drafter_file: Path, tmp_path: Path
):
    """Two turns piped into `chat` (the second reusing the drafter's cache of the first): the
    saved replies are the target alone's."""
    alone = chat_replies(tiny.target, "none", PROMPTS[:2], tmp_path)
    assert len(alone) == 2 and chat_replies(tiny.target, str(drafter_file), PROMPTS[:2], tmp_path) == alone


def test_at_the_end_of_the_context_the_target_goes_on_alone(tiny: TinyModels, drafter_file: Path):
    """The block's pass needs room for the whole block: within its length of the context's end
    nothing is drafted, and the generation runs to the context's end as the target alone's does."""
    options = replace(model_options(n_ctx=256), head_file=HeadFile(drafter_file, LAYERS, kind=DFLASH))
    with Model(tiny.target, options) as target:
        assert target.head is not None and target.n_ctx == 256
        prompt = target.tokenize(" ".join(PROMPTS * 8))[:230]
        done = generate(SpeculativeEngine(target, BlockDrafter(target.head)), prompt, "fixed", n=64)
        expected = generate(SpeculativeEngine(target, None), prompt, "fixed", n=64)
        assert done.stop_reason == expected.stop_reason == "length"
        assert_greedy_equivalent(target, prompt, expected.tokens, done.tokens)
        assert done.stats.n_drafted > 0


def test_the_drafters_work_inside_the_targets_prompt_pass_is_its_reading(
    tiny: TinyModels, drafter_file: Path, monkeypatch: pytest.MonkeyPatch
):
    """What the drafter does with the prompt's rows inside the target's passes (here made to take
    0.2 s) is charged to its reading, not to the target alone's first token."""
    original = InjectedInputs._keep

    def slow(self, start: int, rows: np.ndarray) -> None:
        time.sleep(0.2)
        original(self, start, rows)

    monkeypatch.setattr(InjectedInputs, "_keep", slow)
    with load(tiny.target, drafter_file) as target:
        assert target.head is not None
        prompt = target.tokenize(PROMPTS[0])
        stats = generate(SpeculativeEngine(target, BlockDrafter(target.head)), prompt, "fixed", n=4).stats
    assert stats.target_prompt_s < 0.1 and stats.prompt_s >= 0.2


def test_a_restored_conversation_keeps_its_new_rows_for_the_next_sync(tiny: TinyModels, drafter_file: Path):
    """`serve` restores a kept conversation into the target's cache without a pass: the drafter's
    cache still holds the other one's rows, so the rows of the target's next pass are kept (not put
    on top of the other text's) and the sync takes them in from where the texts part."""
    options = replace(model_options(), head_file=HeadFile(drafter_file, LAYERS, kind=DFLASH), slots=2)
    with Model(tiny.target, options) as target:
        assert target.head is not None and target.hidden is not None
        first, other = (target.tokenize(text) for text in (PROMPTS[0], PROMPTS[1] + " and " + PROMPTS[2]))
        for text in (first, other):
            target.resume(text)
            target.prefill(text[:-1])
        longer = [*first, *target.tokenize(" and the dog")[1:]]
        target.resume(longer)  # the first conversation comes back from the host's copy
        target.prefill(longer[:-1])
        start = len(first) - 1
        assert target.hidden.first == start and target.hidden.end == len(longer) - 1
        block_rows(target, longer)
        assert target.head.cached[: len(longer) - 1] == longer[:-1] and not target.hidden.blocks
