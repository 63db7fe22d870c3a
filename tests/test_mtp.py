"""Drafting with the target's own MTP heads (-d mtp): the test model's heads predict, greedy output
is the target alone's, the head's cache follows the target's through rejections, a target with
heads drafts with them by default, and a target without usable heads is refused in one line."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import assert_one_line_error, localspec
from conftest import assert_greedy_equivalent, model_options
from counting_tree import CountingTree
from drafter_helpers import assert_the_targets_rows_matter
from server_helpers import assert_serves_what_run_does
from tiny_models import tiny_vocabulary

from benchmarks.testbeds.mtp_model import MtpSpec, write_mtp_model
from localspec.backend.gguf_file import GGUFInfo, TensorInfo, check_gguf
from localspec.backend.hidden import HiddenRows
from localspec.backend.model import Model
from localspec.backend.mtp import MtpHead
from localspec.backend.mtp_archs import check_heads, drafts_itself, head_count
from localspec.drafters.base import DraftSettings
from localspec.drafters.chain import ChainDrafter
from localspec.drafters.mtp import MtpDrafter
from localspec.drafters.ngram import NgramDrafter
from localspec.engine.events import drain
from localspec.engine.speculative import GenerationConfig, SpeculativeEngine
from localspec.errors import LocalspecError
from localspec.sampling.dist import SamplingParams

PROMPTS = ["the cat sat on the mat", "a big red dog ran to the house", "moon", "she was in the tree and he"]
GREEDY = SamplingParams(temperature=0.0)
GOOD = MtpSpec(seed=5, n_layer=4, logit_scale=3.0, head_noise=0.03)
POOR = replace(GOOD, head_noise=0.3)  # about half its drafts rejected
MIXED = replace(GOOD, h_weight=0.5, head_noise=0.1)  # predicts from the target's hidden states too
# Three heads, each drafting its own depth of a chain (mimo2: llama.cpp picks a head by offset).
CHAINED = replace(GOOD, arch="mimo2", heads=3, claimed_heads=3)
CHAINED_MIXED = replace(MIXED, arch="mimo2", heads=3, claimed_heads=3)


@dataclass(frozen=True)
class Files:
    good: Path
    poor: Path
    mixed: Path
    claims_two: Path
    chained: Path
    chained_mixed: Path
    second_random: Path  # the second of three heads drafts nonsense
    glm_two: Path  # two heads of an architecture whose graph runs one


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    d = tmp_path_factory.mktemp("mtp")
    write = lambda name, spec: write_mtp_model(d / f"{name}.gguf", spec, tiny_vocabulary)  # noqa: E731
    return Files(
        write("good", GOOD),
        write("poor", POOR),
        write("mixed", MIXED),
        write("claims-two", replace(GOOD, claimed_heads=2)),
        write("chained", CHAINED),
        write("chained-mixed", CHAINED_MIXED),
        write("second-random", replace(CHAINED, random_heads=(1,))),
        write("glm-two", replace(GOOD, heads=2, claimed_heads=2)),
    )


BRANCHES = 3


def load(path: Path, n_seq_max: int = 1) -> Model:
    return Model(path, replace(model_options(), mtp=True, n_seq_max=n_seq_max))


def tree_of(target: Model) -> CountingTree:
    assert target.head is not None
    return CountingTree(target.head, BRANCHES)


def generate(engine: SpeculativeEngine, prompt: list[int], mode: str, n: int = 48, draft_max: int = 6):
    # Trees branch wherever a side token is worth 5%.
    config = GenerationConfig(
        max_tokens=n,
        sampling=GREEDY,
        draft_mode=mode,
        draft_max=draft_max,
        drafting=DraftSettings(p_split=0.05),
    )
    return drain(engine.generate(prompt, config))


def test_the_test_models_heads_predict_the_target(files: Files):
    """The model stays meaningful: its heads' greedy drafts are mostly accepted."""
    with load(files.good) as target:
        assert target.head is not None and target.head.heads == 1
        engine = SpeculativeEngine(target, MtpDrafter(target.head), "mtp")
        drafted = accepted = 0
        for text in PROMPTS:
            stats = generate(engine, target.tokenize(text), "fixed").stats
            drafted, accepted = drafted + stats.n_drafted, accepted + stats.n_accepted
        assert drafted > 100 and accepted / drafted > 0.8, (accepted, drafted)


