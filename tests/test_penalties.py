"""Repetition penalties: llama.cpp's own sampler's logits, and greedy output under penalties the
target alone's with every drafter."""

from __future__ import annotations

import ctypes
from dataclasses import replace

import llama_cpp
import numpy as np
import pytest
from conftest import TinyModels, model_options

from localspec.backend.model import Model
from localspec.drafters.draft_model import DraftModelDrafter
from localspec.drafters.ngram import NgramDrafter
from localspec.drafters.tree import TreeDrafter
from localspec.engine.events import drain
from localspec.engine.speculative import GenerationConfig, SpeculativeEngine
from localspec.sampling.dist import SamplingParams
from localspec.sampling.penalties import Penalties


def llama_cpps(logits: np.ndarray, history: list[int], p: Penalties) -> np.ndarray:
    sampler = llama_cpp.llama_sampler_init_penalties(len(logits), p.last_n, p.repeat, p.frequency, p.presence)
    for t in history:
        llama_cpp.llama_sampler_accept(sampler, t)
    data = (llama_cpp.llama_token_data * len(logits))(
        *(llama_cpp.llama_token_data(i, float(x), 0.0) for i, x in enumerate(logits))
    )
    array = llama_cpp.llama_token_data_array(data, len(logits), -1, False)
    llama_cpp.llama_sampler_apply(sampler, ctypes.byref(array))
    llama_cpp.llama_sampler_free(sampler)
    out = np.empty(len(logits), dtype=np.float32)
    for i in range(array.size):
        out[array.data[i].id] = array.data[i].logit
    return out


@pytest.mark.parametrize(
    "p",
    [
        Penalties(64, 1.3, 0.0, 0.0),
        Penalties(8, 1.0, 0.5, 0.25),
        Penalties(16, 1.1, -0.4, 0.7),
        Penalties(0, 1.5, 1.0, 1.0),
    ],
)
def test_penalties_are_llama_cpps(p: Penalties):
    rng = np.random.default_rng(3)
    logits = rng.normal(0, 2, 500).astype(np.float32)
    history = rng.integers(0, 60, 100).tolist()
    mine = logits.copy()
    p.apply(mine, history)
    assert np.allclose(mine, llama_cpps(logits, history, p), atol=1e-5)
    assert p.off == (p.last_n == 0) and (p.off or not np.array_equal(mine, logits))


@pytest.fixture(scope="module")
def models(tiny: TinyModels):
    opts = replace(model_options(), n_seq_max=3)
    with Model(tiny.target, opts) as target, Model(tiny.close, opts) as draft:
        yield target, draft


@pytest.mark.parametrize("drafter", ["draft-model", "tree", "lookup"])
def test_greedy_output_under_penalties_is_the_target_alones(models, drafter: str):
    target, draft = models
    made = {
        "draft-model": lambda: DraftModelDrafter(draft, target.n_vocab),
        "tree": lambda: TreeDrafter(draft, 3, target.n_vocab),
        "lookup": NgramDrafter,
    }[drafter]()
    penalties = Penalties(32, 1.2, 0.3, 0.2)
    plain = GenerationConfig(
        max_tokens=40, sampling=SamplingParams(temperature=0.0), draft_mode="fixed", draft_max=4
    )
    penalised = replace(plain, sampling=replace(plain.sampling, penalties=penalties))
    alone, engine = SpeculativeEngine(target, None), SpeculativeEngine(target, made, drafter)
    changed = drafted = 0
    for prompt in (
        "the cat sat on the mat. the cat sat on the mat. the cat",
        "a dog ran to the house",
        "moon",
    ):
        tokens = target.tokenize(prompt)
        want = drain(alone.generate(tokens, penalised))
        got = drain(engine.generate(tokens, penalised))
        assert got.tokens == want.tokens
        changed += want.tokens != drain(alone.generate(tokens, plain)).tokens
        drafted += got.stats.n_drafted
    assert changed and drafted  # the penalties change the text, and drafts were verified under them
