"""Losslessness on tiny random-weight models: greedy equality, rollback, sampling distribution."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
from conftest import TinyModels, model_options

from localspec.backend.model import Model
from localspec.drafters.base import DraftSettings
from localspec.drafters.draft_model import DraftModelDrafter
from localspec.drafters.ngram import NgramDrafter
from localspec.engine.budgets import FixedBudget
from localspec.engine.clock import SimulatedClock
from localspec.engine.events import DoneEvent, StepEvent, TokenEvent, drain
from localspec.engine.speculative import GenerationConfig, SpeculativeEngine
from localspec.errors import LocalspecError
from localspec.sampling.dist import SamplingParams

GREEDY = SamplingParams(temperature=0.0)
PROMPTS = ["the cat sat on the mat", "a big red dog ran to the house", "moon"]
P_VALUE_FLOOR = 1e-3


@pytest.fixture(scope="module")
def target(tiny: TinyModels):
    with Model(tiny.target, model_options()) as m:
        yield m


@pytest.fixture(scope="module", params=["close", "poor"])
def draft_engine(request, tiny: TinyModels, target: Model):
    with Model(getattr(tiny, request.param), model_options()) as d:
        yield request.param, SpeculativeEngine(target, DraftModelDrafter(d), "draft-model")


@pytest.fixture(scope="module")
def baselines(target: Model) -> dict[str, list[int]]:
    engine = SpeculativeEngine(target, None)
    config = GenerationConfig(max_tokens=96, sampling=GREEDY, draft_mode="fixed")
    return {p: drain(engine.generate(target.tokenize(p), config)).tokens for p in PROMPTS}


@pytest.mark.parametrize("draft_max", range(1, 9))
def test_greedy_draft_model_output_is_identical(draft_engine, target, baselines, draft_max):
    name, engine = draft_engine
    config = GenerationConfig(max_tokens=96, sampling=GREEDY, draft_max=draft_max, draft_mode="fixed")
    rejected_steps = 0
    for prompt, expected in baselines.items():
        prompt_tokens = target.tokenize(prompt)
        events = list(engine.generate(prompt_tokens, config))
        done = events[-1]
        assert isinstance(done, DoneEvent)
        # Tiny models have wide logit margins: equality is exact, with no tie allowance.
        assert done.tokens == expected
        steps = [e for e in events if isinstance(e, StepEvent)]
        rejected_steps += sum(1 for s in steps if s.accepted < s.drafted)
        # After the last rollback the target cache holds exactly the context minus the pending token.
        assert target.cached == [*prompt_tokens, *done.tokens[:-1]][: len(target.cached)]
        assert done.stats.n_drafted > 0
    if name == "poor":
        assert rejected_steps > 20, "the poor draft must exercise many rollbacks"


def test_acceptance_is_high_for_close_and_low_for_poor_draft(tiny, target):
    rates = {}
    for name in ("close", "poor"):
        with Model(getattr(tiny, name), model_options()) as d:
            engine = SpeculativeEngine(target, DraftModelDrafter(d), "draft-model")
            done = drain(
                engine.generate(
                    target.tokenize(PROMPTS[0]),
                    GenerationConfig(max_tokens=96, sampling=GREEDY, draft_max=4, draft_mode="fixed"),
                )
            )
            rates[name] = done.stats.acceptance_rate
    assert rates["close"] > 0.6
    assert rates["poor"] < rates["close"]


def test_greedy_ngram_output_is_identical(target, baselines):
    engine = SpeculativeEngine(target, NgramDrafter(), "ngram")
    lookup = DraftSettings(lookup_min=1, lookup_max=3)
    for draft_max in (1, 3, 8):
        for prompt, expected in baselines.items():
            config = GenerationConfig(
                max_tokens=96, sampling=GREEDY, draft_max=draft_max, drafting=lookup, draft_mode="fixed"
            )
            done = drain(engine.generate(target.tokenize(prompt), config))
            assert done.tokens == expected
            assert set(done.stats.drafters) <= {"ngram"}


def test_token_events_report_their_source_and_stats_add_up(tiny, target):
    with Model(tiny.close, model_options()) as d:
        engine = SpeculativeEngine(target, DraftModelDrafter(d), "draft-model")
        events = list(
            engine.generate(
                target.tokenize(PROMPTS[1]),
                GenerationConfig(max_tokens=50, sampling=GREEDY, draft_max=5, draft_mode="fixed"),
            )
        )
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    steps = [e for e in events if isinstance(e, StepEvent)]
    done = events[-1]
    assert len(tokens) == done.stats.n_generated == len(done.tokens) == 50
    assert sum(1 for t in tokens if t.source == "draft-model") <= done.stats.n_accepted
    assert sum(s.accepted for s in steps) == done.stats.n_accepted
    assert sum(s.drafted for s in steps) == done.stats.n_drafted
    assert done.stats.drafters["draft-model"].accepted == done.stats.n_accepted
    assert done.stats.n_steps == len(steps) < 50
    assert "".join(t.text for t in tokens) + done.tail == done.text


@pytest.mark.parametrize("mode", ["fixed", "auto"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_draft_min_drafts_that_many_before_p_min_or_auto_may_stop(tiny, target, mode, temperature):
    from cost_tables import clock

    # Verification so dear that auto alone would not draft past the first token.
    dear = clock({b: 1.0 + 2.0 * (b - 1) for b in (1, 2, 4, 8)}, per_pass=0.5)
    with Model(tiny.close, model_options()) as d:
        # With p-min near 1 every draft would stop at once; draft-min 3 drafts three tokens anyway.
        engine = SpeculativeEngine(target, DraftModelDrafter(d), "draft-model", dear)
        config = GenerationConfig(
            max_tokens=40,
            sampling=SamplingParams(temperature=temperature),
            seed=3,
            draft_max=8,
            draft_min=3,
            draft_mode=mode,
            drafting=DraftSettings(p_min=0.9999),
        )
        events = list(engine.generate(target.tokenize(PROMPTS[0]), config))
    # A step drafts three tokens or none (auto may decide drafting does not pay; -n leaves no room).
    steps = [e for e in events if isinstance(e, StepEvent)]
    # A fresh auto engine times the target alone first
    assert steps[0].drafted == (0 if mode == "auto" else 3)
    assert any(s.drafted == 3 for s in steps)
    generated = 0
    for step in steps:
        room = 40 - generated - 1  # draft tokens that fit before -n
        assert step.drafted in ((0, 3) if mode == "auto" and room >= 3 else (3,) if room >= 3 else (0,)), (
            generated,
            step,
        )
        generated += step.emitted


def test_a_fixed_greedy_draft_reads_only_its_argmax_and_proposes_the_same(tiny: TinyModels, target: Model):
    """At a fixed length the draft's confidence decides nothing (unless --draft-p-min asks for it):
    it is not computed, and the proposal is the one a calibrating budget gets."""
    prompt = target.tokenize(PROMPTS[1])
    with Model(tiny.close, model_options()) as d:
        drafter = DraftModelDrafter(d)
        drafts = {}
        for name, budget in (("fixed", FixedBudget(6)), ("calibrating", FixedBudget(6, calibrates=True))):
            drafter.begin(prompt, DraftSettings())
            drafts[name] = drafter.propose(prompt, budget, GREEDY, np.random.default_rng(0))
        drafter.begin(prompt, DraftSettings(p_min=0.5))
        p_min = drafter.propose(prompt, FixedBudget(6), GREEDY, np.random.default_rng(0))
    assert drafts["fixed"].confidences is None and len(drafts["calibrating"].confidences) == 6
    assert drafts["fixed"].tokens == drafts["calibrating"].tokens and len(drafts["fixed"].tokens) == 6
    assert p_min.confidences is not None and all(c >= 0.5 for c in p_min.confidences)


def test_draft_min_drops_a_short_lookup_match(target):
    # The last token occurred once before, two from the end: its continuation has two tokens.
    prompt = [1, 300, 301, 300]
    unigrams = DraftSettings(lookup_min=1, lookup_max=1)
    lookup = NgramDrafter()
    lookup.begin(prompt, unigrams)
    draft = lookup.propose(prompt, FixedBudget(4), GREEDY, np.random.default_rng(0))
    assert 0 < len(draft.tokens) < 3
    engine = SpeculativeEngine(target, lookup, "ngram")
    config = GenerationConfig(
        max_tokens=8, sampling=GREEDY, draft_max=4, draft_min=3, drafting=unigrams, draft_mode="fixed"
    )
    events = list(engine.generate(prompt, config))
    assert [e.drafted for e in events if isinstance(e, StepEvent)][0] == 0


def test_seed_makes_sampling_reproducible(tiny, target):
    with Model(tiny.poor, model_options()) as d:
        engine = SpeculativeEngine(target, DraftModelDrafter(d), "draft-model")
        config = GenerationConfig(
            max_tokens=40,
            sampling=SamplingParams(temperature=1.0),
            seed=1234,
            draft_max=4,
            draft_mode="fixed",
        )
        prompt = target.tokenize(PROMPTS[0])
        first = drain(engine.generate(prompt, config)).tokens
        assert drain(engine.generate(prompt, config)).tokens == first
        other = GenerationConfig(
            max_tokens=40, sampling=SamplingParams(temperature=1.0), seed=99, draft_max=4, draft_mode="fixed"
        )
        assert drain(engine.generate(prompt, other)).tokens != first


def test_prompt_longer_than_context_is_refused(tiny):
    with Model(tiny.target, model_options(n_ctx=256)) as m:  # llama.cpp's smallest context
        engine = SpeculativeEngine(m, None)
        with pytest.raises(LocalspecError, match="longer than the context"):
            drain(
                engine.generate(
                    m.tokenize("the cat sat on the mat " * 12), GenerationConfig(draft_mode="fixed")
                )
            )


def test_generation_stops_when_context_is_full(tiny):
    with Model(tiny.target, model_options(n_ctx=256)) as m, Model(tiny.close, model_options(n_ctx=256)) as d:
        engine = SpeculativeEngine(m, DraftModelDrafter(d), "draft-model")
        prompt = m.tokenize("moon")
        done = drain(
            engine.generate(
                prompt, GenerationConfig(max_tokens=500, sampling=GREEDY, draft_max=8, draft_mode="fixed")
            )
        )
    assert done.stop_reason == "length"
    assert len(prompt) + len(done.tokens) == 257  # every position used, plus the token never evaluated


def test_cancel_stops_generation(tiny, target):
    import threading

    cancel = threading.Event()
    engine = SpeculativeEngine(target, None)
    events = engine.generate(
        target.tokenize(PROMPTS[0]),
        GenerationConfig(max_tokens=500, sampling=GREEDY, draft_mode="fixed"),
        cancel,
    )
    seen = 0
    done = None
    for ev in events:
        if isinstance(ev, TokenEvent):
            seen += 1
            if seen == 5:
                cancel.set()
        if isinstance(ev, DoneEvent):
            done = ev
    assert done is not None and done.stop_reason == "interrupted"
    assert done.stats.n_generated == seen == 5


def test_cancel_stops_a_long_pass_midway_and_leaves_the_cache_exact(tiny):
    import threading

    from localspec.backend.model import ABORTABLE_BATCH, DecodeAborted

    cancel = threading.Event()
    with Model(tiny.target, model_options(), cancel) as m:
        m.decode([5, 6, 7], all_logits=False)
        cancel.set()
        with pytest.raises(DecodeAborted):
            m.decode([8] * ABORTABLE_BATCH, all_logits=False)  # a prompt-sized pass stops at once
        assert m.cached == [5, 6, 7]
        # A generation-sized pass finishes: the loop checks the event between passes instead.
        assert m.decode([8, 9], all_logits=True) is not None and m.cached == [5, 6, 7, 8, 9]


def test_auto_mode_is_lossless_and_drafts_less_when_drafts_fail(tiny, target, baselines):
    from cost_tables import clock

    drafted = {}
    for name in ("close", "poor"):
        with Model(getattr(tiny, name), model_options()) as d:
            cpu_like = clock({b: 1.0 + 0.3 * (b - 1) for b in (1, 2, 4, 8, 16)}, per_pass=0.15)
            engine = SpeculativeEngine(target, DraftModelDrafter(d), "draft-model", cpu_like)
            config = GenerationConfig(max_tokens=96, sampling=GREEDY, draft_max=8, draft_mode="auto")
            total = 0
            for prompt, expected in baselines.items():
                done = drain(engine.generate(target.tokenize(prompt), config))
                assert done.tokens == expected
                total += done.stats.n_drafted / done.stats.n_steps
            drafted[name] = total
    assert drafted["poor"] < drafted["close"]


def test_draft_tokens_past_the_end_count_as_neither_accepted_nor_generated(tiny, target):
    prompt = target.tokenize(PROMPTS[0])
    text = drain(
        SpeculativeEngine(target, None).generate(
            prompt, GenerationConfig(max_tokens=60, sampling=GREEDY, draft_mode="fixed")
        )
    ).text
    with Model(tiny.close, model_options()) as d:
        engine = SpeculativeEngine(target, DraftModelDrafter(d), "draft-model")
        for cut in range(10, 50, 3):  # stop strings that end generation in the middle of a step
            config = GenerationConfig(
                max_tokens=60, sampling=GREEDY, draft_max=8, draft_mode="fixed", stop=(text[cut : cut + 3],)
            )
            events = list(engine.generate(prompt, config))
            done = events[-1]
            s = done.stats
            assert s.n_generated == len(done.tokens)
            assert s.n_accepted <= s.n_generated and s.n_accepted <= s.n_drafted
            drafted_tokens = sum(1 for e in events if isinstance(e, TokenEvent) and e.source)
            assert (
                drafted_tokens == s.n_accepted == sum(e.accepted for e in events if isinstance(e, StepEvent))
            )
            assert sum(e.emitted for e in events if isinstance(e, StepEvent)) == s.n_generated


def test_coupled_text_depends_on_the_seed_alone(tiny):
    """--verify coupled: the same seed gives the same text with any drafter, length or none; another
    seed or another generation of the session gives another."""
    from dataclasses import replace

    from cost_tables import clock

    from localspec.drafters.tree import TreeDrafter

    options = replace(model_options(), n_seq_max=3)
    sampled = SamplingParams(temperature=0.9, top_k=20)
    base = GenerationConfig(max_tokens=40, sampling=sampled, seed=11, verify="coupled", draft_mode="fixed")
    with (
        Model(tiny.target, options) as target,
        Model(tiny.close, options) as close,
        Model(tiny.poor, options) as poor,
    ):
        prompt = target.tokenize(PROMPTS[0])
        alone = drain(SpeculativeEngine(target, None).generate(prompt, base)).tokens
        engines = {
            "close": (SpeculativeEngine(target, DraftModelDrafter(close), "draft-model"), "fixed"),
            "poor": (SpeculativeEngine(target, DraftModelDrafter(poor), "draft-model"), "fixed"),
            "ngram": (SpeculativeEngine(target, NgramDrafter(), "ngram"), "fixed"),
            "tree": (SpeculativeEngine(target, TreeDrafter(close, 3), "tree"), "fixed"),
            "auto": (
                SpeculativeEngine(
                    target, DraftModelDrafter(close), "draft-model", clock({1: 1.0, 8: 1.2}, 0.1)
                ),
                "auto",
            ),
        }
        drafted = {}
        for name, (engine, mode) in engines.items():
            for draft_max in (2, 6):
                done = drain(engine.generate(prompt, replace(base, draft_max=draft_max, draft_mode=mode)))
                assert done.tokens == alone, (name, draft_max)
                drafted[name] = drafted.get(name, 0) + done.stats.n_drafted
                if name == "poor":
                    # Rejections happened, and changed nothing
                    assert done.stats.n_accepted < done.stats.n_drafted
        assert all(drafted[name] > 0 for name in ("close", "poor", "tree", "auto"))
        other_seed = drain(SpeculativeEngine(target, None).generate(prompt, replace(base, seed=12))).tokens
        second_reply = list(SpeculativeEngine(target, None).generate(prompt, base, generation=1))[-1].tokens
    assert other_seed != alone and second_reply != alone


def test_a_generation_abandoned_midway_still_ends_its_drafter(target: Model):
    """The consumer may stop reading (a client gone, a renderer raising): the drafter's `end`
    runs in the generator's `finally`, with the context as far as it went."""
    ended: list[list[int]] = []

    class Recording(NgramDrafter):
        def end(self, context) -> None:
            ended.append(list(context))

    prompt = target.tokenize(PROMPTS[0])
    events = SpeculativeEngine(target, Recording(), "ngram").generate(
        prompt, GenerationConfig(max_tokens=40, sampling=GREEDY, draft_mode="fixed")
    )
    tokens = []
    for ev in events:
        if isinstance(ev, TokenEvent):
            tokens.append(ev.token)
            if len(tokens) == 3:
                break
    assert not ended
    events.close()
    assert len(ended) == 1 and ended[0][: len(prompt) + 3] == [*prompt, *tokens]


