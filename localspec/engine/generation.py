"""A generation: what it reads (its config) and what it carries from step to step of the loop
(engine/speculative.py)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from localspec.backend.grammar import Grammar
from localspec.config.defaults import (
    DEFAULT_DRAFT_MAX,
    DEFAULT_DRAFT_MIN,
    DEFAULT_DRAFT_MODE,
    DEFAULT_MAX_TOKENS,
    DEFAULT_VERIFY,
)
from localspec.drafters.base import Draft, Drafter, DraftKey, DraftSettings
from localspec.engine.events import GenerationStats, TokenLogprob
from localspec.engine.text import TextStream
from localspec.sampling.dist import SamplingParams
from localspec.sampling.draws import Coupling


@dataclass(frozen=True)
class GenerationConfig:
    """What one generation reads (session/generation.py builds it from the validated settings)."""

    max_tokens: int = DEFAULT_MAX_TOKENS
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int | None = None
    stop: tuple[str, ...] = ()
    draft_max: int = DEFAULT_DRAFT_MAX
    # Whenever drafting, the first draft_min tokens are drafted unconditionally
    draft_min: int = DEFAULT_DRAFT_MIN
    # Fixed: up to draft_max every step; auto: the controller decides; off: none
    draft_mode: str = DEFAULT_DRAFT_MODE
    verify: str = DEFAULT_VERIFY  # standard: speculative sampling; coupled: Gumbel-max with keyed noise
    drafting: DraftSettings = field(default_factory=DraftSettings)
    # The target's log-probability of each emitted token, with this many alternatives (None: none).
    logprobs: int | None = None
    grammar: str | None = None  # GBNF the output must match (a JSON schema's, converted)


@dataclass
class StepCost:
    span: int
    width: int
    verify_s: float
    step_s: float
    shown: int = 0


@dataclass
class Run:
    """One generation's state, passed from step to step."""

    config: GenerationConfig
    cancel: threading.Event
    rng: np.random.Generator
    coupling: Coupling | None
    drafter: Drafter | None  # None: the target alone (--draft-mode off, or speculation turned off)
    stats: GenerationStats
    ctx: list[int]  # the prompt and every token emitted (and verified) so far
    stream: TextStream
    notes_before: int  # the controller's notes from earlier generations
    generated: list[int] = field(default_factory=list)
    stop_reason: str = ""
    t_gen: float = 0.0
    # Each step's verification (span of context, width, seconds), what the whole step took and the
    # tokens it showed, priced against the target alone at the end, by the costs learned by then.
    spent: list[StepCost] = field(default_factory=list)
    scored: list[TokenLogprob] = field(default_factory=list)  # the latest step's tokens, when asked for
    grammar: Grammar | None = None  # where config.grammar stands after the output so far

    @property
    def top_only(self) -> bool:
        """Whether the target's passes are read for their top tokens only (greedy, nothing shaping
        or scoring the logits)."""
        config = self.config
        return (
            config.sampling.greedy
            and config.sampling.penalties.off
            and self.grammar is None
            and config.logprobs is None
        )


@dataclass
class Proposal:
    """A step's draft, what drafting took, and whom the step is credited to."""

    draft: Draft
    seconds: float = 0.0
    judged_s: float = 0.0  # of those, what drafting cost (not catching up): what a verdict judges
    asked: DraftKey | None = None  # the drafter the step's budget let draft