@pytest.mark.parametrize("name", ["good", "poor", "mixed"])
@pytest.mark.parametrize("mode", ["fixed", "auto", "chain"])
def test_greedy_output_with_the_heads_is_the_target_alones(files: Files, name: str, mode: str):
    with load(getattr(files, name)) as target:
        assert target.head is not None
        drafter = MtpDrafter(target.head)
        engine = SpeculativeEngine(
            target, ChainDrafter([NgramDrafter(), drafter]) if mode == "chain" else drafter, mode
        )
        alone = SpeculativeEngine(target, None)
        rejected = 0
        for text in PROMPTS:
            prompt = target.tokenize(text)
            expected = generate(alone, prompt, "fixed").tokens
            done = generate(engine, prompt, "fixed" if mode == "fixed" else "auto")
            assert_greedy_equivalent(target, prompt, expected, done.tokens)
            rejected += done.stats.n_drafted - done.stats.n_accepted
        if name == "poor" and mode == "fixed":
            assert rejected > 20  # rollbacks happened


@pytest.mark.parametrize("name", ["good", "poor", "mixed"])
@pytest.mark.parametrize("mode", ["fixed", "auto"])
def test_greedy_output_with_the_heads_tree_is_the_target_alones(files: Files, name: str, mode: str):
    with load(getattr(files, name), BRANCHES) as target:
        tree = tree_of(target)
        engine, alone = SpeculativeEngine(target, tree, mode), SpeculativeEngine(target, None)
        for text in PROMPTS:
            prompt = target.tokenize(text)
            expected = generate(alone, prompt, "fixed").tokens
            done = generate(engine, prompt, mode)
            assert_greedy_equivalent(target, prompt, expected, done.tokens)
        # Auto keeps trees near a chain where wide passes are dear
        assert tree.branched > (0 if mode == "auto" else 3)


def forced(target: Model, context: list[int], cut: int, depth: int) -> list[np.ndarray]:
    """The heads' logits for context[cut + 1 .. cut + depth], each depth drafted after the true
    tokens before it (the target has evaluated context[:cut])."""
    assert target.head is not None
    target.prefill(context[:cut])
    rows = [target.head.sync(context[: cut + 1]).copy()]
    for token in context[cut + 1 : cut + depth]:
        rows.append(target.head.decode([token], all_logits=False)[0].copy())
    return rows


def test_several_heads_each_draft_their_own_depth(files: Files):
    """With three heads, the k-th token of a chain comes from the k-th head and later ones from the
    last: with the second head drafting nonsense, the second depth alone goes wrong."""
    with load(files.second_random) as target:
        assert target.head is not None and target.head.heads == 3
        right, n = np.zeros(5), 0
        for text in PROMPTS:
            prompt = target.tokenize(text)
            context = [*prompt, *generate(SpeculativeEngine(target, None), prompt, "fixed", n=24).tokens]
            for cut in range(len(prompt), len(context) - 6, 3):
                predicted = [int(np.argmax(row)) for row in forced(target, context, cut, 5)]
                right += np.array(predicted) == np.array(context[cut + 1 : cut + 6])
                n += 1
        share = right / n
        assert share[0] > 0.8 and share[1] < 0.4 and min(share[2:]) > 0.8, share


@pytest.mark.parametrize("name", ["chained", "chained_mixed", "second_random"])
@pytest.mark.parametrize("mode", ["fixed", "auto"])
def test_greedy_output_with_several_heads_is_the_target_alones(
    files: Files, name: str, mode: str, monkeypatch: pytest.MonkeyPatch
):
    # Heads that lag a few tokens are caught up at the next sync: some always do under auto.
    monkeypatch.setattr(MtpHead, "MAX_LAG", 4)
    with load(getattr(files, name)) as target:
        assert target.head is not None and target.head.heads == 3
        engine, alone = (
            SpeculativeEngine(target, MtpDrafter(target.head), "mtp"),
            SpeculativeEngine(target, None),
        )
        drafted = 0
        for text in PROMPTS:
            prompt = target.tokenize(text)
            done = generate(engine, prompt, mode)
            assert_greedy_equivalent(target, prompt, generate(alone, prompt, "fixed").tokens, done.tokens)
            drafted += done.stats.n_drafted
        assert drafted > (40 if mode == "fixed" else 0)


def test_several_heads_caches_follow_the_target_through_rejections(files: Files):
    """After a generation with rejections, every head predicts its depth as a fresh model's does."""
    with load(files.chained_mixed) as target:
        assert target.head is not None
        prompt = target.tokenize(PROMPTS[1])
        done = generate(
            SpeculativeEngine(target, MtpDrafter(target.head), "mtp"), prompt, "fixed", draft_max=4
        )
        assert done.stats.n_accepted < done.stats.n_drafted
        context = [*prompt, *done.tokens]
        cut = len(context) - 4
        target.truncate(cut)
        after = forced(target, context, cut, 3)
    with load(files.chained_mixed) as fresh:
        expected = forced(fresh, context, cut, 3)
    for got, want in zip(after, expected, strict=False):
        assert np.abs(got - want).max() < 1e-3 * np.abs(want).max()


