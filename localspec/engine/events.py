"""What the engine yields: consumers (run, chat, bench) render these and nothing else."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field

from localspec.config.defaults import DEFAULT_DRAFT_MODE


@dataclass(frozen=True)
class TokenLogprob:
    """The target's log-probability of an emitted token, and the likeliest tokens with theirs
    (see sampling/dist.py: token_logprobs)."""

    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class TokenEvent:
    token: int
    text: str  # text released by this token (may be empty or include held-back text)
    source: str | None  # the drafter that proposed it, or None for the target's own token
    logprob: TokenLogprob | None = None  # when the generation asked for them (GenerationConfig.logprobs)


@dataclass(frozen=True)
class StepEvent:
    drafter: str | None
    drafted: int
    accepted: int
    emitted: int


@dataclass(frozen=True)
class NoticeEvent:
    message: str


@dataclass(frozen=True)
class PromptEvent:
    """The prompt is evaluated: generation starts."""

    n_prompt: int
    n_evaluated: int  # what was not reused from the KV cache
    seconds: float
    drafter: str


@dataclass
class DrafterStats:
    drafted: int = 0
    accepted: int = 0


@dataclass
class GenerationStats:
    drafter: str = "none"
    draft_mode: str = DEFAULT_DRAFT_MODE
    n_prompt: int = 0
    n_prompt_evaluated: int = 0
    n_generated: int = 0
    n_drafted: int = 0
    n_forced: int = 0  # of those, tokens a grammar allowed alone, drafted without a draft pass
    n_accepted: int = 0
    n_steps: int = 0
    n_steps_drafted: int = 0
    prompt_s: float = 0.0  # the target's prompt pass and the drafter's start (its reading, or a part of it)
    target_prompt_s: float = 0.0  # of prompt_s, the target's own
    first_token_s: float = 0.0  # from the start of the generation (prompt included) to its first token
    elapsed_s: float = 0.0
    load_s: float = 0.0  # loading the models, where the generation waited for it (run)
    draft_load_s: float = 0.0  # of load_s, how long the draft's load outlasted the target's (docs/usage.md)
    drafters: dict[str, DrafterStats] = field(default_factory=dict)
    origins: dict[str, DrafterStats] = field(default_factory=dict)  # Draft.origin's, where given
    # The costs decisions rested on at the end (ms: a one-token target pass, one as wide as the
    # mean draft plus one, a draft call with its first pass and each later pass), and why auto
    # stopped a drafter, if it did.
    costs_ms: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # What the target alone would have taken for the same tokens, each step's at the moment's cost
    # of a one-token pass (its verification's time over what a pass that wide costs relative to one
    # token), and what the steps took (drafting and verification): their ratio is the speedup
    # estimate, so a load that swings mid-run moves both alike, and a step that yields one token
    # can never count as a gain.
    alone_s: float = 0.0
    steps_s: float = 0.0
    # The target's threads: at the end, the fewest it ran on (fewer while the machine was busy),
    # and the count it was given.
    threads: int = 0
    threads_fewest: int = 0
    threads_default: int = 0
    # Requests whose passes its target passes shared, on average (a server's --parallel; 1: alone)
    batch: float = 1.0

    @property
    def speedup_estimate(self) -> float:
        """Estimated speed against the target alone (0: no step to judge from). Never above the
        tokens per pass: no pass costs less than a one-token pass, so no speedup can be more."""
        if self.alone_s <= 0 or self.steps_s <= 0:
            return 0.0
        return min(self.alone_s / self.steps_s, self.mean_tokens_per_step)

    @property
    def end_to_end_estimate(self) -> float:
        """Estimated speed against the target alone as the person waited (0: no step to judge
        from): loading, the prompt and the generation, against the target's load and prompt pass
        and its generation at the estimated speedup. What a draft costs before its first token
        (its load, its reading) counts here, which the generation figure leaves out."""
        speedup = self.speedup_estimate
        if not speedup or self.elapsed_s <= 0:
            return 0.0
        alone = self.load_s - self.draft_load_s + self.target_prompt_s + self.elapsed_s * speedup
        return alone / (self.load_s + self.prompt_s + self.elapsed_s)

    @property
    def target_alone_tps(self) -> float:
        speedup = self.speedup_estimate
        return self.tokens_per_second / speedup if speedup else 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.n_accepted / self.n_drafted if self.n_drafted else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.n_generated / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def prompt_tokens_per_second(self) -> float:
        return self.n_prompt_evaluated / self.prompt_s if self.prompt_s > 0 else 0.0

    @property
    def mean_tokens_per_step(self) -> float:
        return self.n_generated / self.n_steps if self.n_steps else 0.0

    def record(self, source: str, drafted: int, accepted: int, origin: str = "", forced: int = 0) -> None:
        entries = [self.drafters.setdefault(source, DrafterStats())]
        if origin:
            entries.append(self.origins.setdefault(origin, DrafterStats()))
        for entry in entries:
            entry.drafted += drafted
            entry.accepted += accepted
        self.n_drafted += drafted
        self.n_forced += forced
        self.n_accepted += accepted

    def to_dict(self) -> dict:
        return {
            "n_prompt": self.n_prompt,
            "n_prompt_evaluated": self.n_prompt_evaluated,
            "n_generated": self.n_generated,
            "n_drafted": self.n_drafted,
            "n_forced": self.n_forced,
            "n_accepted": self.n_accepted,
            "n_steps": self.n_steps,
            "n_steps_drafted": self.n_steps_drafted,
            "acceptance_rate": round(self.acceptance_rate, 6),
            "mean_tokens_per_step": round(self.mean_tokens_per_step, 6),
            "tokens_per_second": round(self.tokens_per_second, 3),
            "elapsed_s": round(self.elapsed_s, 6),
            "prompt_tokens_per_second": round(self.prompt_tokens_per_second, 3),
            "prompt_s": round(self.prompt_s, 6),
            "target_prompt_s": round(self.target_prompt_s, 6),
            "first_token_s": round(self.first_token_s, 6),
            "load_s": round(self.load_s, 6),
            "draft_load_s": round(self.draft_load_s, 6),
            "drafter": self.drafter,
            "draft_mode": self.draft_mode,
            "costs_ms": self.costs_ms,
            "target_alone_tokens_per_second": round(self.target_alone_tps, 3),
            "speedup_estimate": round(self.speedup_estimate, 3),
            "end_to_end_estimate": round(self.end_to_end_estimate, 3),
            "threads": self.threads,
            "threads_fewest": self.threads_fewest,
            "threads_default": self.threads_default,
            "notes": self.notes,
            "drafters": {k: asdict(v) for k, v in self.drafters.items()},
            "origins": {k: asdict(v) for k, v in self.origins.items()},
        }


@dataclass(frozen=True)
class DoneEvent:
    stop_reason: str  # eos | length | stop | interrupted
    stats: GenerationStats
    tail: str  # text held back until the end (a partial stop string that never completed)
    text: str  # the whole generated text
    tokens: list[int]


Event = TokenEvent | StepEvent | NoticeEvent | PromptEvent | DoneEvent


def drain(events: Iterable[Event], each: Callable[[Event], None] = lambda _ev: None) -> DoneEvent:
    """Consume a generation's events, handing each to `each`; the DoneEvent that ends them."""
    done: DoneEvent | None = None
    for ev in events:
        each(ev)
        if isinstance(ev, DoneEvent):
            done = ev
    if done is None:
        raise AssertionError("the engine always ends with a DoneEvent")
    return done
