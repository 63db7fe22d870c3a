"""Sampled output is distributed exactly as the target's, under every drafting setting.

On tiny models the target's exact distribution is cheap: p(x1) after the prompt and p(x2 | x1)
for every x1. Each configuration below generates N times with different seeds (N: the fewest
draws, up to N_DRAWS, at which the sizing below holds for its cells), and the empirical
distributions of the first token and of the pair are tested against the exact ones
(Pearson chi-square over the outcomes expected at least MIN_EXPECTED times, the rest pooled).

Sizing. Between the tested cells' distributions, a total variation t gives the chi-square a
noncentrality of at least 4 N t^2 (Cauchy-Schwarz), so `power_at` bounds from below the chance of
catching t = 0.05; `test_the_matrix_is_sized_to_catch_tv_005` holds that bound at >= 0.9 for every
configuration's actual cells at the draws it gets. Each of the matrix's 2 x len(MATRIX) tests runs
at level FAMILY_ALPHA / (2 x len(MATRIX)), so the chance of any false alarm over the whole run
stays under FAMILY_ALPHA (Bonferroni).

The matrix crosses the drafting modes (fixed, auto under each simulated cost profile, argmax
proposals, tree, prompt lookup, their chain, coupled verification, a datastore) pairwise with
--draft-min/--draft-p-min, with top-k/top-p/min-p and with vocabularies of different sizes (either
model padded): every pair of values of any two of these factors appears in some configuration.
Further families below: a real vocabulary's width, a grammar and penalties, and the target's own MTP
heads drafting."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
from conftest import model_options
from counting_tree import CountingTree
from scipy import stats
from tiny_drafters import write_dflash, write_gemma4_pair
from tiny_models import TinySpec, tiny_vocabulary, vocabulary, write_tiny_llama

from benchmarks.testbeds.eagle3_model import Eagle3Spec, write_eagle3_pair
from benchmarks.testbeds.mtp_model import MtpSpec, write_mtp_model
from localspec.backend.dflash import DFlashBlock
from localspec.backend.grammar import Grammar
from localspec.backend.model import Model
from localspec.backend.model_options import HeadFile, ModelOptions
from localspec.bench.profiles import RecordedProfile
from localspec.datastore import store
from localspec.datastore.meta import Meta, SourceFile
from localspec.datastore.store import Datastore
from localspec.drafters.base import Drafter, DraftSettings
from localspec.drafters.block import BlockDrafter
from localspec.drafters.chain import ChainDrafter
from localspec.drafters.draft_model import DraftModelDrafter
from localspec.drafters.mtp import MtpDrafter
from localspec.drafters.ngram import NgramDrafter
from localspec.drafters.suffix import SuffixDrafter
from localspec.drafters.suffix_cache import SuffixCache
from localspec.drafters.tree import TreeDrafter
from localspec.engine.clock import DriftProfile, GpuProfile, SimulatedClock
from localspec.engine.events import DoneEvent, StepEvent, TokenEvent
from localspec.engine.speculative import GenerationConfig, SpeculativeEngine
from localspec.sampling.dist import SamplingParams, distribution
from localspec.sampling.penalties import Penalties

N_DRAWS = 8000  # the most draws a configuration gets (`draws_for`: the fewest that keep the power)
DRAW_STEP = 500
MIN_EXPECTED = 20
POOLED_MIN = 1e-9  # a pooled rest of less mass is rounding, not outcomes
FAMILY_ALPHA = 1e-3
DETECTED_TV = 0.05
MIN_POWER = 0.9
DRAFT_MAX = 3
PAD = 16
BRANCHES = 3
PROMPT = "she sat"

PLAIN = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
FILTERED = SamplingParams(temperature=0.8, top_k=12, top_p=0.9, min_p=0.05)
# auto decides from timings: each vocabulary's auto case runs under a simulated cost profile,
# deterministic and as the controller would meet them: a CPU's shape (each verified token dear), a
# GPU's (wide passes cost about one token) and the CPU's drifting by +-30%. Costs are scaled so that
# drafting pays for this unsure pair, the draft's passes being cheap: auto then keeps a draft token
# only when it is likely accepted, which PROMPT's draft distribution straddles (its top token has
# q ~ 0.67 plain, 0.8 filtered): deciding by the drawn token's own q there would show at once. (Under
# the testbed's own cpu profile auto rightly stops drafting a pair this poor after its trial.)
CPU_SHAPE = RecordedProfile("cpu-shape", {1: 1.0, 2: 1.05, 3: 1.15, 4: 1.3}, {"draft-model": (0.0, 0.005)})
AUTO_PROFILES = {
    "same": CPU_SHAPE,
    "target-padded": GpuProfile(ratio=40),
    "draft-padded": DriftProfile(CPU_SHAPE, period=2),
}

# argmax: the draft model proposing its top token (--draft-policy greedy). ngram has no draft model
# to pad, so it gets two rows, whose combinations below are complementary.
MODES = ("fixed", "auto", "argmax", "tree", "ngram", "chain", "suffix", "coupled", "datastore")
LOOKUPS = ("ngram", "suffix", "datastore")  # no draft model to pad
VOCABS = ("same", "target-padded", "draft-padded")
# (draft-min/p-min, filtered), in an order that gives the audit's two findings a case each with
# both models' vocabularies alike: fixed with --draft-min, and auto.
COMBOS = ((True, False), (False, True), (False, False), (True, True))


@dataclass(frozen=True)
class Case:
    mode: str
    vocab: str
    draft_min: bool
    filtered: bool

    @property
    def id(self) -> str:
        suffix = ("-min" if self.draft_min else "") + ("-filtered" if self.filtered else "")
        return f"{self.mode}-{self.vocab}{suffix}"


def _matrix() -> list[Case]:
    """Mode x vocabulary in full; the two binary factors cycled so that every mode meets both values
    of each (three combinations, or ngram's two complementary ones) and every vocabulary meets all
    four combinations."""
    cases = []
    for i, mode in enumerate(MODES):
        for j, vocab in enumerate(VOCABS):
            if mode in LOOKUPS and vocab == "draft-padded":
                continue
            cases.append(Case(mode, vocab, *COMBOS[(i + j) % 4]))
    return cases


MATRIX = _matrix()
TEST_ALPHA = FAMILY_ALPHA / (2 * len(MATRIX))


def _options(**changes) -> ModelOptions:
    """A tiny model's options: one thread, as a pass this small is mostly the threads' handshake
    (8,000 draws took 20% less time than with two)."""
    return replace(model_options(), n_threads=1, n_threads_batch=1, **changes)


@dataclass(frozen=True)
class Pair:
    target: Path
    draft: Path
    padded_target: Path
    padded_draft: Path


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Pair:
    d = tmp_path_factory.mktemp("lossless")
    # Peaked enough that the pair's outcomes fit a few dozen cells, unsure enough that drafts are
    # often rejected.
    target = TinySpec(seed=21, logit_scale=0.6)
    draft = TinySpec(seed=22, perturb_from=21, perturb=0.25, logit_scale=0.6)
    return Pair(
        target=write_tiny_llama(d / "target.gguf", target),
        draft=write_tiny_llama(d / "draft.gguf", draft),
        padded_target=write_tiny_llama(d / "padded-target.gguf", replace(target, pad=PAD)),
        padded_draft=write_tiny_llama(d / "padded-draft.gguf", replace(draft, pad=PAD)),
    )


@pytest.fixture(scope="module")
def models(pair: Pair):
    opts = _options(n_seq_max=BRANCHES)
    loaded = {
        name: Model(getattr(pair, name), opts)
        for name in ("target", "draft", "padded_target", "padded_draft")
    }
    yield loaded
    for m in loaded.values():
        m.close()


def _engine(case: Case, models: dict[str, Model], stores: Sequence[Datastore] = ()) -> SpeculativeEngine:
    target = models["padded_target" if case.vocab == "target-padded" else "target"]
    draft = models["padded_draft" if case.vocab == "draft-padded" else "draft"]
    model = lambda: DraftModelDrafter(draft, target.n_vocab)  # noqa: E731
    drafter = {
        "fixed": model,
        "auto": model,
        "coupled": model,
        "argmax": model,
        "tree": lambda: TreeDrafter(draft, BRANCHES, target.n_vocab),
        "chain": lambda: ChainDrafter([NgramDrafter(), model()]),
        "ngram": NgramDrafter,
        # Earlier draws' outputs, counted: draft trees that branch where earlier draws went apart.
        "suffix": lambda: SuffixDrafter(SuffixCache(None, target.n_vocab, 1 << 16, print), BRANCHES),
        "datastore": lambda: SuffixDrafter(None, BRANCHES, stores),
    }[case.mode]()
    clock = SimulatedClock(AUTO_PROFILES[case.vocab]) if case.mode == "auto" else None
    return SpeculativeEngine(target, drafter, case.mode, clock)


GREEDY = 6


@pytest.fixture(scope="module")
def prompt(models) -> list[int]:
    """PROMPT, the target's greedy continuation, and PROMPT again: prompt lookup then proposes what
    the target would say, so its drafts are accepted now and then."""
    target = models["target"]
    start = target.tokenize(PROMPT)
    greedy = GenerationConfig(max_tokens=GREEDY, sampling=SamplingParams(temperature=0.0), draft_mode="fixed")
    done = [
        ev for ev in SpeculativeEngine(target, None).generate(start, greedy) if isinstance(ev, DoneEvent)
    ][0]
    return [*start, *done.tokens, *start[1:]]


@pytest.fixture(scope="module")
def stores(prompt) -> list[Datastore]:
    """A datastore on disk (the suite's data directory) of two files: the prompt's opening followed
    by the target's greedy tokens, and by those tokens reversed: its drafts are trees of two
    continuations, equally frequent."""
    k = next(
        k
        for k in range(GREEDY, -1, -1)
        if (len(prompt) + 1 - k) % 2 == 0
        and prompt[1 : (len(prompt) + 1 - k) // 2] == prompt[(len(prompt) + 1 + k) // 2 :]
    )
    n = (len(prompt) + 1 - k) // 2
    start, greedy = prompt[:n], prompt[n : n + k]
    texts = [[*start, *greedy], [*start, *greedy[::-1]]]
    files = [SourceFile(f"text{i}", 0, 0, "", (len(texts[0]) + 1) * i, len(t)) for i, t in enumerate(texts)]
    meta = Meta("lossless", "-", 0, "-", [], [], [], files, sum(map(len, texts)))
    store.write(meta, store.joined([np.array(t) for t in texts]))
    return [Datastore(meta, store.open_index(store.read_meta("lossless")))]


def _config(case: Case, seed: int) -> GenerationConfig:
    return GenerationConfig(
        max_tokens=DRAFT_MAX + 1,  # the first step may draft DRAFT_MAX tokens
        sampling=FILTERED if case.filtered else PLAIN,
        seed=seed,
        draft_max=DRAFT_MAX,
        draft_min=2 if case.draft_min else 0,
        draft_mode="auto" if case.mode == "auto" else "fixed",
        verify="coupled" if case.mode == "coupled" else "standard",
        drafting=DraftSettings(
            p_min=0.3 if case.draft_min else 0.0,
            policy="greedy" if case.mode == "argmax" else "sample",
            p_split=0.05,
            lookup_min=1,
            lookup_max=3,
        ),
    )


def exact_pairs(target: Model, prompt: list[int], params: SamplingParams) -> dict[tuple[int, ...], float]:
    """The target's exact distribution of its first two tokens (one token when the first ends it)."""
    p1 = distribution(target.sync(prompt), params)
    out: dict[tuple[int, ...], float] = {}
    for x1 in np.flatnonzero(p1):
        x1 = int(x1)
        if target.is_eog(x1):
            out[(x1,)] = float(p1[x1])
            continue
        p2 = distribution(target.sync([*prompt, x1]), params)
        for x2 in np.flatnonzero(p2):
            out[(x1, int(x2))] = float(p1[x1] * p2[x2])
    return out


def _cells(exact: dict, n: int) -> tuple[list, float]:
    """The outcomes tested one by one (expected >= MIN_EXPECTED times), and the pooled rest's mass
    (none below POOLED_MIN: what is left of a sum of floats)."""
    big = [k for k, p in exact.items() if p * n >= MIN_EXPECTED]
    rest = 1.0 - sum(exact[k] for k in big)
    return big, rest if rest >= POOLED_MIN else 0.0


def chi_square_pvalue(counts: Counter, exact: dict, n: int) -> float:
    big, rest = _cells(exact, n)
    observed = [counts[k] for k in big]
    expected = [exact[k] * n for k in big]
    if rest * n > 0:
        observed.append(n - sum(observed))
        expected.append(rest * n)
    assert sum(counts[k] for k in counts if k not in exact) == 0, "an outcome the target never emits"
    return float(stats.chisquare(observed, np.array(expected) * n / sum(expected)).pvalue)


def cells_tested(exact: dict, n: int) -> int:
    return _cell_count(_masses(exact), n)


def _masses(exact: dict) -> np.ndarray:
    """The outcomes' probabilities, largest first."""
    return -np.sort(-np.fromiter(exact.values(), dtype=float, count=len(exact)))


def _cell_count(masses: np.ndarray, n: int) -> int:
    """`_cells`'s count from `_masses`: a plain pair's outcomes are the vocabulary squared, and
    sizing looks at them for every number of draws it weighs."""
    big = int(np.count_nonzero(masses * n >= MIN_EXPECTED))
    return big + (1.0 - float(masses[:big].sum()) >= POOLED_MIN)


def draws_for(joint: dict, alpha: float) -> int:
    """The fewest draws, in steps of DRAW_STEP, at which the tests of both the pair and the first
    token catch DETECTED_TV with MIN_POWER at level alpha (N_DRAWS where none fewer does, and the
    power asserts then say whether that is enough). A configuration whose outcomes fit few cells
    needs fewer (a filtered one about 6,500 against a plain one's 8,000): each draw is a generation,
    and these tests are half the suite's time."""
    masses = [_masses(d) for d in (joint, first_of(joint))]
    for n in range(DRAW_STEP, N_DRAWS, DRAW_STEP):
        if all(power_at(DETECTED_TV, _cell_count(m, n), n, alpha) >= MIN_POWER for m in masses):
            return n
    return N_DRAWS


def power_at(tv: float, cells: int, n: int, alpha: float) -> float:
    """A lower bound on the chance that a chi-square test over `cells` cells at level alpha catches
    a total variation of `tv` between those cells' distributions."""
    df = cells - 1
    return float(stats.ncx2.sf(stats.chi2.isf(alpha, df), df, 4 * n * tv * tv))


def first_of(exact: dict) -> dict:
    out: Counter = Counter()
    for k, p in exact.items():
        out[k[:1]] += p
    return dict(out)


@pytest.fixture(scope="module")
def exact(models, prompt):
    cache: dict = {}

    def get(case: Case) -> dict:
        target = models["padded_target" if case.vocab == "target-padded" else "target"]
        key = (case.vocab == "target-padded", case.filtered)
        if key not in cache:
            cache[key] = exact_pairs(target, prompt, FILTERED if case.filtered else PLAIN)
        return cache[key]

    return get


def test_the_matrix_is_sized_to_catch_tv_005(exact):
    for case in MATRIX:
        joint = exact(case)
        n = draws_for(joint, TEST_ALPHA)
        for dist in (joint, first_of(joint)):
            assert power_at(DETECTED_TV, cells_tested(dist, n), n, TEST_ALPHA) >= MIN_POWER, (case.id, n)


def test_the_matrix_crosses_every_pair_of_factors():
    factors = [lambda c: c.mode, lambda c: c.vocab, lambda c: c.draft_min, lambda c: c.filtered]
    values = [MODES, VOCABS, (False, True), (False, True)]
    for a in range(4):
        for b in range(a + 1, 4):
            seen = {(factors[a](c), factors[b](c)) for c in MATRIX}
            wanted = {(x, y) for x in values[a] for y in values[b]} - {(m, "draft-padded") for m in LOOKUPS}
            assert wanted <= seen, (a, b, wanted - seen)


def draws(
    engine: SpeculativeEngine, prompt: list[int], config_of: Callable[[int], GenerationConfig], n: int
) -> tuple[Counter, Counter]:
    """Generate with seeds 0..n-1: the counts of the first two tokens, and of each generation's
    first step as (drafted, accepted). A generation is left once the step that brought its second
    token ends (the engine rewinds an abandoned one): what follows cannot change the two."""
    counts: Counter = Counter()
    steps: Counter = Counter()
    for seed in range(n):
        step, tokens = None, []
        events = engine.generate(prompt, config_of(seed))
        for ev in events:
            if isinstance(ev, TokenEvent):
                tokens.append(ev.token)
            elif isinstance(ev, StepEvent):
                step = step or (ev.drafted, ev.accepted)
                if len(tokens) >= 2:
                    break
            elif isinstance(ev, DoneEvent):
                break
        events.close()
        counts[tuple(tokens[:2])] += 1
        steps[step] += 1
    return counts, steps


def assert_drafts_were_both_accepted_and_rejected(steps: Counter, n: int) -> None:
    assert sum(c for (k, a), c in steps.items() if a > 0) > n // 20, steps
    assert sum(c for (k, a), c in steps.items() if a < k) > n // 20, steps


@pytest.mark.parametrize("case", MATRIX, ids=lambda c: c.id)
def test_sampled_output_is_the_targets(case: Case, models, prompt, exact, stores):
    engine = _engine(case, models, stores)
    joint = exact(case)
    n = draws_for(joint, TEST_ALPHA)
    counts, first_step = draws(engine, prompt, lambda seed: _config(case, seed), n)
    first: Counter = Counter()
    for k, c in counts.items():
        first[k[:1]] += c
    # The configuration must draft, see drafts both accepted and rejected, and under auto draft
    # partially (lengths that differ by draw), or it tests nothing.
    drafted = Counter()
    for (k, _), c in first_step.items():
        drafted[k] += c
    assert_drafts_were_both_accepted_and_rejected(first_step, n)
    if case.mode == "auto":
        assert sum(c for k, c in drafted.items() if 0 < k < DRAFT_MAX) > n // 20, drafted
    assert chi_square_pvalue(first, first_of(joint), n) > TEST_ALPHA
    assert chi_square_pvalue(counts, joint, n) > TEST_ALPHA


# --- a real vocabulary's width -------------------------------------------------------------------
# 262,144 ids (Gemma 3's), most of them a bulk of unlikely tokens holding a fifth of the mass at
# temp 1: the wide paths of sampling/ (top-k through block maxima, a float32 distribution over
# the whole vocabulary, residuals of a sparse q against it, two-level draws) under the engine.

WIDE_VOCAB = 262144
WIDE_DRAWS = 1000
WIDE_DRAFT = 2  # the first step drafts 2 tokens, so both tested positions meet the rule
WIDE_CASES = (("fixed", False), ("fixed", True), ("tree", True))  # (mode, filtered)
WIDE_ALPHA = FAMILY_ALPHA / (2 * len(WIDE_CASES))


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory):
    d = tmp_path_factory.mktemp("wide")
    pad = WIDE_VOCAB - len(vocabulary()[0])
    # Small layers: at this width a pass is mostly its output row of 262k logits.
    shape = dict(n_embd=16, n_head=2, n_ff=32, logit_scale=0.9, pad=pad, pad_below=7.0)
    target = TinySpec(seed=21, **shape)  # type: ignore[arg-type]
    draft = TinySpec(seed=22, perturb_from=21, perturb=0.25, **shape)  # type: ignore[arg-type]
    opts = _options(n_seq_max=BRANCHES)
    models = [
        Model(write_tiny_llama(d / f"{name}.gguf", spec), opts)
        for name, spec in (("target", target), ("draft", draft))
    ]
    yield models
    for m in models:
        m.close()


@pytest.mark.parametrize("mode,filtered", WIDE_CASES)
def test_sampled_output_is_the_targets_at_a_real_vocabulary_width(wide, mode: str, filtered: bool):
    target, draft = wide
    assert target.n_vocab == WIDE_VOCAB
    prompt = target.tokenize(PROMPT)
    params = FILTERED if filtered else PLAIN
    drafter = (
        TreeDrafter(draft, BRANCHES, target.n_vocab)
        if mode == "tree"
        else DraftModelDrafter(draft, target.n_vocab)
    )
    engine = SpeculativeEngine(target, drafter, mode)
    config = GenerationConfig(
        max_tokens=WIDE_DRAFT + 1,
        sampling=params,
        draft_max=WIDE_DRAFT,
        drafting=DraftSettings(p_split=0.05),
        draft_mode="fixed",
    )
    counts, steps = draws(engine, prompt, lambda seed: replace(config, seed=seed), WIDE_DRAWS)
    assert_drafts_were_both_accepted_and_rejected(steps, WIDE_DRAWS)
    first: Counter = Counter()
    for k, c in counts.items():
        first[k[:1]] += c
    if filtered:
        joint = exact_pairs(target, prompt, params)
        assert chi_square_pvalue(counts, joint, WIDE_DRAWS) > WIDE_ALPHA
        exact_first = first_of(joint)
    else:  # the pairs of a full support are too many to compute: the first token's
        p1 = distribution(target.sync(prompt), params)
        exact_first = {(int(t),): float(p1[t]) for t in np.flatnonzero(p1)}
        real = len(vocabulary()[0])
        tail = sum(p for (t,), p in exact_first.items() if t >= real)
        assert tail > 0.05  # the bulk holds real mass: a draw from the whole vocabulary is tested
    assert chi_square_pvalue(first, exact_first, WIDE_DRAWS) > WIDE_ALPHA


# --- under a grammar, and under penalties ---------------------------------------------------------
# The target's distribution over what a grammar allows (its forbidden tokens removed before top-k,
# top-p, min-p and temperature), with the draft proposing under the same grammar; and the target's
# under repetition penalties (each position penalised for the text before it, draft tokens
# included). The grammar lets through words (and pieces of words) that start with a-s, so both
# tested positions keep several outcomes, and takes away the mass of the rest (bytes, t-z, the end
# of text).

GRAMMAR = "root ::= ([ ]? [a-s] [a-z]*)+"
# After its first letter, text the grammar allows alone (drafted for free, one-hot, in a sampled
# draft): the second position keeps several outcomes (a space, " the", the space's byte token).
FORCED_GRAMMAR = 'root ::= [a-s] " the cat" [a-z]*'
PENALTIES = Penalties(last_n=16, repeat=1.3, frequency=0.4, presence=0.3)
SHAPED_CASES = (
    (Case("fixed", "same", False, True), GRAMMAR, False),
    (Case("tree", "same", False, False), GRAMMAR, False),
    (Case("coupled", "same", True, True), GRAMMAR, False),
    (Case("chain", "same", False, False), GRAMMAR, False),
    (Case("fixed", "same", False, False), None, True),
    (Case("tree", "same", True, True), GRAMMAR, True),
    (Case("fixed", "same", False, False), FORCED_GRAMMAR, False),
)
SHAPED_ALPHA = FAMILY_ALPHA / (2 * len(SHAPED_CASES))


def exact_shaped_pairs(
    target: Model, prompt: list[int], params: SamplingParams, gbnf: str | None
) -> dict[tuple[int, ...], float]:
    """exact_pairs under the penalties of `params` and the grammar `gbnf` (asked of the whole
    vocabulary at each position)."""
    ids = np.arange(target.n_vocab, dtype=np.int32)

    def dist(context: list[int], grammar: Grammar | None) -> np.ndarray:
        logits = target.sync(context).copy()
        params.penalties.apply(logits, context)
        if grammar is not None:
            logits = np.where(grammar.allowed(ids), logits, -np.inf).astype(np.float32)
        return distribution(logits, params)

    root = Grammar.compile(target.vocab, gbnf) if gbnf else None
    p1 = dist(prompt, root)
    out: dict[tuple[int, ...], float] = {}
    for x1 in map(int, np.flatnonzero(p1)):
        if target.is_eog(x1):
            out[(x1,)] = float(p1[x1])
            continue
        after = root.clone() if root else None
        if after:
            after.accept(x1)
        p2 = dist([*prompt, x1], after)
        for x2 in map(int, np.flatnonzero(p2)):
            out[(x1, x2)] = float(p1[x1] * p2[x2])
        if after:
            after.close()
    if root:
        root.close()
    return out


@pytest.mark.parametrize(
    "case,gbnf,penalised",
    SHAPED_CASES,
    ids=lambda v: (
        v.id
        if isinstance(v, Case)
        else (
            {GRAMMAR: "grammar", FORCED_GRAMMAR: "forced"}.get(v)
            if isinstance(v, str)
            else "penalties"
            if v is True
            else "-"
        )
    ),
)
def test_sampled_output_under_a_grammar_or_penalties_is_the_shaped_targets(
    case: Case, gbnf: str | None, penalised: bool, models, prompt
):
    engine = _engine(case, models)
    params = replace(FILTERED if case.filtered else PLAIN, penalties=PENALTIES if penalised else Penalties())
    joint = exact_shaped_pairs(models["target"], prompt, params, gbnf)
    # The shaping matters here
    assert joint != exact_shaped_pairs(models["target"], prompt, replace(params, penalties=Penalties()), None)
    n = draws_for(joint, SHAPED_ALPHA)
    for dist in (joint, first_of(joint)):
        assert power_at(DETECTED_TV, cells_tested(dist, n), n, SHAPED_ALPHA) >= MIN_POWER
    counts, steps = draws(
        engine, prompt, lambda seed: replace(_config(case, seed), sampling=params, grammar=gbnf), n
    )
    assert_drafts_were_both_accepted_and_rejected(steps, n)
    first: Counter = Counter()
    for k, c in counts.items():
        first[k[:1]] += c
    assert chi_square_pvalue(first, first_of(joint), n) > SHAPED_ALPHA
    assert chi_square_pvalue(counts, joint, n) > SHAPED_ALPHA


# --- the target's own MTP heads -------------------------------------------------------------------
# A target whose NextN head drafts (benchmarks/testbeds/mtp_model.py), unsure and perturbed enough
# that its drafts are often rejected, and reading the target's hidden states: alone at a fixed
# length, after prompt lookup, as a tree, and under auto for each simulated cost profile. Each case
# crosses --draft-min/--draft-p-min and top-k/top-p/min-p with another.

MTP_SPEC = MtpSpec(seed=23, n_layer=2, logit_scale=0.6, head_noise=0.25, h_weight=0.3)
MTP_CASES = (
    (Case("fixed", "same", False, True), None),
    (Case("fixed", "same", True, False), None),
    (Case("chain", "same", False, False), None),
    (Case("tree", "same", True, False), None),
    *(
        (Case("auto", vocab, i % 2 == 0, i % 2 == 1), profile)
        for i, (vocab, profile) in enumerate(AUTO_PROFILES.items())
    ),
)
# Three such heads chained, each drafting its own depth (mimo2), at a fixed length and under auto.
MTP_CHAINED_CASES = (
    (Case("fixed", "same", True, True), None),
    (Case("auto", "same", False, False), CPU_SHAPE),
)
MTP_ALPHA = FAMILY_ALPHA / (2 * (len(MTP_CASES) + len(MTP_CHAINED_CASES)))


def _mtp_target(folder: Path, spec: MtpSpec):
    """The MTP target, and PROMPT, its greedy continuation and PROMPT again (as `prompt`)."""
    # A tree's branches: sequences of target and head
    options = _options(mtp=True, n_seq_max=BRANCHES)
    return _with_prompt(Model(write_mtp_model(folder / "mtp.gguf", spec, tiny_vocabulary), options))


def _with_prompt(target: Model):
    start = target.tokenize(PROMPT)
    greedy = GenerationConfig(max_tokens=GREEDY, sampling=SamplingParams(temperature=0.0), draft_mode="fixed")
    done = [
        ev for ev in SpeculativeEngine(target, None).generate(start, greedy) if isinstance(ev, DoneEvent)
    ][0]
    return target, [*start, *done.tokens, *start[1:]]


@pytest.fixture(scope="module")
def mtp(tmp_path_factory: pytest.TempPathFactory):
    target, prompt = _mtp_target(tmp_path_factory.mktemp("mtp"), MTP_SPEC)
    yield target, prompt
    target.close()


@pytest.fixture(scope="module")
def mtp_chained(tmp_path_factory: pytest.TempPathFactory):
    target, prompt = _mtp_target(
        tmp_path_factory.mktemp("mtp"), replace(MTP_SPEC, arch="mimo2", heads=3, claimed_heads=3)
    )
    yield target, prompt
    target.close()


@pytest.mark.parametrize(
    "case,profile", MTP_CASES, ids=lambda v: v.id.replace("same", "mtp") if isinstance(v, Case) else None
)
def test_sampled_output_drafted_by_the_targets_heads_is_the_targets(case: Case, profile, mtp):
    _check_mtp(case, profile, *mtp)


@pytest.mark.parametrize(
    "case,profile",
    MTP_CHAINED_CASES,
    ids=lambda v: v.id.replace("same", "chained") if isinstance(v, Case) else None,
)
def test_sampled_output_drafted_by_several_chained_heads_is_the_targets(case: Case, profile, mtp_chained):
    target, prompt = mtp_chained
    assert target.head is not None and target.head.heads == 3
    _check_mtp(case, profile, target, prompt)


# Drafters in files of their own, each over a target it was made for (a fixture each), as a chain
# at a fixed length (or a tree):
# - an EAGLE-3 head (benchmarks/testbeds/eagle3_model.py), as unsure and perturbed, its residual
#   taking the target's state;
# - a DFlash block drafter over the same target that drafts every token of its block from the
#   target's own logits after the prompt, blurred (so that drafts are accepted and rejected): each
#   token sampled from its own row of the block, which never depends on the tokens drafted before;
#   (DSpark's rows, biased by its Markov head along the greedy chain, are functions of the context
#   alone as well, and sampled from the same way: tests/test_dflash.py checks its rows);
# - Gemma 4's assistant over a bigram Gemma 4 (tests/tiny_drafters.py's pair), drafting what the
#   target will say, less sure than it.
EAGLE3_SPEC = Eagle3Spec(seed=23, logit_scale=0.6, head_noise=0.25, g_weight=0.1)
HEAD_CASES = (
    ("eagle3", Case("fixed", "same", True, True)),
    ("eagle3", Case("tree", "same", False, False)),
    ("dflash", Case("fixed", "same", False, True)),
    ("gemma4-assistant", Case("fixed", "same", True, True)),
)


@pytest.fixture(scope="module")
def eagle3(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("eagle3")
    target_path, head = write_eagle3_pair(folder / "t.gguf", folder / "h.gguf", EAGLE3_SPEC, tiny_vocabulary)
    options = _options(head_file=HeadFile(head, EAGLE3_SPEC.layers), n_seq_max=BRANCHES)
    target, prompt = _with_prompt(Model(target_path, options))
    yield target, prompt
    target.close()


@pytest.fixture(scope="module")
def dflash(tmp_path_factory: pytest.TempPathFactory):
    """The EAGLE-3 test pair's target, and a DFlash drafter over it whose every row is the target's
    own logits after the prompt, blurred."""
    folder = tmp_path_factory.mktemp("dflash")
    target_path, _ = write_eagle3_pair(folder / "t.gguf", folder / "h.gguf", EAGLE3_SPEC, tiny_vocabulary)
    target, prompt = _with_prompt(Model(target_path, _options()))
    with target:
        target.prefill(prompt[:-1])
        after = np.asarray(target.decode(prompt[-1:], all_logits=False), dtype=np.float32)[0].copy()
    noise = np.random.default_rng(31).standard_normal(after.shape).astype(np.float32)
    layers = EAGLE3_SPEC.layers[:2]
    block = write_dflash(folder / "dflash.gguf", layers, block=DRAFT_MAX + 1, rows=0.7 * after + noise)
    target = Model(target_path, _options(head_file=HeadFile(block, layers, kind="dflash")))
    yield target, prompt
    target.close()


@pytest.fixture(scope="module")
def assistant(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("assistant")
    target_path, assistant = write_gemma4_pair(folder / "t.gguf", folder / "a.gguf", logit_scale=0.8)
    options = _options(head_file=HeadFile(assistant, (), kind="gemma4-assistant"))
    target, prompt = _with_prompt(Model(target_path, options))
    yield target, prompt
    target.close()


FIXTURES = {"eagle3": "eagle3", "dflash": "dflash", "gemma4-assistant": "assistant"}


@pytest.mark.parametrize("kind,case", HEAD_CASES, ids=[f"{kind}-{case.id}" for kind, case in HEAD_CASES])
def test_sampled_output_drafted_by_a_drafter_made_for_the_target_is_the_targets(
    kind: str, case: Case, request: pytest.FixtureRequest
):
    target, prompt = request.getfixturevalue(FIXTURES[kind])
    assert target.head is not None and target.head.kind == kind
    _check_mtp(case, None, target, prompt, FAMILY_ALPHA / (2 * len(HEAD_CASES)))


def _check_mtp(case: Case, profile, target: Model, prompt: list[int], alpha: float = MTP_ALPHA) -> None:
    assert target.head is not None
    if isinstance(target.head, DFlashBlock):
        heads: Drafter = BlockDrafter(target.head)
    else:
        heads = CountingTree(target.head, BRANCHES) if case.mode == "tree" else MtpDrafter(target.head)
    drafter = ChainDrafter([NgramDrafter(), heads]) if case.mode == "chain" else heads
    engine = SpeculativeEngine(target, drafter, case.mode, SimulatedClock(profile) if profile else None)
    joint = exact_pairs(target, prompt, FILTERED if case.filtered else PLAIN)
    n = draws_for(joint, alpha)
    for dist in (joint, first_of(joint)):
        assert power_at(DETECTED_TV, cells_tested(dist, n), n, alpha) >= MIN_POWER
    counts, first_step = draws(engine, prompt, lambda seed: _config(case, seed), n)
    assert_drafts_were_both_accepted_and_rejected(first_step, n)
    if case.mode == "auto":
        assert sum(c for (k, _), c in first_step.items() if 0 < k < DRAFT_MAX) > n // 20, first_step
    if case.mode == "tree":
        assert heads.branched > n // 20  # the head's trees branched
    first: Counter = Counter()
    for k, c in counts.items():
        first[k[:1]] += c
    assert chi_square_pvalue(first, first_of(joint), n) > alpha
    assert chi_square_pvalue(counts, joint, n) > alpha