def test_several_heads_of_an_architecture_that_runs_one_are_refused(files: Files):
    """llama.cpp's glm4moe graph aborts the process on a second head: -d mtp says so in one line,
    and by default the target goes without its heads."""
    assert_one_line_error(
        localspec("run", "-m", str(files.glm_two), "-d", "mtp", "-p", "hi", "-n", "4"),
        "runs one MTP head for glm4moe",
    )
    out = json.loads(
        localspec(
            "run", "-m", str(files.glm_two), "-p", PROMPTS[0], "-n", "8", "--temp", "0", "--json"
        ).stdout
    )
    assert out["stats"]["drafter"] == "ngram" and len(out["tokens"]) == 8


def test_under_a_grammar_the_heads_draft_what_the_constrained_target_says(files: Files):
    grammar = "root ::= ([ ]? [a-s] [a-z]*)+"
    with load(files.poor) as target:
        assert target.head is not None
        engine, alone = (
            SpeculativeEngine(target, MtpDrafter(target.head), "mtp"),
            SpeculativeEngine(target, None),
        )
        config = GenerationConfig(
            max_tokens=32, sampling=GREEDY, draft_mode="fixed", draft_max=4, grammar=grammar
        )
        for text in PROMPTS[:2]:
            prompt = target.tokenize(text)
            expected = drain(alone.generate(prompt, config)).tokens
            done = drain(engine.generate(prompt, config))
            assert done.stats.n_accepted > 0
            assert_greedy_equivalent(target, prompt, expected, done.tokens)


@pytest.mark.parametrize("name", ["poor", "mixed"])
@pytest.mark.parametrize("tree", [False, True], ids=["chain", "tree"])
def test_the_heads_cache_follows_the_target_through_rejections(files: Files, name: str, tree: bool):
    """After a generation with rejections, what the head predicts after the context is what a head
    that never drafted predicts: every entry the target verified was remade with its states (after
    a tree, the states of the accepted branch's rows in the target's tree pass)."""
    path = getattr(files, name)
    with load(path, BRANCHES if tree else 1) as target:
        assert target.head is not None
        drafter = tree_of(target) if tree else MtpDrafter(target.head)
        done = generate(
            SpeculativeEngine(target, drafter, "mtp"), target.tokenize(PROMPTS[1]), "fixed", draft_max=4
        )
        assert done.stats.n_accepted < done.stats.n_drafted and (not tree or drafter.branched)
        context = [*target.tokenize(PROMPTS[1]), *done.tokens]
        after = target.head.sync(context).copy()
    with load(path) as fresh:
        assert fresh.head is not None
        fresh.prefill(context[:-1])
        expected = fresh.head.sync(context)
        assert np.abs(after - expected).max() < 1e-3 * np.abs(expected).max()


def test_without_the_targets_states_the_mixed_heads_predict_otherwise(files: Files):
    """The check above can fail: the mixed model's head, handed no states, predicts other logits."""
    with load(files.mixed) as target:
        assert_the_targets_rows_matter(target, target.tokenize(PROMPTS[3]))


def _rows(start: int, n: int) -> np.ndarray:
    return np.arange(start, start + n, dtype=np.float32)[:, None].repeat(2, axis=1)


def test_hidden_rows_are_those_of_the_latest_pass_at_each_position():
    rows = HiddenRows(2)
    rows.put(0, _rows(0, 5))
    rows.put(3, _rows(30, 3))  # the tokens from position 3 on were rejected and evaluated again
    assert rows.take(-1, 6)[:, 0].tolist() == [0, 0, 1, 2, 30, 31, 32]  # position -1: none
    assert rows.take(5, 7)[:, 0].tolist() == [32, 0]  # 6 not evaluated yet
    rows.put(6, _rows(60, 2))
    rows.cut(7)  # a tree pass wrote several sequences from 7 on
    assert rows.take(6, 8)[:, 0].tolist() == [60, 0]


def test_hidden_rows_drop_what_no_later_call_needs():
    rows = HiddenRows(2)
    rows.put(0, _rows(0, 8))
    assert rows.take(-1, 7)[:, 0].tolist() == [0, *range(7)] and rows.first == 0
    rows.release(6)
    assert rows.first == 6 and rows.end == 8
    rows.put(20, _rows(200, 2))  # not next to what is kept: nothing older is
    assert rows.take(5, 22)[:, 0].tolist() == [0] * 15 + [200, 201]


