"""Grammars: the constrained logits equal a whole-vocabulary mask wherever a sampler can look, and
greedy output under a grammar is the constrained target alone's, with every drafter."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from cli_helpers import assert_one_line_error, localspec
from conftest import TinyModels, model_options

from localspec.backend.grammar import Grammar, gbnf_problem, schema_grammar
from localspec.backend.model import Model
from localspec.drafters.chain import ChainDrafter
from localspec.drafters.draft_model import DraftModelDrafter
from localspec.drafters.ngram import NgramDrafter
from localspec.drafters.tree import TreeDrafter
from localspec.engine.budgets import FixedBudget
from localspec.engine.events import drain
from localspec.engine.speculative import GenerationConfig, SpeculativeEngine
from localspec.errors import LocalspecError
from localspec.sampling.constrain import constrained
from localspec.sampling.dist import SamplingParams, final_dist

GREEDY = SamplingParams(temperature=0.0)
# Words of the tiny vocabulary, each a token, separated by spaces: a sentence of three to six.
WORDS_GBNF = (
    'root ::= word (word)? (word)? (word)? (word)? (word)?\nword ::= " the" | " cat" | " sat" | " '
    'on" | " mat" | " dog" | " ran"'
)

PARAMS = [
    GREEDY,
    SamplingParams(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05),
    SamplingParams(temperature=1.0, top_k=3, top_p=1.0, min_p=0.0),
    SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.1),
    SamplingParams(temperature=0.7, top_k=0, top_p=0.9, min_p=0.0),
    SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0),
]


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: f"t{p.temperature}-k{p.top_k}-p{p.top_p}-m{p.min_p}")
@pytest.mark.parametrize("share", [0.9, 0.01, 0.0002])
def test_constrained_logits_sample_as_a_whole_mask_does(params: SamplingParams, share: float):
    rng = np.random.default_rng(7)
    vocab = 50_000
    asked: list[int] = []
    for _ in range(5):
        logits = rng.normal(0, 3, vocab).astype(np.float32)
        allowed_set = rng.random(vocab) < share
        allowed_set[rng.integers(vocab)] = True

        def allowed(ids: np.ndarray, allowed_set: np.ndarray = allowed_set) -> np.ndarray:
            asked.append(len(ids))
            return allowed_set[ids]

        whole = np.where(allowed_set, logits, -np.inf).astype(np.float32)
        got = constrained(logits, params, allowed)
        if params.greedy:
            assert int(np.argmax(got)) == int(np.argmax(whole))
            continue
        want, have = final_dist(whole, params), final_dist(got, params)
        assert np.array_equal(want.support(), have.support())
        assert np.allclose(want.at_many(want.support()), have.at_many(want.support()), atol=1e-9)
    if share == 0.9 and (params.greedy or params.top_k > 0 or params.min_p > 0 and params.top_p == 1.0):
        assert max(asked) < vocab  # the likeliest tokens sufficed: the grammar never saw the whole vocabulary


@pytest.mark.parametrize("params", PARAMS[1:4], ids=lambda p: f"k{p.top_k}-p{p.top_p}-m{p.min_p}")
def test_a_few_likely_allowed_tokens_spare_asking_of_the_whole_vocabulary(params: SamplingParams):
    """As at a JSON key or brace: the few tokens allowed are among the likeliest, the others allowed
    (fewer than top-k) far below, so no mass they could add moves the nucleus or min-p's cut."""
    rng = np.random.default_rng(11)
    vocab, asked = 50_000, []
    logits = rng.normal(0, 3, vocab).astype(np.float32)
    allowed_set = np.zeros(vocab, dtype=bool)
    likely = rng.choice(vocab, 5, replace=False)
    logits[likely] = logits.max() + rng.random(5).astype(np.float32)
    allowed_set[likely] = True
    allowed_set[rng.choice(vocab, 10, replace=False)] = True

    def allowed(ids: np.ndarray) -> np.ndarray:
        asked.append(len(ids))
        return allowed_set[ids]

    got = constrained(logits, params, allowed)
    want = final_dist(np.where(allowed_set, logits, -np.inf).astype(np.float32), params)
    assert np.array_equal(final_dist(got, params).support(), want.support())
    assert max(asked) < vocab


def test_a_grammar_that_allows_nothing_is_an_error():
    with pytest.raises(LocalspecError, match="allows no token"):
        constrained(np.zeros(100, dtype=np.float32), GREEDY, lambda ids: np.zeros(len(ids), dtype=bool))


def test_grammars_and_schemas_that_cannot_be_used_say_why():
    assert gbnf_problem('root ::= "a"') is None
    assert "expecting" in (gbnf_problem("root ::= (") or "")
    assert "no rule named root" in (gbnf_problem('start ::= "a"') or "")
    assert "Undefined rule" in (gbnf_problem('root ::= "a" missing') or "")
    assert "root ::=" in schema_grammar('{"type": "object", "properties": {"a": {"type": "integer"}}}')
    for text, fragment in (
        ("{nope", "is not JSON"),
        ("[1]", "must be a JSON object"),
        ('{"type": "bogus"}', "cannot be turned into a grammar"),
    ):
        with pytest.raises(ValueError, match=fragment):
            schema_grammar(text)


@pytest.fixture(scope="module")
def models(tiny: TinyModels):
    from dataclasses import replace

    opts = replace(model_options(), n_seq_max=3)
    with Model(tiny.target, opts) as target, Model(tiny.close, opts) as draft:
        yield target, draft