@dataclass
class Swing:
    """CPU-like simulated costs (a 5-token pass costs 2.2 one-token passes) that triple once `after`
    simulated seconds have passed: another process took the cores mid-run."""

    after: float
    name: str = "swing"

    def _load(self, at: float) -> float:
        return 3.0 if at > self.after else 1.0

    def verify(self, batch: int, context: int, at: float) -> float:
        return 0.01 * (1 + 0.3 * (batch - 1)) * self._load(at)

    def draft(self, source: str, passes: int, at: float) -> float:
        return 0.002 * passes * self._load(at)


@pytest.mark.parametrize("after", [math.inf, 0.2])
def test_the_speedup_estimate_is_what_the_steps_did_whatever_the_load(
    tiny: TinyModels, target: Model, after: float
):
    """Each step is priced against a one-token pass at its own moment: the target alone reads 1x
    under any load, and a draft's estimate is the speedup it had against the target alone under
    the same costs, a load that triples mid-run included (simulated time: the truth is known)."""
    prompt = target.tokenize(PROMPTS[1])
    config = GenerationConfig(max_tokens=80, sampling=GREEDY, draft_max=4, draft_mode="auto")
    alone = drain(
        SpeculativeEngine(target, None, clock=SimulatedClock(Swing(after))).generate(prompt, config)
    ).stats
    assert alone.speedup_estimate == pytest.approx(1.0)
    with Model(tiny.close, model_options()) as d:
        spec = drain(
            SpeculativeEngine(
                target, DraftModelDrafter(d), "draft-model", clock=SimulatedClock(Swing(after))
            ).generate(prompt, config)
        ).stats
    truth = (alone.elapsed_s / alone.n_generated) / (spec.elapsed_s / spec.n_generated)
    assert spec.n_steps_drafted > 0 and spec.speedup_estimate == pytest.approx(truth, rel=0.1)