def test_a_target_with_heads_drafts_with_them_by_default(files: Files):
    base = ["run", "-m", str(files.good), "-p", PROMPTS[0], "-n", "24", "--temp", "0", "--json"]
    runs = {d: localspec(*base, *(["-d", d] if d else [])) for d in ("", "mtp", "none")}
    out = {d: json.loads(r.stdout) for d, r in runs.items()}
    assert {d: o["stats"]["drafter"] for d, o in out.items()} == {"": "mtp", "mtp": "mtp", "none": "ngram"}
    assert out[""]["stats"]["n_accepted"] > 0
    assert out[""]["model_files"]["draft"] == "mtp" and out["none"]["model_files"]["draft"] is None
    assert out[""]["tokens"] == out["mtp"]["tokens"] == out["none"]["tokens"]
    chained = json.loads(localspec(*base, "--lookup").stdout)
    assert chained["stats"]["drafter"] == "chain" and chained["tokens"] == out[""]["tokens"]
    tree = json.loads(
        localspec(*base, "--draft-branches", "3", "--draft-p-split", "0.05", "--draft-mode", "fixed").stdout
    )
    assert (
        tree["stats"]["drafter"] == "mtp"
        and tree["stats"]["n_accepted"] > 0
        and tree["tokens"] == out[""]["tokens"]
    )


def test_serve_drafts_with_the_heads_and_answers_what_run_does(files: Files):
    assert_serves_what_run_does(["-m", str(files.good)], PROMPTS[1], "mtp")


def test_bench_runs_the_heads_as_a_mode(files: Files):
    res = localspec(
        "bench", "-m", str(files.good), "--modes", "mtp,fixed-4", "--limit", "1", "-n", "16", "--json"
    )
    assert res.returncode == 0, res.stderr
    result = json.loads(res.stdout)
    summary = {s["mode"]: s for s in result["summary"] if s["category"] == "all"}
    assert set(summary) == {"baseline", "mtp", "fixed-4"} and not result["mismatches"]
    assert summary["fixed-4"]["acceptance_rate"] > 0.8


def test_a_target_without_heads_is_refused_in_one_line(tiny):
    assert_one_line_error(
        localspec("run", "-m", str(tiny.target), "-d", "mtp", "-p", "hi", "-n", "4"),
        "needs a model with MTP heads",
    )


def test_a_header_claiming_more_heads_than_the_file_holds_is_refused(files: Files):
    with pytest.raises(LocalspecError, match="2 MTP heads"):
        head_count(check_gguf(files.claims_two))
    assert_one_line_error(
        localspec("run", "-m", str(files.claims_two), "-p", "hi", "-n", "4"), "inconsistent"
    )


def _info(arch: str, heads: int, blocks: int = 3, held: tuple[int, ...] = (2,)) -> GGUFInfo:
    fields: dict[str, object] = {
        "general.architecture": arch,
        f"{arch}.block_count": blocks,
        f"{arch}.nextn_predict_layers": heads,
    }
    return GGUFInfo(
        Path(f"{arch}.gguf"), fields, [TensorInfo(f"blk.{i}.nextn.eh_proj.weight", 0, 0) for i in held]
    )


def test_heads_are_counted_from_the_tensors_and_the_architecture():
    assert head_count(_info("glm4moe", 1)) == 1 and drafts_itself(_info("glm4moe", 1))
    assert head_count(_info("qwen35", 1, held=())) == 0  # a trunk shipped without its head
    assert not drafts_itself(_info("qwen35", 1, held=()))
    assert head_count(_info("glm4moe", 0)) == 0
    with pytest.raises(LocalspecError, match="3 MTP heads of 3 layers"):
        head_count(_info("glm4moe", 3, held=(0, 1, 2)))
    assert not drafts_itself(_info("glm4moe", 2, blocks=4, held=(2, 3)))  # its graph runs one
    assert drafts_itself(_info("step35", 3, blocks=6, held=(3, 4, 5)))  # its heads are chained
    with pytest.raises(LocalspecError, match="runs one MTP head for qwen35"):
        check_heads(_info("qwen35", 2, blocks=4, held=(2, 3)))
    # GLM-4 (dense) keeps NextN tensors that this llama.cpp never runs.
    assert not drafts_itself(_info("glm4", 1))
    with pytest.raises(LocalspecError, match="no MTP graph for glm4"):
        check_heads(_info("glm4", 1))
