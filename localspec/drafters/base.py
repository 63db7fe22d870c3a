"""The drafter interface: given the context, propose tokens (and their draft probabilities), within
a budget that a draft-length controller (engine/controller.py) or a fixed cap sets."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from localspec.backend.grammar import Grammar
from localspec.config import defaults
from localspec.sampling.constrain import constrained
from localspec.sampling.dist import Dist, SamplingParams
from localspec.sampling.draws import Coupling


@dataclass(frozen=True)
class DraftSettings:
    """What drafters read per generation (chat's /set and a server's requests may change it)."""

    p_min: float = defaults.DEFAULT_DRAFT_P_MIN  # stop where the draft's top probability is lower
    policy: str = defaults.DEFAULT_DRAFT_POLICY  # at temp > 0: "sample" from q, or "greedy" argmax
    p_split: float = defaults.DEFAULT_DRAFT_P_SPLIT  # trees: a runner-up this likely opens a branch
    lookup_min: int = defaults.DEFAULT_LOOKUP_MIN  # prompt lookup: n-gram lengths matched
    lookup_max: int = defaults.DEFAULT_LOOKUP_MAX
    # A draft model's view of a long context (view.py); 0: all of it
    window: int = defaults.DEFAULT_DRAFT_WINDOW


@dataclass(frozen=True)
class DraftKey:
    """Whom a proposal's outcome is credited to. `drafter` owns the call's cost and the verdict on
    whether its drafting pays (trial, benching, probes); `kind` names what acceptance is learned
    for, when a drafter tells its proposals apart (prompt lookup: per match length); `lookup`
    marks text found rather than predicted, whose winning probe may be luck (a match that went on)."""

    drafter: str = ""
    kind: str = ""
    lookup: bool = False

    @property
    def estimates(self) -> str:
        return self.kind or self.drafter

    def of_kind(self, kind: str) -> DraftKey:
        return replace(self, kind=kind)


@dataclass(frozen=True)
class CatchUp:
    """What a drafter must read before it can draft: `tokens` not in its cache (a long prompt it
    has not read yet, or what was generated while it sat out), at `token_s` seconds each as it
    measured them (wall time)."""

    tokens: int
    token_s: float

    @property
    def seconds(self) -> float:
        return self.tokens * self.token_s


class Budget(Protocol):
    """How far a drafter may draft this step; the engine's controller implements it."""

    # --draft-min: whenever a drafter drafts at all, its first `floor` tokens are drafted without
    # consulting --draft-p-min, `keep` or `extend`, so that whether a sampled token is proposed never
    # depends on its value (a draft cut short after sampling would not be lossless).
    floor: int
    asked: DraftKey | None  # the drafter this budget let draft (the step is credited to it)
    # Whether the draft's confidence decides anything (auto's calibrated acceptance): at a fixed
    # length a greedy draft model needs only its argmax, one pass over the vocabulary, not three.
    calibrates: bool

    def limit(self, key: DraftKey, calibrated: bool = False, catch_up: CatchUp | None = None) -> int:
        """The most tokens `key` may draft this step (calibrated: it will ask `keep` and
        `extend` token by token, so only whether to draft at all is decided here; `catch_up`:
        what it must read first, which drafting must pay for)."""

    def acceptance(self, key: DraftKey, confidence: float) -> float:
        """How likely a token drafted with this confidence is accepted, once all before it were."""

    def prefers(self, found: Draft, other: DraftKey) -> bool:
        """Whether a found draft (prompt lookup's: a function of the context, so dropping it is
        exact) promises more than what `other` would draft in its place."""

    def keep(self, key: DraftKey, path_p: float, n: int) -> bool:
        """Whether the n-th drafted token (1-based), accepted with probability path_p together with
        all tokens before it, is worth verifying."""

    def extend(self, key: DraftKey, path_p: float, n: int) -> bool:
        """Whether drafting an (n+1)-th token after the n-th (path probability path_p) pays."""

    def offer(self, key: DraftKey, path_p: float, n: int) -> float:
        """What drafting an (n+1)-th token is worth, for a model that may decline the pass (a
        server's lane, whose batch decides): inf, whatever it costs; 0, not at all; between, the
        tokens the generation expects to gain by it."""


