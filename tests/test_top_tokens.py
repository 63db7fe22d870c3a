"""Greedy argmaxes taken inside llama.cpp's graph (backend/top_tokens.py). The device is the GPU
where users have one; here the CPU stands in for it (the same sampler, ggml's own argmax), so
every path that reads top tokens instead of logits runs, and must give what logits give."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from conftest import TinyModels, model_options

import localspec.backend.model as model_module
from localspec.backend.model import Model
from localspec.backend.top_tokens import TopTokens
from localspec.drafters.base import Draft
from localspec.drafters.draft_model import DraftModelDrafter
from localspec.engine.events import drain
from localspec.engine.speculative import GenerationConfig, SpeculativeEngine
from localspec.engine.verdicts import verify
from localspec.sampling.dist import SamplingParams
from localspec.sampling.penalties import Penalties

GREEDY = SamplingParams(temperature=0.0)
PROMPTS = ["the cat sat on the mat", "a big red dog ran to the house"]


@pytest.fixture(scope="module")
def on_device():
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Model, "_output_offloaded", lambda self: True)
        yield


@pytest.fixture(scope="module")
def pair(on_device, tiny: TinyModels):
    with Model(tiny.target, model_options()) as target, Model(tiny.close, model_options()) as draft:
        assert target.argmax is not None and draft.argmax is not None
        yield target, draft


@pytest.fixture(scope="module")
def host_target(tiny: TinyModels):
    with Model(tiny.target, replace(model_options(), device_argmax=False)) as target:
        assert target.argmax is None
        yield target


def test_without_a_gpu_the_host_takes_argmaxes(tiny: TinyModels):
    with Model(tiny.target, model_options()) as target:
        assert target.argmax is None  # ggml's argmax on a CPU is slower than numpy's


def _tokens(engine: SpeculativeEngine, prompt: str, **config: object) -> list[int]:
    return drain(
        engine.generate(engine.target.tokenize(prompt), GenerationConfig(max_tokens=64, **config))
    ).tokens


@pytest.fixture(scope="module")
def baselines(host_target: Model) -> dict[str, list[int]]:
    engine = SpeculativeEngine(host_target, None)
    return {p: _tokens(engine, p, sampling=GREEDY, draft_mode="fixed") for p in PROMPTS}


def test_the_target_alone_reads_top_tokens_and_emits_what_logits_give(pair, baselines):
    target, _ = pair
    engine = SpeculativeEngine(target, None)
    for prompt, expected in baselines.items():
        assert _tokens(engine, prompt, sampling=GREEDY, draft_mode="fixed") == expected
    assert target.argmax.on


@pytest.mark.parametrize("draft_max", [1, 3, 8])
def test_a_fixed_greedy_draft_reads_top_tokens_on_both_models(pair, baselines, draft_max):
    target, draft = pair
    engine = SpeculativeEngine(target, DraftModelDrafter(draft, target.n_vocab), "draft-model")
    for prompt, expected in baselines.items():
        out = drain(
            engine.generate(
                target.tokenize(prompt),
                GenerationConfig(max_tokens=64, sampling=GREEDY, draft_max=draft_max, draft_mode="fixed"),
            )
        )
        assert out.tokens == expected
        assert out.stats.n_accepted > 0
    assert target.argmax.on and draft.argmax.on


def test_auto_reads_the_drafts_logits_for_its_confidences(pair, baselines):
    target, draft = pair
    engine = SpeculativeEngine(target, DraftModelDrafter(draft, target.n_vocab), "draft-model")
    for prompt, expected in baselines.items():
        assert _tokens(engine, prompt, sampling=GREEDY, draft_mode="auto") == expected
    assert target.argmax.on and not draft.argmax.on


def test_what_needs_logits_gets_them_after_a_greedy_generation(pair, host_target):
    target, draft = pair
    engine = SpeculativeEngine(target, DraftModelDrafter(draft, target.n_vocab), "draft-model")
    host = SpeculativeEngine(host_target, None)
    warm = SamplingParams(temperature=0.8)
    for prompt in PROMPTS:
        _tokens(engine, prompt, sampling=GREEDY, draft_mode="fixed")
        # Sampling, penalties: the same draws as a target that never left logits.
        assert _tokens(engine, prompt, sampling=warm, seed=3, draft_mode="off") == _tokens(
            host, prompt, sampling=warm, seed=3, draft_mode="off"
        )
        penalised = SamplingParams(temperature=0.0, penalties=Penalties(repeat=1.3))
        assert _tokens(engine, prompt, sampling=penalised, draft_mode="off") == _tokens(
            host, prompt, sampling=penalised, draft_mode="off"
        )
        assert not target.argmax.on
    # A caller outside the engine (bench's tie check) reads logits by default.
    _tokens(engine, PROMPTS[0], sampling=GREEDY, draft_mode="fixed")
    target.truncate(0)
    rows = target.decode(target.tokenize(PROMPTS[0]), all_logits=True)
    assert not isinstance(rows, TopTokens) and rows.shape[1] == target.n_vocab
    assert np.isfinite(rows).all()


def test_a_draft_with_ids_the_target_lacks_keeps_to_logits(on_device, tiny: TinyModels, baselines):
    with Model(tiny.target, model_options()) as target, Model(tiny.padded_close, model_options()) as draft:
        engine = SpeculativeEngine(target, DraftModelDrafter(draft, target.n_vocab), "draft-model")
        for prompt, expected in baselines.items():
            assert _tokens(engine, prompt, sampling=GREEDY, draft_max=4, draft_mode="fixed") == expected
        assert target.argmax.on and not draft.argmax.on


def test_a_refused_batch_gives_the_device_argmax_up_and_decodes_on_logits(
    on_device, tiny: TinyModels, baselines, monkeypatch
):
    real = model_module.decode_synced
    refused = []

    def refuse_once(ctx, batch):
        if not refused:
            refused.append(True)
            return -1, 0.0
        return real(ctx, batch)

    with Model(tiny.target, model_options()) as target:
        engine = SpeculativeEngine(target, None)
        _tokens(engine, "warm up", sampling=GREEDY, draft_mode="fixed")
        assert target.argmax.on
        monkeypatch.setattr(model_module, "decode_synced", refuse_once)
        prompt, expected = next(iter(baselines.items()))
        assert _tokens(engine, prompt, sampling=GREEDY, draft_mode="fixed") == expected
        assert refused and target.argmax is None


def test_greedy_verification_judges_each_row_by_its_lowest_top_id_from_logits_or_top_tokens():
    """verify() takes every row's top in one call: the same verdicts as a row-by-row argmax, ties
    to the lowest id, the target's own token at the first rejection or after the last draft."""
    rng = np.random.default_rng(3)
    for _trial in range(200):
        k = int(rng.integers(0, 6))
        logits = rng.integers(0, 3, (k + 1, 12)).astype(np.float32)  # many ties
        tops = [int(np.argmax(row)) for row in logits]
        drafted = [t if rng.random() < 0.7 else (t + 1) % 12 for t in tops[:k]]
        n = next((i for i in range(k) if drafted[i] != tops[i]), k)
        draft = Draft(tokens=drafted)
        assert verify(logits, draft, GREEDY, rng) == (n, tops[n])
        on_device = np.array(tops, dtype=np.int32)[:, None].view(TopTokens)
        assert verify(on_device, draft, GREEDY, rng) == (n, tops[n])
