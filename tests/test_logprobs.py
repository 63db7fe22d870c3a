"""The target's log-probabilities of what it emitted: the same whether a token came from an accepted
draft, a rejection's correction or the target alone, and equal to a reference computed from the
target's own one-token passes."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from conftest import TinyModels, model_options

from localspec.backend.model import Model
from localspec.drafters.draft_model import DraftModelDrafter
from localspec.drafters.tree import TreeDrafter
from localspec.engine.events import TokenEvent
from localspec.engine.speculative import GenerationConfig, SpeculativeEngine
from localspec.sampling.dist import SamplingParams, distribution

PROMPT = "the cat sat on the mat"
TOP = 3
# A verification pass is batched (a tree's over several sequences) and rounds differently from
# one-token passes: 2e-4 apart on chains here, up to 4e-3 on trees; llama.cpp's own bound is ~1e-2.
TOLERANCE = 1e-2
SAMPLED = SamplingParams(temperature=0.8, top_k=20, top_p=0.95, min_p=0.05)


def reference(
    target: Model, prompt: list[int], tokens: list[int], params: SamplingParams
) -> list[np.ndarray]:
    """The log-probabilities over the vocabulary before each token, from one-token passes of the
    target alone."""
    target.resume([])
    target.prefill(prompt[:-1])
    out, last = [], prompt[-1]
    for tok in tokens:
        logits = np.asarray(target.decode([last], all_logits=False)[0], dtype=np.float64)  # type: ignore[index]
        if params.greedy:
            out.append(logits - logits.max() - np.log(np.exp(logits - logits.max()).sum()))
        else:
            with np.errstate(divide="ignore"):
                out.append(np.log(distribution(logits, params)))
        last = tok
    return out


@pytest.mark.parametrize("params", [SamplingParams(temperature=0.0), SAMPLED], ids=["greedy", "sampled"])
def test_logprobs_are_the_targets_own_whoever_proposed_the_token(tiny: TinyModels, params: SamplingParams):
    options = replace(model_options(), n_seq_max=3)
    config = GenerationConfig(
        max_tokens=40, sampling=params, seed=5, draft_mode="fixed", draft_max=5, logprobs=TOP
    )
    with (
        Model(tiny.target, options) as target,
        Model(tiny.close, options) as close,
        Model(tiny.poor, options) as poor,
    ):
        prompt = target.tokenize(PROMPT)
        engines = {
            "alone": SpeculativeEngine(target, None),
            "close": SpeculativeEngine(target, DraftModelDrafter(close), "draft-model"),
            "poor": SpeculativeEngine(target, DraftModelDrafter(poor), "draft-model"),
            "tree": SpeculativeEngine(target, TreeDrafter(close, 3), "tree"),
        }
        sources, apart = set(), {}
        for name, engine in engines.items():
            events = [e for e in engine.generate(prompt, config) if isinstance(e, TokenEvent)]
            for ev, logp in zip(
                events, reference(target, prompt, [e.token for e in events], params), strict=True
            ):
                # At temp > 0 only tokens the sampler could draw: top-p and min-p may leave fewer.
                assert ev.logprob is not None and len(ev.logprob.top) == min(
                    TOP, int(np.isfinite(logp).sum())
                )
                top_ids, top_lps = [t for t, _ in ev.logprob.top], [lp for _, lp in ev.logprob.top]
                assert top_lps == sorted(top_lps, reverse=True) and set(top_ids) <= set(
                    np.argsort(-logp)[: TOP + 2]
                )
                apart[name] = max(
                    apart.get(name, 0.0),
                    abs(ev.logprob.logprob - logp[ev.token]),
                    *np.abs(np.array(top_lps) - logp[top_ids]),
                )
                sources.add(ev.source is None)
        assert max(apart.values()) < TOLERANCE, apart
        assert sources == {True, False}  # drafted tokens and the target's own both checked


def test_no_logprobs_unless_asked(tiny: TinyModels):
    with Model(tiny.target, model_options()) as target:
        config = GenerationConfig(max_tokens=6, sampling=SamplingParams(temperature=0.0))
        events = [
            e
            for e in SpeculativeEngine(target, None).generate(target.tokenize(PROMPT), config)
            if isinstance(e, TokenEvent)
        ]
        assert events and all(e.logprob is None for e in events)