@pytest.mark.parametrize("max_tokens", [8, 14])
def test_the_speedup_estimate_of_a_short_run_counts_its_first_drafted_steps(
    tiny: TinyModels, target: Model, max_tokens: int
):
    """A run of a few steps (a JSON reply, a short answer) drafts at widths not timed before its
    step: each step is priced once the run is over, the first wide one too, so the estimate is the
    run's speedup and not that of its last step alone (simulated time: the truth is known)."""
    prompt = target.tokenize(PROMPTS[1])
    config = GenerationConfig(max_tokens=max_tokens, sampling=GREEDY, draft_max=8, draft_mode="auto")
    alone = drain(
        SpeculativeEngine(target, None, clock=SimulatedClock(Swing(math.inf))).generate(prompt, config)
    ).stats
    with Model(tiny.close, model_options()) as d:
        spec = drain(
            SpeculativeEngine(
                target, DraftModelDrafter(d), "draft-model", clock=SimulatedClock(Swing(math.inf))
            ).generate(prompt, config)
        ).stats
    truth = (alone.elapsed_s / alone.n_generated) / (spec.elapsed_s / spec.n_generated)
    assert spec.n_steps <= 6 and spec.n_steps_drafted > 0 and truth > 1.1
    assert spec.speedup_estimate == pytest.approx(truth, rel=0.15)