def test_the_grammar_allows_and_advances_as_llama_cpp_does(models):
    target, _ = models
    grammar = Grammar.compile(target.vocab, WORDS_GBNF)
    ids = np.arange(target.n_vocab, dtype=np.int32)
    the, cat = (next(int(t) for t in ids if target.piece(int(t)) == word) for word in (b" the", b" cat"))
    first = set(ids[grammar.allowed(ids)].tolist())
    assert {the, cat} <= first and not any(target.is_eog(t) for t in first)
    copy = grammar.clone()
    for _ in range(3):
        copy.accept(the)
    assert any(target.is_eog(int(t)) for t in ids[copy.allowed(ids)])  # three words: it may end
    assert not any(target.is_eog(int(t)) for t in ids[grammar.allowed(ids)])  # the original stayed
    copy.close()
    grammar.close()
    with pytest.raises(LocalspecError, match="GBNF"):
        Grammar.compile(target.vocab, "root ::= (")


@pytest.mark.parametrize("drafter", ["none", "draft-model", "tree", "chain", "lookup"])
def test_greedy_output_under_a_grammar_is_the_constrained_target_alones(models, drafter: str):
    target, draft = models
    made = {
        "none": lambda: None,
        "draft-model": lambda: DraftModelDrafter(draft, target.n_vocab),
        "tree": lambda: TreeDrafter(draft, 3, target.n_vocab),
        "chain": lambda: ChainDrafter([NgramDrafter(), DraftModelDrafter(draft, target.n_vocab)]),
        "lookup": NgramDrafter,
    }[drafter]()
    config = GenerationConfig(
        max_tokens=12, sampling=GREEDY, draft_mode="fixed", grammar=WORDS_GBNF, draft_max=4
    )
    alone = SpeculativeEngine(target, None)
    engine = SpeculativeEngine(target, made, drafter)
    drafted = 0
    for prompt in ("the cat sat on the mat. the cat sat on", "a dog ran", "moon"):
        tokens = target.tokenize(prompt)
        want = drain(alone.generate(tokens, config))
        got = drain(engine.generate(tokens, config))
        assert got.tokens == want.tokens
        assert re.fullmatch(r"( (the|cat|sat|on|mat|dog|ran)){1,6}", got.text), got.text
        drafted += got.stats.n_drafted
    assert drafter == "none" or drafted > 0


def test_a_draft_ends_at_the_end_of_generation(models):
    """Once the grammar's text is complete it allows only an end of generation: the draft proposes
    it and stops (the target ends there; every token drafted after it was a draft pass for nothing)."""
    target, draft = models
    grammar = Grammar.compile(target.vocab, 'root ::= " the cat"')
    prompt = target.tokenize("the cat sat on the mat. the cat sat on")
    proposal = DraftModelDrafter(draft, target.n_vocab)
    proposal.begin(prompt, proposal.settings)
    out = proposal.propose(prompt, FixedBudget(16), GREEDY, np.random.default_rng(0), grammar)
    grammar.close()
    assert b"".join(target.piece(t) for t in out.tokens) == b" the cat", out.tokens
    assert [t for t in out.tokens if target.is_eog(t)] == [out.tokens[-1]], out.tokens  # one, and last


def test_sampled_output_under_a_grammar_matches_it(models):
    target, draft = models
    engine = SpeculativeEngine(target, DraftModelDrafter(draft, target.n_vocab), "draft-model")
    for seed in range(20):
        config = GenerationConfig(
            max_tokens=12,
            sampling=SamplingParams(temperature=1.0, top_k=0),
            seed=seed,
            draft_mode="fixed",
            grammar=WORDS_GBNF,
        )
        done = drain(engine.generate(target.tokenize("the cat"), config))
        assert re.fullmatch(r"( (the|cat|sat|on|mat|dog|ran)){1,6}", done.text), done.text


def test_a_schemas_strings_hold_no_raw_control_characters(models):
    target, _ = models
    grammar = Grammar.compile(
        target.vocab, schema_grammar('{"type": "object", "properties": {"a": {"type": "string"}}}')
    )
    byte = {target.piece(t): t for t in range(target.n_vocab) if len(target.piece(t)) == 1}
    for ch in (b"{", b'"'):
        grammar.accept(byte[ch])
    inside = grammar.allowed(np.array([byte[b"a"], byte[b"\t"], byte[b"\n"]], dtype=np.int32))
    assert inside.tolist() == [True, False, False]
    grammar.close()


def test_run_takes_a_grammar_file_and_says_in_one_line_what_is_wrong_with_one(tiny: TinyModels, tmp_path):
    gbnf = tmp_path / "words.gbnf"
    gbnf.write_text(WORDS_GBNF)
    res = localspec(
        "run",
        "-m",
        str(tiny.target),
        "-d",
        str(tiny.close),
        "-p",
        "the cat",
        "-n",
        "12",
        "--temp",
        "0",
        "--grammar",
        str(gbnf),
        "--json",
    )
    assert res.returncode == 0, res.stderr
    assert re.fullmatch(r"( (the|cat|sat|on|mat|dog|ran)){1,6}", json.loads(res.stdout)["text"])
    (tmp_path / "bad.gbnf").write_text("root ::= (")
    (tmp_path / "bad.json").write_text('{"type": "bogus"}')
    for flag, path, fragment in (
        ("--grammar", tmp_path / "missing.gbnf", "--grammar cannot read"),
        (
            "--grammar",
            tmp_path / "bad.gbnf",
            "--grammar is not a GBNF grammar llama.cpp parses: expecting ')'",
        ),
        ("--json-schema", tmp_path / "bad.json", "--json-schema cannot be turned into a grammar"),
    ):
        res = localspec("run", "-m", str(tiny.target), "-p", "the cat", "-n", "4", flag, str(path))
        assert res.returncode != 0
        assert_one_line_error(res, fragment)