@dataclass
class Draft:
    tokens: list[int] = field(default_factory=list)
    # The distribution each token was sampled from, when the drafter samples; None marks
    # deterministic proposals (the whole draft's, or one token's), which the target verifies as
    # one-hot drafts.
    probs: list[Dist | None] | None = None
    key: DraftKey = field(default_factory=DraftKey)
    # For a draft tree: each token's parent (an earlier index, or -1 for the context's last token).
    # None means a chain, each token following the one before.
    parents: list[int] | None = None
    # How sure the drafter was of each token (its probability under the draft), for the
    # controller to calibrate; None when the drafter has no such measure.
    confidences: list[float] | None = None
    passes: int = 0  # draft-model passes this proposal took (what its call cost is modelled by)
    # Seconds of the call spent catching up with what was generated while the draft sat out: no
    # cost of drafting (its estimate and a probe's verdict leave it out; the clock does not).
    catch_up_s: float = 0.0
    # Seconds of the call's first pass, which takes in the tokens accepted since the last call (two
    # after a full acceptance): a two-token pass costs more than the one-token passes after it
    # (1.65x on the demo pair's CPU), so the two are priced apart.
    first_pass_s: float = 0.0
    # Seconds of each later pass, in order, where the drafter timed them apart: a chain of MTP
    # heads re-reads the verified tokens at each head up to the last, so its second and third
    # passes cost more than the deeper ones (4.1-5.0 ms against 3.2-3.6 on the testbed).
    pass_s: list[float] = field(default_factory=list)
    # What the proposal was found in, for a drafter that looks in several places (suffix
    # drafting: "datastore" when a datastore gave it); counted apart in the stats' origins.
    origin: str = ""
    forced: int = 0  # tokens a grammar allowed alone, drafted without a draft pass (backend/forced.py)
    # One pass drafted every token (a block drafter's): the call costs the same at any length.
    flat: bool = False

    @property
    def source(self) -> str:
        return self.key.drafter

    def __len__(self) -> int:
        return len(self.tokens)


def shaped(
    logits: np.ndarray,
    context: Sequence[int],
    drafted: Sequence[int],
    params: SamplingParams,
    grammar: Grammar | None,
) -> np.ndarray:
    """A draft's logits after `context` and the tokens it drafted since, under the penalties and
    the grammar (where it stands after them) that the target's row there gets: a drafter that
    chooses from these proposes what the target can accept."""
    logits = params.penalties.penalised(logits, context, drafted)
    return constrained(logits, params, grammar.allowed) if grammar is not None else logits


class Drafter(Protocol):
    name: str
    key: DraftKey  # what its proposals are credited to (a lookup adds its match length as kind)

    def begin(self, context: Sequence[int], settings: DraftSettings, coupling: Coupling | None = None) -> int:
        """A new generation starts from `context` (the whole prompt) under `settings`: index or
        prefill it; return how many tokens a model evaluated for it (0: a lookup only indexes),
        what a simulated clock prices. With `coupling` (--verify coupled at temp > 0) a drafter
        that samples proposes the coupled choice under its own distribution instead."""

    def propose(
        self,
        context: Sequence[int],
        budget: Budget,
        params: SamplingParams,
        rng: np.random.Generator,
        grammar: Grammar | None = None,
    ) -> Draft:
        """Propose up to budget.limit(self.key) tokens that continue `context`. Under a `grammar`
        (where it stands after `context`) a drafter that samples draws from its constrained q;
        a lookup may ignore it (the engine cuts a lookup chain where the grammar stops it, and
        the target's rows are constrained either way)."""

    def end(self, context: Sequence[int]) -> None:
        """The generation begun last ended with `context` (a drafter that learns across
        generations keeps its output)."""

    def close(self) -> None: ...
