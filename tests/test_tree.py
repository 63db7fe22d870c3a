"""Tree drafting: layout, verification math, and losslessness on tiny and real models."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
from conftest import assert_greedy_equivalent, model_options
from scipy import stats

from localspec.backend.model import Model
from localspec.drafters.base import DraftSettings
from localspec.drafters.tree import TreeDrafter
from localspec.engine.events import drain
from localspec.engine.speculative import GenerationConfig, SpeculativeEngine
from localspec.engine.tree_verify import TreeLayout, verify_tree
from localspec.sampling.dist import SamplingParams, distribution
from localspec.session.prompt import prompt_tokens

GREEDY = SamplingParams(temperature=0.0)
PROMPTS = ["the cat sat on the mat", "a big red dog ran to the house", "moon"]


def test_layout_of_a_chain():
    t = TreeLayout.build([-1, 0, 1])
    assert t.depth == [1, 2, 3] and t.n_seqs == 1
    assert t.node_seqs == [[0], [0], [0]]
    assert t.children[0] == [0] and t.children[3] == []


def test_layout_of_a_tree_puts_the_top_path_in_sequence_0():
    #        root
    #       /    \
    #      0      1
    #     / \      \
    #    2   3      4
    #    |
    #    5
    t = TreeLayout.build([-1, -1, 0, 0, 1, 2])
    assert t.depth == [1, 1, 2, 2, 2, 3]
    assert t.n_seqs == 3
    assert t.node_seqs[0] == [0, 1] and t.node_seqs[2] == [0] and t.node_seqs[5] == [0]
    assert t.node_seqs[3] == [1] and t.node_seqs[1] == [2] and t.node_seqs[4] == [2]


def test_layout_rejects_parents_after_children():
    with pytest.raises(ValueError):
        TreeLayout.build([-1, 2, 0])


def test_greedy_verify_follows_the_matching_branch():
    vocab = 6
    tokens = [3, 4, 1, 2]  # node 0 (3) and node 1 (4) under the root; 1 under node 1; 2 under node 0
    layout = TreeLayout.build([-1, -1, 1, 0])
    logits = np.zeros((5, vocab), dtype=np.float32)
    logits[0, 4] = 5  # root: the target wants 4 -> node 1
    logits[2, 1] = 5  # after node 1: wants 1 -> node 2
    logits[3, 5] = 5  # after node 2: wants 5, a leaf -> bonus token 5
    path, token = verify_tree(logits, tokens, layout, GREEDY, np.random.default_rng(0))
    assert path == [1, 2] and token == 5
    logits[0] = 0
    logits[0, 0] = 5  # no child matches at the root
    assert verify_tree(logits, tokens, layout, GREEDY, np.random.default_rng(0)) == ([], 0)


def test_sampled_verify_emits_the_target_distribution():
    p = np.array([0.1, 0.35, 0.25, 0.2, 0.1])
    logits = np.log(p)[None, :].repeat(4, axis=0)
    tokens = [1, 3, 0]  # three siblings under the root, tried in turn
    layout = TreeLayout.build([-1, -1, -1])
    params = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    rng = np.random.default_rng(7)
    counts = Counter()
    n = 30000
    for _ in range(n):
        path, token = verify_tree(logits, tokens, layout, params, rng)
        counts[tokens[path[0]] if path else token] += 1
    observed = np.array([counts[i] for i in range(5)])
    assert stats.chisquare(observed, n * distribution(logits[0], params)).pvalue > 1e-3


@pytest.fixture(scope="module")
def tree_target(tiny):
    with Model(tiny.target, replace(model_options(), n_seq_max=4)) as m:
        yield m


@pytest.fixture(scope="module")
def tree_baselines(tree_target):
    engine = SpeculativeEngine(tree_target, None)
    config = GenerationConfig(max_tokens=80, sampling=GREEDY, draft_mode="fixed")
    return {p: drain(engine.generate(tree_target.tokenize(p), config)).tokens for p in PROMPTS}


class RecordingTree(TreeDrafter):
    def propose(self, *args, **kwargs):
        draft = super().propose(*args, **kwargs)
        self.leaves = getattr(self, "leaves", [])
        if draft.tokens:
            self.leaves.append(TreeLayout.build(draft.parents).n_seqs)
        return draft


@pytest.mark.parametrize("draft_name", ["close", "poor"])
@pytest.mark.parametrize("branches,draft_max", [(2, 3), (3, 6), (4, 8)])
def test_greedy_tree_output_is_identical(tiny, tree_target, tree_baselines, draft_name, branches, draft_max):
    with Model(getattr(tiny, draft_name), replace(model_options(), n_seq_max=4)) as d:
        drafter = RecordingTree(d, branches=branches)
        engine = SpeculativeEngine(tree_target, drafter, "tree")
        config = GenerationConfig(
            max_tokens=80,
            sampling=GREEDY,
            draft_max=draft_max,
            draft_mode="fixed",
            drafting=DraftSettings(p_split=0.0),
        )
        for prompt, expected in tree_baselines.items():
            prompt_tokens_ = tree_target.tokenize(prompt)
            done = drain(engine.generate(prompt_tokens_, config))
            assert done.tokens == expected
            assert tree_target.cached == [*prompt_tokens_, *done.tokens[:-1]][: len(tree_target.cached)]
            assert d.cached == [*prompt_tokens_, *done.tokens][: len(d.cached)]
        assert max(drafter.leaves) == branches  # the trees really branched


def test_tree_on_smollm2_matches_target_alone(smollm2_f16, smollm2_q4):
    opts = replace(model_options(2048), n_seq_max=4)
    with Model(smollm2_f16, opts) as t, Model(smollm2_q4, opts) as d:
        engine = SpeculativeEngine(t, TreeDrafter(d, branches=4), "tree")
        base = SpeculativeEngine(t, None)
        for text in ("Write a short poem about the sea.", "List three fruits and their colors."):
            prompt = prompt_tokens(t, text, raw=False)
            expected = drain(
                base.generate(prompt, GenerationConfig(max_tokens=48, sampling=GREEDY, draft_mode="fixed"))
            ).tokens
            done = drain(
                engine.generate(
                    prompt, GenerationConfig(max_tokens=48, sampling=GREEDY, draft_max=6, draft_mode="fixed")
                )
            )
            assert_greedy_equivalent(t, prompt, expected, done.tokens)
            assert done.stats.n_accepted > 0


def test_auto_branches_where_verification_is_cheap_and_not_where_it_is_dear(tiny):
    from cost_tables import live_costs

    from localspec.engine.controller import AutoController

    cheap = live_costs({1: 1.0, 64: 1.05}, {"tree": 0.01})
    dear = live_costs({b: 1.0 + 0.5 * (b - 1) for b in (1, 2, 4, 8, 16)}, {"tree": 0.2})
    rng = np.random.default_rng(0)
    widths = {}
    with Model(tiny.close, replace(model_options(), n_seq_max=4)) as d:
        drafter = TreeDrafter(d, branches=4)
        context = d.tokenize(PROMPTS[0])
        drafter.begin(context, DraftSettings(p_split=0.1))
        for name, costs in (("cheap", cheap), ("dear", dear)):
            controller = AutoController(costs)
            controller.gate("tree").trial = 0  # judged on the costs alone, not drafting on trial
            draft = drafter.propose(context, controller.plan(8), GREEDY, rng)
            widths[name] = TreeLayout.build(draft.parents).n_seqs if draft.tokens else 0
    assert widths["cheap"] > 1  # the draft's runners-up open side branches when they cost nothing
    assert widths["dear"] <= 1  # and stays a chain (or drafts nothing) when each token is dear


def test_an_aborted_tree_pass_leaves_no_cells_in_the_branch_sequences(tiny):
    import threading

    import llama_cpp

    from localspec.backend.model import ABORTABLE_BATCH
    from localspec.engine.events import DoneEvent

    cancel = threading.Event()
    opts = replace(model_options(), n_seq_max=4)
    with Model(tiny.target, opts, cancel) as t, Model(tiny.close, opts) as d:
        real_decode_tree = t.decode_tree

        def ctrl_c_during_the_tree_pass(tokens, positions, seq_ids):
            if len(tokens) >= ABORTABLE_BATCH:
                cancel.set()
            return real_decode_tree(tokens, positions, seq_ids)

        t.decode_tree = ctrl_c_during_the_tree_pass
        engine = SpeculativeEngine(t, TreeDrafter(d, branches=4), "tree")
        config = GenerationConfig(
            max_tokens=200,
            sampling=GREEDY,
            draft_max=ABORTABLE_BATCH + 8,
            draft_mode="fixed",
            drafting=DraftSettings(p_split=0.0),
        )
        events = list(engine.generate(t.tokenize(PROMPTS[0]), config, cancel))
        done = events[-1]
        assert isinstance(done, DoneEvent) and done.stop_reason == "interrupted"
        # Sequences 1..3 held copies of the context for the branches: none may survive the abort.
        for s in range(1, 4):
            assert llama_cpp.llama_memory_seq_pos_max(t.memory, s) == -1, s
        assert llama_cpp.llama_memory_seq_pos_max(t.memory, 0) == len(t.cached) - 1
